"""The fused-MoE contracts (Triton, SGLang's unquantized MoE GEMMs through invoke_fused_moe_kernel): the
up-projection (fused_moe_kernel, w1) and the down-projection with the routing weights (fused_moe_down, w2).

On CPU the original runs under TRITON_INTERPRET=1 through the op folder's adapter (the config dict and the
Triton compute dtype no call list can hold) and agrees with the reference; a reference that forgets the
routing is refused. The routed batch must be what moe_align gives SGLang's kernel: every (token, slot) pair
once, in its expert's BLOCK_SIZE_M-padded run, padding = T*TK. The shapes carry SGLang's H200 configs (the down call: its
down config with the up call's BLOCK_SIZE_M) at the decode token counts serving runs. On the GPU the contracts are
validated on every manifest shape.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

import pytest

pytest.importorskip("sglang")
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from astra_sglang.contract.op import TritonRecipe, load_manifest  # noqa: E402
from astra_sglang.extract import catalog  # noqa: E402
from astra_sglang.extract.catalog._fused_moe import DECODE_T, PREFILL_T, SPLITS  # noqa: E402
from astra_sglang.extract.catalog._moe_configs import SERVED_GPUS, moe_config, moe_down_config  # noqa: E402
from astra_sglang.extract.catalog.source_text import FileText  # noqa: E402
from astra_sglang.extract.extractor import write_op  # noqa: E402
from astra_sglang.harness.parent.contract_validation import validate_contract, validation_config  # noqa: E402
from astra_sglang.loader.launch import load_inputs  # noqa: E402

REPO_EXTRACTED = Path(__file__).resolve().parents[1] / "extracted"
OPS = ("moe.fused_moe_kernel", "moe.fused_moe_down")


def _write(out: Path, reference: str | None = None, op_id: str = "moe.fused_moe_kernel") -> Path:
    entry = catalog.find(op_id)
    assert entry is not None and entry.op_id == op_id
    return write_op(dataclasses.replace(entry, reference=FileText.verbatim(reference)) if reference else entry, out).path


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("fused_moe"))


@pytest.fixture(scope="module", params=OPS)
def each_op(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("fused_moe"), op_id=request.param)


def _validate_fp16(op: Path):
    # bfloat16 is left out on CPU only: Triton 3.8's interpreter gets bfloat16 products wrong (see
    # test_contracts_attn); the H200 checks both dtypes
    return validate_contract(op, validation_config("cpu").model_copy(update={"dtypes": ["float16"]}))[0]


def test_the_original_agrees_with_the_contract_through_its_adapter(each_op: Path, monkeypatch: pytest.MonkeyPatch):
    manifest = load_manifest(each_op)
    assert isinstance(manifest.recipe, TritonRecipe) and manifest.recipe.adapter == "adapter.py:call"
    assert (each_op / "adapter.py").is_file()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    v = _validate_fp16(each_op)
    assert v.passed, v.first_failure
    assert v.cases_run >= 12 and v.cases_skipped == 0


_IGNORES_ROUTING = '''
import torch


def reference(**args):
    """Wrong on purpose: every slot uses expert 0."""
    a, b, ids = args["A"].float(), args["B"], args["topk_ids"]
    out = (a @ b[0].float().T)[:, None, :].expand(ids.shape[0], ids.shape[1], -1)
    return {"C": out.contiguous()}
'''


def test_a_reference_that_ignores_the_routing_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    v = _validate_fp16(_write(tmp_path, reference=_IGNORES_ROUTING))
    assert not v.passed and v.first_failure and "reference mismatch" in v.first_failure


_DOWN_WITHOUT_ROUTING_WEIGHT = '''
import torch


def reference(**args):
    """Wrong on purpose: the down-projection without the routing weight on its rows."""
    a, b, ids = args["A"].float(), args["B"], args["topk_ids"].long()
    t, tk = ids.shape
    out = torch.stack([a[i] @ b[int(e)].float().T for i, e in enumerate(ids.reshape(-1))])
    return {"C": out.reshape(t, tk, -1)}
'''


def test_a_down_reference_without_the_routing_weight_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    v = _validate_fp16(_write(tmp_path, reference=_DOWN_WITHOUT_ROUTING_WEIGHT, op_id="moe.fused_moe_down"))
    assert not v.passed and v.first_failure and "reference mismatch" in v.first_failure


def test_routed_batches_are_what_moe_align_gives_the_kernel(op: Path):
    manifest = load_manifest(op)
    make, scalars = load_inputs(op, manifest)
    assert make is not None and scalars is not None
    rng = random.Random(3)
    for _ in range(30):
        t, tk, e, bm = rng.randint(1, 40), rng.choice([1, 2, 8]), rng.choice([1, 4, 8, 16]), rng.choice([16, 64])
        tk = min(tk, e)
        d = {"T": t, "TK": tk, "E": e, "N": 2, "K": 8, "BM": bm, "BN": 16, "BK": 16, "GM": 1, "NW": 4, "NS": 2}
        made = make(dict(d), "float16", torch.Generator().manual_seed(rng.getrandbits(32)), "cpu")
        ids, w = made["topk_ids"], made["topk_weights"]
        assert ids.shape == (t, tk) and all(len(set(r)) == tk for r in ids.tolist()), "distinct experts per token"
        assert torch.allclose(w.sum(-1), torch.ones(t)), "renormalized routing weights"
        sorted_ids, experts = made["sorted_token_ids"], made["expert_ids"]
        total = int(made["num_tokens_post_padded"][0])
        assert sorted_ids.numel() == t * tk + e * (bm - 1) and experts.numel() == -(-sorted_ids.numel() // bm)
        assert total % bm == 0 and bool((sorted_ids[total:] == t * tk).all())
        real = sorted_ids[:total][sorted_ids[:total] < t * tk]
        assert sorted(real.tolist()) == list(range(t * tk)), "every (token, slot) pair exactly once"
        flat = ids.reshape(-1)
        for j in range(total // bm):
            block = sorted_ids[j * bm:(j + 1) * bm]
            members = block[block < t * tk].long()
            assert members.numel() > 0 and bool((flat[members] == experts[j]).all()), "a block holds one expert"
        assert bool((experts[total // bm:] == -1).all())
        assert scalars(d, "float16")["BLOCK_SIZE_M"] == bm


def test_each_case_carries_the_config_sglang_picks_on_the_gpus_it_is_tagged_for(each_op: Path):
    """SGLang tunes fused MoE per GPU model (E=..,N=..,device_name=<GPU>.json): a case per served GPU, tagged with
    the GPUs whose config its dims hold; the H200's (the issue's) and the H100's (this workplace's other GPU)."""
    manifest = load_manifest(each_op)
    down = manifest.short_name == "fused_moe_down"
    assert len(manifest.shapes) >= 20
    for s in manifest.shapes:
        d = s.dims
        assert s.served_on(), s.source
        for gpu in s.served_on():
            c = moe_down_config(d["E"], d["I"], d["T"], None, None, gpu) if down else moe_config(
                d["E"], d["N"] // 2, d["T"], None, None, gpu)
            assert (d["BM"], d["BN"], d["BK"], d["GM"]) == (c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"],
                                                            c["GROUP_SIZE_M"]), (gpu, s.source)
    points = len(SPLITS) * len(DECODE_T) + len(PREFILL_T) + 1  # decode, prefill, the edge case
    for gpu in SERVED_GPUS:  # every served point once per GPU
        assert len([s for s in manifest.shapes if gpu in s.served_on()]) == points, gpu


def test_a_gpu_is_timed_against_the_configs_sglang_serves_on_it(each_op: Path):
    """On an H100 the H100's tiles are what serves (20 of 23 points differ from the H200's): the named shape sets
    time the running GPU's cases, the H200's where the GPU is unknown, and a GPU the contract has no configs for
    gets the H200's with a note saying the original may not be what serves there."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness.shared.suite import served_on_note, timed_shapes

    manifest = load_manifest(each_op)
    tagged = {g: [s.dims for s in manifest.shapes if "decode" in s.tags and g in s.served_on()] for g in SERVED_GPUS}
    h200, h100 = SERVED_GPUS
    assert timed_shapes(manifest, EvalConfig(shapes="decode")) == tagged[h200]
    assert timed_shapes(manifest, EvalConfig(shapes="decode", gpu="NVIDIA H200")) == tagged[h200]
    assert timed_shapes(manifest, EvalConfig(shapes="decode", gpu="NVIDIA H100 80GB HBM3")) == tagged[h100]
    assert tagged[h100] != tagged[h200] and len(tagged[h100]) == len(tagged[h200])
    assert len(timed_shapes(manifest, EvalConfig(shapes="all"))) == len(manifest.shapes)  # checks cover both
    a100 = EvalConfig(shapes="decode", gpu="NVIDIA A100-SXM4-80GB")
    assert timed_shapes(manifest, a100) == tagged[h200]
    assert "timed on NVIDIA A100-SXM4-80GB with the launch configs SGLang serves on NVIDIA H200" in served_on_note(
        manifest, a100)
    assert served_on_note(manifest, EvalConfig(shapes="decode", gpu=h100)) == ""
    for name in ("BM", "BN", "BK", "GM", "NW", "NS"):  # held-out shapes draw these from the cases' values
        assert len({s.dims[name] for s in manifest.shapes}) <= 4, name


def test_both_calls_cover_every_split_at_every_decode_batch(each_op: Path):
    """What a decode step serves: M = T x TK pairs from 1 to 2048, for each model split; the same (T, split)
    points in both contracts, so the two GEMMs of one layer are judged at the same batches."""
    manifest = load_manifest(each_op)
    down = manifest.short_name == "fused_moe_down"
    have = {(s.dims["T"], s.dims["E"], s.dims["TK"], s.dims["H"] if down else s.dims["K"],
             s.dims["I"] if down else s.dims["N"] // 2) for s in manifest.shapes}
    for _, e, tk, hidden, inner in SPLITS:
        for t in DECODE_T:
            assert (t, e, tk, hidden, inner) in have, (t, e, tk, hidden, inner)
    assert any("prefill" in s.tags for s in manifest.shapes) and any("edge" in s.tags for s in manifest.shapes)


def test_the_down_config_takes_the_up_calls_block_m(monkeypatch: pytest.MonkeyPatch):
    """One moe_align sort serves both calls: a tuned _down config's BLOCK_SIZE_M is replaced by the up config's
    (try_get_optimal_moe_config does the same), and a down config asking for TMA (another call form) is refused."""
    from astra_sglang.extract.catalog import _moe_configs

    up = {1: {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}}
    tuned_down = {1: {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8, "num_warps": 8}}
    files = {False: up, True: tuned_down}
    monkeypatch.setattr(_moe_configs, "_tuned", lambda e, n, dtype, block, down=False, gpu=None: files[down])
    c = moe_down_config(8, 1792, 1, None, None)
    assert c["BLOCK_SIZE_M"] == 16 and c["BLOCK_SIZE_N"] == 128 and c["num_warps"] == 8
    tuned_down[1]["USE_TMA"] = True
    with pytest.raises(ValueError, match="TMA"):
        moe_down_config(8, 1792, 1, None, None)
    files[True] = None  # type: ignore[assignment]
    assert moe_down_config(8, 1792, 1, None, None) == up[1], "no down file: the up config (down_config or config)"


def test_the_down_call_is_its_own_op_on_the_shared_wrapper():
    """Both contracts go through invoke_fused_moe_kernel; each name finds its own, and SGLang's op list has both."""
    from astra_sglang.extract.discovery import list_ops, resolve

    up, down = catalog.find("fused_moe_kernel"), catalog.find("fused_moe_down")
    assert up is not None and down is not None and up.entry_point == down.entry_point
    assert catalog.find(up.entry_point) is up, "the wrapper's name still means the up call"
    infos = list_ops()
    assert resolve("fused_moe_down", infos).op_id == "moe.fused_moe_down"
    assert resolve("moe.fused_moe_down", infos).short_name == "fused_moe_down"
    assert resolve("fused_moe_kernel", infos).short_name == "fused_moe_kernel"


@pytest.mark.gpu
@pytest.mark.parametrize("op_id", OPS)
def test_the_contract_validates_on_the_gpu(tmp_path: Path, op_id: str):
    v, _ = validate_contract(_write(tmp_path, op_id=op_id), validation_config("cuda"))
    assert v.passed, v.first_failure
    assert set(v.dtypes) == {"bfloat16", "float16"} and v.cases_run > 0


def test_tune_sweeps_sglangs_config_keys_at_the_served_block_m(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The MoE wrapper takes its launch config as a dict (SGLang builds it from the tuned JSON), so there are no
    launch literals to sweep: `tune` sweeps the declared keys of SGLang's tuning space instead, each variant
    rebinding the dict first thing in the wrapper (the grid and EVEN_K follow it), never BLOCK_SIZE_M (the routed
    inputs are sorted for it). On CPU every config is checked on the test shapes; none is timed."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.errors import AstraError
    from astra_sglang.harness.parent.launch_params import launch_variant
    from astra_sglang.harness.parent.tune_baseline import original_params, sweep_baseline

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    entry = catalog.find("moe.fused_moe_down")
    assert entry is not None and entry.config_space is not None
    assert "BLOCK_SIZE_M" not in entry.config_space
    assert len(list(itertools.product(*entry.config_space.values()))) == 96
    small = dataclasses.replace(entry, config_space={"BLOCK_SIZE_N": [16, 32], "num_warps": [4]})
    op = write_op(small, tmp_path).path
    manifest = load_manifest(op)
    params = original_params(op, manifest)
    assert [p.name for p in params] == ["config.BLOCK_SIZE_N", "config.num_warps"]
    text = (op / manifest.recipe.source).read_text()  # type: ignore[union-attr]
    variant = launch_variant(text, params, {"config.BLOCK_SIZE_N": 16, "config.num_warps": 4})
    body = variant[variant.index("def invoke_fused_moe_kernel("):]
    first = [ln.strip() for ln in body.splitlines()[1:12] if ln.strip() and not ln.strip().startswith(("'", '"'))]
    assert "config = {**config, 'BLOCK_SIZE_N': 16, 'num_warps': 4}" in first[:3]
    b = sweep_baseline(op, EvalConfig(shapes="test", device="cpu", timing=False, dtypes=["float16"],
                                      timing_dtypes=["float16"], seed=3))
    assert [c.ok for c in b.configs] == [True, True], [c.failure for c in b.configs]
    assert not b.shapes and b.parameters == {"config.BLOCK_SIZE_N": [16, 32], "config.num_warps": [4]}
    # the variant is what runs: a BLOCK_SIZE_M other than the sort's straddles experts and is dropped as wrong
    wrong = write_op(dataclasses.replace(entry, config_space={"BLOCK_SIZE_M": [32]}), tmp_path / "wrong").path
    with pytest.raises(AstraError, match="no config of the original passed its checks.*outside"):
        sweep_baseline(wrong, EvalConfig(shapes="test", device="cpu", timing=False, dtypes=["float16"],
                                         timing_dtypes=["float16"], seed=3))


def test_asking_for_paper_shapes_of_an_op_without_them_names_the_ones_it_has():
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.errors import AstraError
    from astra_sglang.harness.shared.suite import timed_shapes

    with pytest.raises(AstraError, match="no shapes tagged 'paper'.*decode, prefill, all: pass --shapes decode"):
        timed_shapes(load_manifest(REPO_EXTRACTED / "moe_align_block_size"), EvalConfig(shapes="paper"))


def test_the_timed_set_is_the_decode_the_end_to_end_proof_serves(each_op: Path):
    """`optimize`/`tune` time Qwen3-30B-A3B's decode on one GPU (issue 25's e2e model, batches 32 and 128 among
    them) with the configs SGLang serves on that GPU: a loop timed on every split swept 20 shapes per config."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness.shared.suite import timed_shapes

    m = load_manifest(each_op)
    up = m.short_name == "fused_moe_kernel"
    for gpu in SERVED_GPUS:
        timed = timed_shapes(m, EvalConfig(shapes="paper", gpu=gpu))
        assert sorted(d["T"] for d in timed) == [1, 16, 32, 64, 128, 256]
        assert {(d["E"], d["TK"], d["N"] if up else d["I"]) for d in timed} == {(128, 8, 1536 if up else 768)}


def test_bytes_moved_counts_only_the_experts_the_routing_touches(each_op: Path):
    """One decode token with top-8 of 128 experts reads 8 experts' weights, not 128: counting all of them put
    SGLang's kernel at 166% of the H200's copy ceiling (validation record of 2026-12-01, T=512 with idle experts)."""
    from astra_sglang.harness.parent.contract_check import contract_problems
    from astra_sglang.harness.shared.suite import NeedsValues, contract_bytes
    from astra_sglang.harness.shared.tensors import ArgSet

    m = load_manifest(each_op)
    up = m.short_name == "fused_moe_kernel"
    width = {"N": 1536, "K": 2048} if up else {"H": 2048, "I": 768}
    expert = width["N" if up else "H"] * width["K" if up else "I"] * 2  # one expert's weight matrix, bf16
    for t in (1, 3, 64):
        dims = {"T": t, "TK": 8, "E": 128, **width, "BM": 16, "BN": 64, "BK": 64, "GM": 1, "NW": 4, "NS": 3}
        a = ArgSet(m, dims, "bfloat16", "cpu", load_inputs(each_op, m))
        gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
        touched = int(torch.unique(a._generated(gen())["topk_ids"]).numel())
        others = sum(a.tensors[n].view.numel() * a.tensors[n].view.element_size() for n in a.tensors if n != "B")
        assert a.bytes_moved(gen()) == others + touched * expert
        assert touched <= min(128, 8 * t) and (t > 1 or touched == 8)
        assert contract_bytes(m, dims, "bfloat16") is None  # from dims alone: unknown, never a guess
        with pytest.raises(NeedsValues):  # nor counted on a probe's unfilled buffers
            a.bytes_moved()
    assert not [p for p in contract_problems(each_op, m) if "moved" in p]


def test_a_moved_shape_may_count_only_a_generated_tensor(tmp_path: Path):
    from astra_sglang.harness.parent.contract_check import contract_problems

    folder = _write(tmp_path)
    m = load_manifest(folder)
    b = next(t for t in m.signature.tensors if t.name == "B")
    b.moved = ["distinct(A)", "N", "K"]  # A is drawn from a value distribution: its distinct count means nothing
    assert any("tensor B moved" in p for p in contract_problems(folder, m))


def test_a_routed_batch_spreads_over_most_experts_as_serving_does(op: Path):
    """SGLang's forward touched 111 of 128 experts at batch 32; a draw that piles a batch onto a few hot experts
    (44 of 128 at T=256 with the old bias) times a kernel on a third of the weights serving reads."""
    make, _ = load_inputs(op, load_manifest(op))
    assert make is not None
    for t, least in ((32, 75), (128, 110), (256, 118)):
        for seed in range(5):
            dims = {"T": t, "TK": 8, "E": 128, "N": 1536, "K": 2048, "BM": 16, "BN": 64, "BK": 64, "GM": 1, "NW": 4,
                    "NS": 3}
            ids = make(dims, "bfloat16", torch.Generator().manual_seed(seed), "cpu")["topk_ids"]
            assert torch.unique(ids).numel() >= least, (t, seed)
