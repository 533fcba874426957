"""Which patch serves each call a model's forward makes, from its config alone: no GPU, no SGLang run.

Why: a patch serves only where its guard takes the call, and a derived guard is a list of regions, the shapes
where the patch was measured faster than what SGLang serves. Its outer ``dims`` box says little: on 2026-12-07 the
stack planned for a Qwen3-30B-A3B end-to-end run held two decode-attention patches whose boxes hold GQA 8 with 4
KV heads but whose regions take no such call at batch 32 or 128, and the w2 MoE retune, which serves T 16, 64 and
256 only. `e2e` counts served calls after a GPU run; this says before one which patch would serve, and why not.

The dims are those SGLang's forward calls the op with (``traffic.forward_dims``: the same dims the profile counts
bytes at); the choice between patches of one op is the plugin's (``patches.install``): a rewrite in front of a
retune of its op, under its ``guard_in_front`` for that retune when it has one (and only while that retune serves:
one standing aside on this GPU leaves the rewrite its own guard), hands every call it does not take to the retune,
whose own guard decides; what neither takes goes to SGLang's kernel. Runtime-only conditions
(alignment, contiguity, the first-call check) are not judged here.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import Field

from astra_sglang.contract.base import Model
from astra_sglang.contract.patch import GuardSpec, PatchManifest, box_takes
from astra_sglang.errors import AstraError
from astra_sglang.profile.traffic import DEFAULT_KV_SPLITS, calls_per_step, forward_dims

if TYPE_CHECKING:
    from astra_sglang.patches.adapters.base import OpAdapter


@dataclass(frozen=True)
class RecordPoint:
    """The shape nearest a served call that the serving patch's records timed on this GPU, against the kernel
    SGLang serves there: what the call should save. Why: stop 57's e2e (H100) matched 32 calls a step times these
    savings at every batch it ran (bs 128: 0.873 predicted, 0.867 [0.838, 0.886] measured), so a record is a
    forecast of the step, and a step that misses it says the forward differs from what was timed."""

    dims: dict[str, int]
    served_us: float
    candidate_us: float

    @property
    def saved_us(self) -> float:
        return self.served_us - self.candidate_us

    def text(self) -> str:
        shape = " ".join(f"{k}={v}" for k, v in self.dims.items())
        return f"{self.served_us:.1f} -> {self.candidate_us:.1f} us at {shape}"


@dataclass(frozen=True)
class CoverageRow:
    """One patch at one call of the forward: whether it would serve it, and if not, why."""

    phase: str
    batch_size: int
    op: str
    patch_id: str
    dims: dict[str, int]
    serves: bool
    why: str
    record: RecordPoint | None = None


class StepSaving(Model):
    """The kernel time one step of the forward should lose to the patches that serve it, from their records:
    calls per step times what each call saves, for the ops whose calls per step the config gives. A model, as
    e2e keeps it in its run folder (e2e/forecast.py)."""

    phase: str
    batch_size: int
    input_len: int | None = Field(default=None, description="the e2e shape's prompt length (None: any, as "
                                  "written before forecasts named it)")
    output_len: int | None = Field(default=None, description="the e2e shape's new tokens (None: any)")
    saved_us: float = Field(description="calls per step x each call's saving at the record most like the call")
    parts: list[str] = Field(default_factory=list, description="per serving op: calls, saving, the record used")
    uncounted: list[str] = Field(default_factory=list, description="serving ops whose saving is not known")


def _outside(spec: GuardSpec, dims: dict[str, int], dtype: str, gpu: str | None = None) -> str | None:
    """Why ``spec`` does not take a call of these dims and dtype on ``gpu`` (None: it does): on a GPU it was
    measured on among others, its boxes there (``GuardSpec.on_gpu``), as the plugin narrows it at activation."""
    guard = spec.on_gpu(gpu)
    if guard is None:
        return (f"serves nothing on {gpu}: no shape timed there won (at both ends of any size its guard cannot see: "
                "decode attention's KV length S; `patches verify ID --record` on this GPU times the S 512 twins)")
    on = f" on {gpu}" if gpu and spec.gpu_regions else ""
    if dtype not in guard.dtypes:
        return f"dtype {dtype} not in its guard ({', '.join(guard.dtypes)})"
    for name, r in guard.dims.items():
        if name in dims and not r.accepts(dims[name]):
            return f"{name}={dims[name]} outside its guard's {name} {r.min}..{r.max if r.max is not None else ''}"
    if guard.regions and not guard.accepts_dims(dims):
        return (f"in none of its {len(guard.regions)} measured region(s){on} (it serves only shapes where it was "
                "timed faster)")
    return None


NEAR = 0.1  # a size within 10% of a measured end counts as measured (a context of 1024 beside records at 1033)


def _unmeasured(m: PatchManifest, guard: GuardSpec, dims: dict[str, int], gpu: str | None,
                unseen: tuple[str, ...]) -> str:
    """For a call ``m`` serves under ``guard``: where a size the guard cannot see (``unseen``: the adapter's
    ``unseen_sizes``) lies more than ``NEAR`` outside every value its records measured inside the guard's box that
    takes the call, on this GPU, said. 2026-12-07, H100: both decode-attention patches served boxes won at S
    1033..8201 and were 0.96x / 0.93x at S 512."""
    from astra_sglang.platform_info import same_gpu

    box = (guard.on_gpu(gpu) or guard).region_of(dims) if unseen else None
    if box is None:
        return ""
    rows = [r for r in m.evidence.guard_table
            if box_takes(box, r.dims) and (gpu is None or r.gpu is None or same_gpu(r.gpu, gpu))]
    out = []
    for name in unseen:
        vals = sorted({r.dims[name] for r in rows if name in r.dims})
        if name in dims and vals and not vals[0] * (1 - NEAR) <= dims[name] <= vals[-1] * (1 + NEAR):
            out.append(f"; {name}={dims[name]} outside the {name} {vals[0]}..{vals[-1]} its records measured in "
                       "this box (its guard cannot see it)")
    return "".join(out)


def _nearest_record(m: PatchManifest, dims: dict[str, int], dtype: str, gpu: str | None,
                    unseen: tuple[str, ...]) -> RecordPoint | None:
    """The row of ``m``'s guard table timed on ``gpu`` at this call's guard dims that is most like the call: fewest
    other dims differing (a uniform batch is not a ragged one; q in the qkv rows is not a contiguous q: the rewrite
    saved 67.6 us a call at B 128 in its eager-form record, 48.5 us in the served form, H100), then nearest in the
    sizes the guard cannot see (log scale: context 1024 takes 1033, not 512), then the newest. None without a GPU
    name or such a row: another GPU's timing or another shape forecasts nothing."""
    from astra_sglang.platform_info import same_gpu

    if gpu is None:
        return None
    keys = [k for k in m.guard.dims if k in dims and k not in unseen]
    # a row from before rows named their GPU is the patch's one GPU's, where it was validated on one only
    only = m.validated_on.gpus[0] if len(m.validated_on.gpus) == 1 else None
    rows = [(i, r) for i, r in enumerate(m.evidence.guard_table)
            if (r.gpu or only) and same_gpu(r.gpu or only or "", gpu) and r.dtype == dtype and r.served_us
            and r.candidate_us and all(r.dims.get(k) == dims[k] for k in keys)]

    def unlike(item: tuple[int, Any]) -> tuple[int, float, int]:
        i, r = item
        others = sum(1 for k, v in dims.items() if k not in keys and k not in unseen and r.dims.get(k, 0) != v)
        far = sum(abs(math.log(r.dims[k] / dims[k])) for k in unseen if r.dims.get(k) and dims.get(k))
        return others, far, -i

    if not rows:
        return None
    best = min(rows, key=unlike)[1]
    shown = {k: v for k, v in best.dims.items() if k in keys or k in unseen or dims.get(k) == v}
    return RecordPoint(shown, best.served_us or 0.0, best.candidate_us or 0.0)


# models (config model_type) whose attention hands decode attention q as a view of the fused qkv rows: SGLang
# 0.5.23's forward splits qkv_proj's output, ropes q and k in place and calls attention, as LLaMA's does (the
# adapter's dim QS 1), so their calls are forecast from records of that form. Qwen3 and OLMo2 normalize q first
# (a copy): contiguous; a model not listed is forecast from the contiguous form.
QKV_VIEW_MODELS = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma", "internlm2", "exaone"})


HOPPER = re.compile(r"\bG?H(100|200|800|20)\b")  # sm_90 data-center parts, as torch names them
BLACKWELL = re.compile(r"\bG?B(200|300)\b")  # sm_100/103: trtllm_mha (SM120 parts are not these)


def default_attention_backend(config: dict[str, Any], gpu: str | None) -> str | None:
    """The attention backend SGLang 0.5.23 picks when ``--attention-backend`` is not given, for the cases this can
    judge from a config and a GPU name (``get_default_attn_backend``, sglang/srt/arg_groups/model_override_base.py,
    read 2026-12-07): on Hopper (CUDA 12.3+ assumed) fa3 for MHA and MLA models alike; on a B200-class GPU
    trtllm_mha for MHA; elsewhere FlashInfer where installed (assumed). Speculative decoding with top-k above 1 is
    not judged. None without a GPU name."""
    if not gpu:
        return None
    name = gpu.upper()
    if HOPPER.search(name):
        return "fa3"
    if not config.get("kv_lora_rank") and BLACKWELL.search(name):  # MLA (kv_lora_rank) takes FlashInfer there
        return "trtllm_mha"
    return "flashinfer"


def _backend_problem(wanted: tuple[str, ...], backend: str | None, chosen: bool) -> str | None:
    """Why a server on ``backend`` never reaches a patch whose op only the ``wanted`` backends call, else None."""
    if not wanted or backend is None or backend in wanted:
        return None
    how = (f"--attention-backend {backend}" if chosen else
           f"SGLang's default attention backend for this model on this GPU, {backend} (get_default_attn_backend)")
    return f"called only by the {'/'.join(wanted)} attention backend; this server runs {how}"


def _adapter(op: str) -> OpAdapter | None:
    """The op's patch adapter (its backends and unseen sizes), once per op; None where it has none."""
    from astra_sglang.patches.adapters import get_adapter

    try:
        return get_adapter(op)
    except Exception:  # noqa: BLE001 - no adapter (or it cannot load here): no backend rule, no unseen sizes
        return None


def _stand_aside(m: PatchManifest, gpu: str | None) -> str | None:
    """The plugin's GPU-model gate (``registry.gpu_model_problem``, what its first call checks) for a named GPU: a
    retune refused by it leaves the rewrite in front of it its own guard at run time, and here."""
    from astra_sglang.patches.registry import gpu_model_problem

    problem = gpu_model_problem(m, gpu)
    return None if problem is None else f"stands aside on {gpu}: {problem}"


def _op_rows(phase: str, batch: int, op: str, dims: dict[str, int], dtype: str, patches: list[PatchManifest],
             gpu: str | None, backend: tuple[str | None, bool] = (None, False),
             adapter: OpAdapter | None = None) -> list[CoverageRow]:
    """The patches of one op at one call, the rewrite first (it stands in front), then the retune."""
    retunes = [m for m in patches if m.source.retune]
    rewrites = [m for m in patches if not m.source.retune]
    behind = retunes[0].patch_id if len(retunes) == 1 and len(rewrites) == 1 else ""
    if behind and _stand_aside(retunes[0], gpu):
        behind = ""  # the runtime's rule: a retune that stands aside leaves the rewrite its own guard
    rows: list[CoverageRow] = []
    taken_by = ""
    for m in rewrites + retunes:
        guard, front = m.guard, ""
        if not m.source.retune and behind and behind in m.guard_in_front:
            guard, front = m.guard_in_front[behind], f" (its guard in front of {behind})"
        wanted = adapter.backends if adapter is not None else ()
        why = _backend_problem(wanted, *backend) or _stand_aside(m, gpu) or _outside(guard, dims, dtype, gpu)
        if why is None and taken_by:
            why = f"{taken_by} serves it, standing in front"
        if why is None:
            taken_by = taken_by or m.patch_id
        shown = {k: v for k, v in dims.items() if k in m.guard.dims}  # what its guard judges, not the byte dims
        unseen = adapter.unseen_sizes if adapter is not None else ()
        unmeasured = _unmeasured(m, guard, dims, gpu, unseen) if why is None else ""
        record = _nearest_record(m, dims, dtype, gpu, unseen) if why is None else None
        rows.append(CoverageRow(phase, batch, op, m.patch_id, shown, why is None,
                                f"serves{front}{unmeasured}" if why is None else why + front, record))
    return rows


def step_savings(config: dict[str, Any], rows: list[CoverageRow]) -> list[StepSaving]:
    """Per phase and batch size: the kernel time a step should lose, summed over the serving rows whose record
    and calls per step are known; the others named, not guessed."""
    out: dict[tuple[str, int], StepSaving] = {}
    for r in rows:
        step = out.setdefault((r.phase, r.batch_size), StepSaving(phase=r.phase, batch_size=r.batch_size,
                                                                 saved_us=0.0))
        if not r.serves:
            continue
        calls = calls_per_step(config, r.op, r.phase)
        if r.record is None or calls is None:
            step.uncounted.append(f"{r.op} by {r.patch_id}: " + ("no record of it on this GPU at these dims"
                                                                  if r.record is None else "its calls per step "
                                                                  "do not follow from the config"))
            continue
        step.saved_us += calls * r.record.saved_us
        step.parts.append(f"{r.op} by {r.patch_id}: {calls} calls x {r.record.saved_us:.1f} us ({r.record.text()})")
    return list(out.values())


def mean_decode_context(input_len: int, output_len: int) -> int:
    """The KV length a decode call sees on average over a request's steps (prompt, growing by one a step): the
    forecast reads each call's record there (a 1024-token prompt with 14,336 new tokens decodes at 8,192)."""
    return input_len + output_len // 2


def coverage(config: dict[str, Any], patches: list[PatchManifest], batch_sizes: list[int], phases: list[str],
             input_len: int, dtype: str, gpu: str | None = None, page_size: int = 1,
             max_kv_splits: int = DEFAULT_KV_SPLITS, tp_size: int = 1,
             attention_backend: str | None = None, context: int | None = None) -> tuple[list[CoverageRow], list[str]]:
    """A row per patch and call of the forward (phase x batch size) whose dims follow from the config, and a note
    for each patch whose op's dims do not (merge_state: FlashInfer's cascade, not this forward's shape).
    ``attention_backend``: SGLang's ``--attention-backend``; None: the one SGLang picks for this model on ``gpu``
    (``default_attention_backend``; not judged without a GPU). ``context``: the KV length a decode call sees
    (None: the prompt length); it enters no guard, only which record a call is forecast from."""
    backend = (attention_backend, True) if attention_backend else (default_attention_backend(config, gpu), False)
    if not patches:
        raise AstraError("no patches to check: the registry is empty, or none of the ids named is in it")
    rows: list[CoverageRow] = []
    notes: set[str] = set()
    by_op: dict[str, list[PatchManifest]] = {}
    for m in patches:
        by_op.setdefault(m.op, []).append(m)
    adapters = {op: _adapter(op) for op in by_op}
    for phase in phases:
        for batch in batch_sizes:
            dims, skipped = forward_dims(config, phase, batch, input_len, context or input_len, max_kv_splits,
                                         tp_size)
            for op, ms in sorted(by_op.items()):
                if op not in dims:
                    why = next((s for s in skipped if op in s.split(":")[0]), None)
                    notes.add(f"{op} ({', '.join(m.patch_id for m in ms)}): "
                              + (why.split(":", 1)[1].strip() if why else
                                 f"its call's dims in a {phase} forward do not follow from the model config"))
                    continue
                d = dict(dims[op])
                if "P" in d:
                    d["P"] = page_size
                if op == "decode_attention" and config.get("model_type") in QKV_VIEW_MODELS:
                    d["QS"] = 1
                rows.extend(_op_rows(phase, batch, op, d, dtype, ms, gpu, backend, adapters[op]))
    return rows, sorted(notes)


def as_json(rows: list[CoverageRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def _values(args: list[str], flag: str) -> list[str]:
    """Every value after ``flag`` up to the next option (``--batch-size 1 32 128``), or its ``=`` form."""
    out: list[str] = []
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            out = [a[len(flag) + 1:]]
        elif a == flag:
            out = []
            for v in args[i + 1:]:
                if v.startswith("--"):
                    break
                out.append(v)
    return out


def _gpu_name() -> str | None:
    """The first GPU's name as torch spells it, from nvidia-smi: the parent of an e2e run must not hold a CUDA
    context of its own beside the forward it measures."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, check=False).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out else None


class ForwardRows(NamedTuple):
    """An e2e forward's decode coverage rows per (prompt length, new tokens) shape it runs: which patch serves a
    call does not depend on them (no guard sees the KV length), the record it is forecast from does."""

    config: dict[str, Any]
    by_length: dict[tuple[int, int], list[CoverageRow]]
    gpu: str | None

    @property
    def rows(self) -> list[CoverageRow]:
        """One shape's rows: enough to say which patch serves which batch, which no length changes."""
        return next(iter(self.by_length.values()), [])


def forward_rows(one_batch_args: list[str], patches_value: str) -> ForwardRows | None:
    """Before an e2e run: the decode coverage rows of its forward on this machine's GPU, from the
    ``--model-path`` folder's config.json, for ``idle_patch_lines`` and ``forward_savings`` alike; None when that is
    not a local folder (a Hub id), no patch is selected, or one_batch would refuse the arguments itself, in its own
    words."""
    from astra_sglang.patches.registry import discover, selected
    from astra_sglang.profile.traffic import load_config, model_dtype
    from astra_sglang.serving.launch import flag_value

    model = flag_value(one_batch_args, "--model-path", "--model")
    cfg = Path(model).expanduser() / "config.json" if model else None
    if cfg is None or not cfg.is_file():
        return None
    try:
        batches = [int(v) for v in _values(one_batch_args, "--batch-size")] or [1]
        inputs = [int(v) for v in _values(one_batch_args, "--input-len")] or [1024]  # one_batch's defaults
        outputs = [int(v) for v in _values(one_batch_args, "--output-len")] or [16]  # (BenchArgs)
        page = int(flag_value(one_batch_args, "--page-size") or 1)
        tp = int(flag_value(one_batch_args, "--tp-size", "--tensor-parallel-size") or 1)
    except ValueError:
        return None
    config = load_config(cfg)
    chosen = [e.manifest for e in selected(discover(), patches_value)[0] if e.manifest is not None]
    if not chosen:
        return None
    gpu = _gpu_name()
    dtype = model_dtype(config, flag_value(one_batch_args, "--dtype"))
    backend = flag_value(one_batch_args, "--attention-backend")
    by_length = {}
    for il in inputs:
        for ol in outputs:
            by_length[(il, ol)] = coverage(config, chosen, batches, ["decode"], il, dtype, gpu=gpu, page_size=page,
                                           tp_size=tp, attention_backend=backend,
                                           context=mean_decode_context(il, ol))[0]
    return ForwardRows(config, by_length, gpu)


def idle_patch_lines(found: ForwardRows | None) -> list[str]:
    """Each selected patch that would serve none of the forward's decode calls, with why. A warning, not a
    refusal: the served counts after the run are the verdict, and a runtime condition may differ."""
    if found is None:
        return []
    lines = []
    for pid in sorted({r.patch_id for r in found.rows}):
        mine = [r for r in found.rows if r.patch_id == pid]
        if not any(r.serves for r in mine):
            whys = sorted({r.why for r in mine})
            lines.append(f"{pid} would serve none of this forward's decode calls (batch "
                         f"{', '.join(str(r.batch_size) for r in mine)}; GPU {found.gpu or 'not named'}): "
                         f"{'; '.join(whys)} (`astra-sglang patches coverage`)")
    return lines


def forward_savings(found: ForwardRows | None) -> tuple[str, list[StepSaving]] | None:
    """Per batch shape (batch size, prompt length, new tokens), the decode step time the forward's serving patches
    should save by their records on this GPU (``step_savings``), and the GPU's name; None without a GPU name or a
    local model config."""
    if found is None or found.gpu is None:
        return None
    return found.gpu, [step.model_copy(update={"input_len": il, "output_len": ol})
                       for (il, ol), rows in found.by_length.items() for step in step_savings(found.config, rows)]
