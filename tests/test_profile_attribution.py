"""``profile``'s CPU core: reading a chrome trace and attributing its kernels to op ids, on SYNTHETIC traces
(tests/h_fixtures/profile/README.md: kernel names from the H200 measurement, durations chosen so the shares are
known: 57.4% decode attention stage 1, 33.6% + 3.2% cuBLAS, 1.4% FlashInfer FusedAddRMSNorm, ...)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from astra_sglang.contract.op import load_manifest
from astra_sglang.profile import attribution as at
from astra_sglang.profile.trace import TraceError, one_batch_name, summarize

ROOT = Path(__file__).resolve().parents[1]
EXTRACTED = ROOT / "extracted"
FIXTURES = Path(__file__).parent / "h_fixtures" / "profile"
DECODE = FIXTURES / "astra_batch128_input512_output16_decode.trace.json"
TWO_STEPS = FIXTURES / "two_steps.trace.json"
ACTIVATION_SRC = EXTRACTED / "silu_and_mul" / "src/kernels/jit/csrc/elementwise/activation.cuh"


@pytest.fixture(scope="module")
def decode_list() -> at.HotList:
    kmap = at.build_map(EXTRACTED)
    return at.hot_list(summarize(DECODE), kmap, at.patch_info(), "decode", 128)


def _row(hl: at.HotList, fragment: str) -> at.HotRow:
    return next(r for r in hl.rows if fragment in r.kernel)


def test_every_kernel_is_accounted_for(decode_list: at.HotList) -> None:
    """Nine kernel names in the trace, nine rows, shares adding up to 100%; memcpy and CPU events are not kernels."""
    assert len(decode_list.rows) == 9
    assert sum(r.share for r in decode_list.rows) == pytest.approx(100.0)
    assert decode_list.gpu_us_per_step == pytest.approx(10000.0)
    assert [r.share for r in decode_list.rows] == sorted((r.share for r in decode_list.rows), reverse=True)
    assert not any("Memcpy" in r.kernel or r.kernel.startswith("aten::") for r in decode_list.rows)


def test_triton_decode_attention_maps_to_its_op(decode_list: at.HotList) -> None:
    kernels = load_manifest(EXTRACTED / "decode_attention").recipe.kernels  # type: ignore[union-attr]
    assert "_fwd_grouped_kernel_stage1" in kernels and "_fwd_kernel_stage2" in kernels
    r = _row(decode_list, "_fwd_grouped_kernel_stage1")
    assert (r.op, r.short_name, r.group) == ("attention.decode_attention_fwd", "decode_attention", None)
    assert r.share == pytest.approx(57.4)
    assert r.us_per_call == pytest.approx(179.375) and r.calls_per_step == 32
    assert _row(decode_list, "_fwd_kernel_stage2").op == "attention.decode_attention_fwd"


def test_flashinfer_norm_maps_to_fused_add_rmsnorm_and_shows_the_patch(decode_list: at.HotList) -> None:
    r = _row(decode_list, "FusedAddRMSNormKernel")
    assert r.short_name == "fused_add_rmsnorm"
    assert r.via == "baseline:flashinfer_fused_add_rmsnorm"
    assert r.status == "patched by fused-add-rmsnorm-mr-k4"
    assert r.share == pytest.approx(1.4) and r.calls_per_step == 64


def test_unmapped_kernels_fall_in_groups(decode_list: at.HotList) -> None:
    assert _row(decode_list, "nvjet_tst").group == "GEMM"
    assert _row(decode_list, "splitKreduce").group == "GEMM"  # a cuBLAS reduce, not a torch reduction
    assert _row(decode_list, "vectorized_elementwise_kernel").group == "torch elementwise"
    store = _row(decode_list, "store_kvcache_kernel")
    assert (store.group, store.status) == ("other", at.STATUS_NONE)
    groups = {r.group for r in decode_list.rows if r.group}
    assert sum(r.share for r in decode_list.rows if r.group == "GEMM") == pytest.approx(36.8)
    assert groups <= set(at.GROUPS)


def test_bytes_are_not_invented(decode_list: at.HotList) -> None:
    assert {(r.bytes_moved, r.pct_copy_ceiling) for r in decode_list.rows} == {("-", "-")}
    assert at.BYTES_NOTE in decode_list.notes


@pytest.mark.parametrize("kernel, group", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "NCCL"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>(...)",
     "attention library"),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>(...)", "attention library"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "GEMM"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(...)", "torch elementwise"),
    ("triton_poi_fused_add_0", "other"),
    # SGLang's Triton MoE reduction (Qwen3-30B-A3B on the H200): a Triton kernel, not one of torch's
    ("_moe_sum_reduce_kernel", "other"),
    ("_small_copy_kernel", "other"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(...)>(...)", "torch elementwise"),
])
def test_group_of(kernel: str, group: str) -> None:
    assert at.group_of(kernel) == group


def test_function_name_of_demangled_kernels() -> None:
    assert at.function_name("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(float*)") \
        == "FusedAddRMSNormKernel"
    assert at.function_name("void (anonymous namespace)::fused_rope_kernel<true>((anonymous namespace)::P)") \
        == "fused_rope_kernel"
    assert at.function_name("_fwd_kernel_stage2") == "_fwd_kernel_stage2"


def test_a_triton_name_does_not_claim_a_cuda_kernel_of_that_name() -> None:
    """fused_moe's Triton recipe lists a helper called act_and_mul_kernel; SGLang's CUDA act_and_mul_kernel
    (a demangled C++ name) is not it. The Triton one is not fused_moe's either where its source shows that
    invoke_fused_moe_kernel never launches it (act_and_mul_triton does)."""
    kmap = at.build_map(EXTRACTED)
    cuda = "void sglang::act_and_mul_kernel<__nv_bfloat16, (sglang::ActivationKind)0, true>(sglang::ActivationParams)"
    assert "fused_moe_kernel" not in {r.short_name for r in kmap.match(cuda)}
    recipe = load_manifest(EXTRACTED / "fused_moe_kernel").recipe
    source = EXTRACTED / "fused_moe_kernel" / recipe.source  # type: ignore[union-attr]
    triton = [r.short_name for r in kmap.match("act_and_mul_kernel") if r.via == "triton"]
    assert triton == ([] if source.is_file() else ["fused_moe_kernel"])


@pytest.mark.skipif(not ACTIVATION_SRC.is_file(), reason="silu_and_mul's CUDA source is not restored here")
def test_a_kernel_several_ops_share_is_named_not_ranked(decode_list: at.HotList) -> None:
    r = _row(decode_list, "act_and_mul_kernel")
    # (sglang::ActivationKind)0 is kSiLU: the gelu/relu2 ops are told apart, the rounding variant is not
    assert r.status.startswith("ambiguous")
    assert r.candidates == ["silu_and_mul", "silu_and_mul_with_activation_rounding"]
    assert r.group is None
    assert all("act_and_mul" not in t.op_id for t in at.top_ops([decode_list]))


def test_cuda_op_without_its_sources_is_matched_by_name(tmp_path: Path) -> None:
    """A folder from a fresh checkout holds the manifest but not the regenerated SGLang sources."""
    (tmp_path / "fused_rope").mkdir()
    shutil.copy(EXTRACTED / "fused_rope" / "manifest.json", tmp_path / "fused_rope" / "manifest.json")
    kmap = at.build_map(tmp_path)
    refs = kmap.match("void (anonymous namespace)::fused_rope_kernel<true, 128>(P)")
    assert [(r.short_name, r.via) for r in refs] == [("fused_rope", "cuda (by name)")]
    assert any("fused_rope: CUDA sources absent" in n for n in kmap.notes)


def test_patch_kernels_belong_to_their_op() -> None:
    """With a patch installed, the trace shows the patch's own kernel: its time still counts for the op."""
    kmap = at.build_map(EXTRACTED)
    refs = kmap.match("void fused_add_rmsnorm_vec_kernel<8, __nv_bfloat16>(__nv_bfloat16*)")
    assert [(r.short_name, r.via) for r in refs] == [("fused_add_rmsnorm", "patch:fused-add-rmsnorm-mr-k4")]


def test_top_three_and_their_commands(decode_list: at.HotList) -> None:
    top = at.top_ops([decode_list])
    assert len(top) == 3
    assert top[0].op_id == "attention.decode_attention_fwd"
    assert top[0].share == pytest.approx(57.4 + 1.3)  # both of its kernels
    assert top[0].command.endswith("astra-sglang optimize decode_attention")
    assert [t.short_name for t in top[1:]] == ["fused_add_rmsnorm", "fused_rope"]
    assert all(t.op_id not in at.GROUPS for t in top)


def test_commands_by_status() -> None:
    assert at.command_for("x.op", "op", at.STATUS_VALIDATED) == "astra-sglang optimize op"
    assert at.command_for("x.op", "op", at.STATUS_CONTRACT) == \
        "astra-sglang validate-contract op && astra-sglang optimize op"
    assert at.command_for("x.op", None, at.STATUS_EXTRACTABLE) == "astra-sglang extract x.op"
    assert at.command_for("x.op", None, at.STATUS_NONE) == "astra-sglang extract x.op --draft"


def test_served_calls_show_in_the_status() -> None:
    log = 'Decode 0...\nASTRA-PATCHES {"fused-add-rmsnorm-mr-k4": {"state": "installed", "patch": 2048}}\n'
    served = at.served_calls(log)
    assert served == {"fused-add-rmsnorm-mr-k4": 2048}
    hl = at.hot_list(summarize(DECODE), at.build_map(EXTRACTED), at.patch_info(served=served))
    assert _row(hl, "FusedAddRMSNormKernel").status == "patched by fused-add-rmsnorm-mr-k4 (2048 calls served)"
    assert at.served_calls("no such line") == {}


def test_profiler_steps_go_by_launch_not_gpu_time() -> None:
    s = summarize(TWO_STEPS)
    assert s.steps == 2 and s.step_source == "2 ProfilerStep markers"
    assert s.step_gpu_us == [150.0, 400.0]
    assert s.outside_us == 999.0  # launched after both windows: not in a step
    assert s.gpu_us_per_step == 275.0


def test_steps_given_divide_a_trace_without_markers(tmp_path: Path) -> None:
    gz = tmp_path / "t.trace.json.gz"
    with gzip.open(gz, "wt") as f:
        f.write(DECODE.read_text())
    s = summarize(gz, steps=4)
    assert s.steps == 4 and "4 steps" in s.step_source
    assert s.gpu_us_per_step == pytest.approx(2500.0)
    assert "whole trace as one step" in summarize(DECODE).step_source


def test_bad_traces_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x"}]}))
    with pytest.raises(TraceError, match="not a chrome trace"):
        summarize(tmp_path / "a.json")
    with pytest.raises(TraceError, match="no GPU kernel events"):
        summarize(tmp_path / "b.json")
    with pytest.raises(TraceError, match="no trace file"):
        summarize(tmp_path / "missing.json")


def test_one_batch_file_names() -> None:
    assert one_batch_name(DECODE) == {"batch_size": 128, "input_len": 512, "output_len": 16, "phase": "decode"}
    assert one_batch_name(TWO_STEPS) == {}


def test_the_moe_gemm_kernel_is_claimed_by_both_of_its_calls() -> None:
    """SGLang's one Triton ``fused_moe_kernel`` runs both GEMMs of a MoE layer (w1, and w2 with the routing
    weights): a profiler row of it is both contracts' time, so it names both instead of crediting one."""
    kmap = at.build_map(EXTRACTED)
    assert {r.short_name for r in kmap.match("fused_moe_kernel")} == {"fused_moe_kernel", "fused_moe_down"}


_MOE_GEMM = "fused_moe_kernel"
_PDL_ACT = "void sglang::act_and_mul_kernel<__nv_bfloat16, (sglang::ActivationKind)0, true, false>(sglang::Params)"


def test_a_kernel_launched_early_by_pdl_is_charged_only_its_own_time(tmp_path: Path) -> None:
    """SYNTHETIC, shaped on the Qwen3 decode profile (2026-12-03-evening): per layer the MoE GEMM runs 145 us, and
    SGLang's SiLU-and-mul, launched with PDL, starts 40 us before the GEMM ends and runs 3.7 us after it. Its span
    (43.7 us) holds the GEMM's tail; the hot list must charge it 3.7 us, keep the 40 us as its overlap, and the
    shares must be of the time the stream was busy, not of a sum of spans that counts the tail twice."""
    events = []
    t = 0.0
    for corr in range(4):
        events.append({"ph": "X", "cat": "kernel", "name": _MOE_GEMM, "pid": 0, "tid": 7, "ts": t, "dur": 145.0,
                       "args": {"correlation": 2 * corr}})
        events.append({"ph": "X", "cat": "kernel", "name": _PDL_ACT, "pid": 0, "tid": 7, "ts": t + 105.0,
                       "dur": 43.7, "args": {"correlation": 2 * corr + 1}})
        t += 160.0
    trace = tmp_path / "pdl.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    s = summarize(trace, steps=4)
    act = next(k for k in s.kernels.values() if k.name == _PDL_ACT)
    assert act.total_us / act.calls == pytest.approx(3.7) and act.overlap_us / act.calls == pytest.approx(40.0)
    assert s.gpu_us_per_step == pytest.approx(148.7)  # busy time: 145 + 3.7, not 188.7
    hl = at.hot_list(s, at.build_map(EXTRACTED), at.patch_info(), "decode", 128)
    row = _row(hl, "act_and_mul_kernel")
    assert row.us_per_call == pytest.approx(3.7) and row.overlap_us_per_step == pytest.approx(40.0)
    assert _row(hl, _MOE_GEMM).share == pytest.approx(100 * 145 / 148.7)
    assert any("overlapped the kernel before them" in n for n in hl.notes)
