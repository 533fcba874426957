"""The GPU path of ``profile``: SGLang's ``one_batch`` forward, twice, then the attribution of its traces.

Pass 1 runs with CUDA graphs off and the torch profiler on (a replayed graph shows as one graph launch, not as
its kernels, so attribution needs graphs off); pass 2 runs with graphs on and no profiler, for the step time a
server sees. Both run ``one_batch_child`` (one_batch after ``load_plugins()``) in a child process with the
caller's ``ASTRA_SGLANG_PATCHES``. The trace files are the ones one_batch names
(``<prefix>_batch<bs>_input<in>_output<out>_<stage>.trace.json.gz`` in ``SGLANG_TORCH_PROFILER_DIR``).
Bytes moved come from the ``--model-path`` folder's ``config.json`` (``traffic``: the covered ops' contracts at the
dims of this forward) and the copy ceiling is measured once here, before the children start.
Nothing here runs without a GPU: it is kept thin, the attribution it calls is tested on CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.profile.attribution import HotList, KernelMap, PatchInfo, hot_list, served_calls
from astra_sglang.profile.chunked_prefill import ENV_PREFILL_TOKENS, child_env
from astra_sglang.profile.trace import summarize
from astra_sglang.profile.traffic import DEFAULT_KV_SPLITS, Traffic, count, load_config, model_dtype
from astra_sglang.serving.launch import flag_value

NEEDS_GPU = "profile needs a CUDA GPU and SGLang; attribute a recorded trace with --trace FILE"
PREFIX = "astra"
WARMUP_STEPS = 8  # decode steps before the profiled ones (the measurement's --profile-start-step)


def require_gpu() -> None:
    """One line, no traceback, when this host cannot run the forward."""
    if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
        raise AstraError(NEEDS_GPU)
    import torch

    if not torch.cuda.is_available():
        raise AstraError(NEEDS_GPU)


def trace_path(trace_dir: Path, batch_size: int, input_len: int, output_len: int, stage: str) -> Path:
    """one_batch's own trace file name (``_create_torch_profiler_filename``) under our prefix."""
    return trace_dir / f"{PREFIX}_batch{batch_size}_input{input_len}_output{output_len}_{stage}.trace.json.gz"


def profile_start(output_len: int, steps: int) -> int:
    """The first decode step profiled (``--profile-start-step``): after WARMUP_STEPS, as far as output_len allows."""
    return max(0, min(WARMUP_STEPS, output_len - 1 - steps))


def decode_context(input_len: int, output_len: int | None, steps: int) -> int:
    """KV length per request at the middle profiled decode step: decode step i attends over the prompt, the i
    tokens decoded before it and its own (one_batch's step 0 decodes the token the prefill sampled). Without the
    output length (a trace named otherwise) the step is taken as the first."""
    step = 0 if output_len is None else profile_start(output_len, steps) + (steps - 1) // 2
    return input_len + step + 1


def _int_arg(sglang_args: list[str], default: int, *names: str) -> int:
    v = flag_value(sglang_args, *names)
    try:
        return default if v is None else int(v)
    except ValueError:
        raise AstraError(f"{names[0]} {v!r} is not an integer") from None


def model_traffic(sglang_args: list[str], extracted: Path, phase: str, batch_size: int, input_len: int,
                  output_len: int, steps: int) -> Traffic | None:
    """Bytes per call of the covered ops, from the ``--model-path`` folder's config.json; None when the model path
    is not a local folder with one (a Hub id: nothing to read without downloading)."""
    model = flag_value(sglang_args, "--model-path", "--model")
    cfg = Path(model).expanduser() / "config.json" if model else None
    if cfg is None or not cfg.is_file():
        return None
    config = load_config(cfg)
    return count(extracted, config, phase, batch_size, input_len, decode_context(input_len, output_len, steps),
                 model_dtype(config, flag_value(sglang_args, "--dtype")),
                 _int_arg(sglang_args, DEFAULT_KV_SPLITS, "--triton-attention-num-kv-splits"),
                 _int_arg(sglang_args, 1, "--tp-size", "--tensor-parallel-size"), source=str(cfg))


def measure_copy_ceiling() -> float | None:
    """The device's copy ceiling in GB/s (harness.timing's copy kernel), in this process before the children hold
    the GPU; None, said on stderr, when the measurement fails (the % column then stays '-')."""
    try:
        from astra_sglang.harness.shared.timing import CudaClock

        return CudaClock().copy_ceiling_gbps()
    except Exception as e:  # a failed measurement must not cost the profile: its column stays '-'
        print(f"astra-sglang: copy ceiling not measured ({type(e).__name__}: {e}); % copy ceiling shown as '-'",
              file=sys.stderr)
        return None


def _run(cmd: list[str], env: dict[str, str]) -> str:
    """Run a child, its output shown as it comes and kept for the ASTRA-PATCHES line."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        sys.stderr.write(line)
        lines.append(line)
    if proc.wait() != 0:
        raise AstraError(f"one_batch exited with status {proc.returncode} (its output is above)")
    return "".join(lines)


def check_prefill_grouping(sglang_args: list[str], tokens: int) -> None:
    """``--prefill-chunk-tokens`` works in one_batch's own process: with ``--tp-size`` above 1 one_batch starts a
    process per rank, which imports one_batch afresh and would prefill in one forward without saying so."""
    if tokens and _int_arg(sglang_args, 1, "--tp-size", "--tensor-parallel-size") > 1:
        raise AstraError("--prefill-chunk-tokens works with --tp-size 1 only: one_batch runs each rank in a process "
                         "of its own, which would not prefill in groups")


def run_profile(sglang_args: list[str], batch_sizes: list[int], input_len: int, output_len: int, phase: str,
                steps: int, out_dir: Path, kmap: KernelMap, patches: PatchInfo,
                extracted: Path | None = None, prefill_chunk_tokens: int = 0) -> list[HotList]:
    """Profile ``steps`` decode steps (and/or the prefill) per batch size; one hot list per phase and batch size.
    ``prefill_chunk_tokens``: one_batch's prefill in groups of requests (chunked_prefill.py)."""
    check_prefill_grouping(sglang_args, prefill_chunk_tokens)
    require_gpu()
    from astra_sglang.patches.registry import op_folder

    if phase != "prefill" and output_len < steps + 2:
        raise AstraError(f"--output-len {output_len} is too short for --steps {steps}: need at least {steps + 2}")
    phases = ["prefill", "decode"] if phase == "both" else [phase]
    traffic = {(bs, ph): model_traffic(sglang_args, extracted or op_folder(""), ph, bs, input_len, output_len, steps)
               for bs in batch_sizes for ph in phases}
    ceiling = measure_copy_ceiling() if any(t and t.bytes_per_call for t in traffic.values()) else None
    trace_dir = Path(out_dir).resolve() / "traces"
    trace_dir.mkdir(parents=True, exist_ok=True)
    timing = Path(out_dir).resolve() / "timing.jsonl"
    timing.unlink(missing_ok=True)
    env = dict(os.environ, SGLANG_TORCH_PROFILER_DIR=str(trace_dir))
    env.pop(ENV_PREFILL_TOKENS, None)  # only the flag groups the prefill, never a value left in the shell
    env.update(child_env(prefill_chunk_tokens))
    base = [sys.executable, "-m", "astra_sglang.profile.one_batch_child", *sglang_args,
            "--batch-size", *map(str, batch_sizes), "--input-len", str(input_len), "--output-len", str(output_len)]
    stage = "all" if phase == "both" else phase
    start = profile_start(output_len, steps)
    log = _run([*base, "--disable-cuda-graph", "--profile", "--profile-stage", stage, "--profile-prefix", PREFIX,
                "--profile-start-step", str(start), "--profile-steps", str(steps)], env)
    _run([*base, "--result-filename", str(timing)], env)
    patches.served.update(served_calls(log))
    times = _step_times(timing)
    lists: list[HotList] = []
    for bs in batch_sizes:
        for ph in phases:
            path = trace_path(trace_dir, bs, input_len, output_len, ph)
            if not path.is_file():  # one_batch skips a batch size over its max ("skipping ..." above)
                print(f"astra-sglang: no {ph} trace for batch size {bs} ({path.name}); skipped", file=sys.stderr)
                continue
            hl = hot_list(summarize(path, steps=steps if ph == "decode" else 1), kmap, patches, ph, bs,
                          traffic[(bs, ph)], ceiling)
            hl.step_time_us = times.get((bs, ph))
            lists.append(hl)
    if not lists:
        raise AstraError(f"one_batch wrote no trace under {trace_dir} (every batch size skipped?)")
    return lists


def _step_times(path: Path) -> dict[tuple[int, str], float]:
    """(batch size, phase) -> us per step with graphs on, from one_batch's --result-filename lines."""
    out: dict[tuple[int, str], float] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        bs = int(r.get("batch_size", 0))
        if r.get("prefill_latency") is not None:
            out[(bs, "prefill")] = float(r["prefill_latency"]) * 1e6
        if r.get("median_decode_latency") is not None:
            out[(bs, "decode")] = float(r["median_decode_latency"]) * 1e6
    return out
