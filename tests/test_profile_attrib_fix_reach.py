"""``profile``'s attribution of kernels an op's recipe lists but its entry never launches, and of one CUDA kernel
several ops share told apart by an enum-valued template argument.

Recipes list every ``@triton.jit`` of their source file, so an op whose entry sits beside SGLang's attention metadata
(``q8kv8_topk_length_from_indices`` in ``metadata.py``) claimed ``get_num_kv_splits_triton``, which the Triton
attention backend launches. SGLang's one ``act_and_mul_kernel`` serves silu/gelu/gelu_tanh by ``ActivationKind``.
Synthetic op folders (a committed manifest, a small source) so the tests hold where ``extract`` has not run;
the recorded H200 trace where it has."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astra_sglang.profile import attribution as at
from astra_sglang.profile.trace import summarize

ROOT = Path(__file__).resolve().parents[1]
EXTRACTED = ROOT / "extracted"
TRACE = Path(__file__).parent / "h_fixtures" / "profile" / "h200_llama3_8b_bs32_decode.trace.json.gz"
METADATA_SRC = EXTRACTED / "q8kv8_topk_length_from_indices" / "src/kernels/ops/attention/metadata.py"
ACTIVATION_SRC = EXTRACTED / "silu_and_mul" / "src/kernels/jit/csrc/elementwise/activation.cuh"
ACTIVATION_OPS = ("gelu_and_mul", "gelu_tanh_and_mul", "relu2", "silu_and_mul", "silu_and_mul_with_activation_rounding")
ACT = "void sglang::act_and_mul_kernel<__nv_bfloat16, (sglang::ActivationKind){}, true, false, false, false, false, " \
      "false>(sglang::ActivationParams)"

METADATA = '''
import triton


@triton.jit
def get_num_kv_splits_triton(out):
    pass


@triton.jit
def q8kv8_topk_length_backscan_kernel(out):
    pass


@triton.jit
def _fused_decode_metadata_kernel(out):
    pass


def _launch(indices):
    q8kv8_topk_length_backscan_kernel[(indices.shape[0],)](indices)


def q8kv8_topk_length_from_indices(indices):
    return _launch(indices)


def normal_decode_set_metadata(x):
    _fused_decode_metadata_kernel[(1,)](x)
'''

ACTIVATION = '''
namespace sglang {
enum class ActivationKind : uint32_t {
  kSiLU,  // 0
  kGELU,
  kGELUTanh,
  kReLU2,
};
template <typename T, ActivationKind kAct, bool kUsePDL>
__global__ void act_and_mul_kernel(const __grid_constant__ ActivationParams params) {}
}
'''


def _op(root: Path, name: str, source: str | None = None, text: str = "") -> None:
    (root / name).mkdir()
    shutil.copy(EXTRACTED / name / "manifest.json", root / name / "manifest.json")
    if source is not None:
        (root / name / source).parent.mkdir(parents=True, exist_ok=True)
        (root / name / source).write_text(text)


def test_a_listed_kernel_its_entry_never_launches_is_not_the_ops(tmp_path: Path) -> None:
    """get_num_kv_splits_triton is in the recipe's kernels but the entry never launches it; the kernel the entry
    launches through a helper of the same file stays the op's."""
    _op(tmp_path, "q8kv8_topk_length_from_indices", "src/kernels/ops/attention/metadata.py", METADATA)
    kmap = at.build_map(tmp_path)
    assert kmap.match("get_num_kv_splits_triton") == []
    assert kmap.match("_fused_decode_metadata_kernel") == []
    assert [r.short_name for r in kmap.match("q8kv8_topk_length_backscan_kernel")] == \
        ["q8kv8_topk_length_from_indices"]
    entry, dropped = kmap.dropped["q8kv8_topk_length_from_indices"]
    assert entry == "q8kv8_topk_length_from_indices"
    assert {"get_num_kv_splits_triton", "_fused_decode_metadata_kernel"} <= set(dropped)
    assert "q8kv8_topk_length_backscan_kernel" not in dropped


def test_without_the_source_every_listed_kernel_is_claimed_and_the_note_says_so(tmp_path: Path) -> None:
    _op(tmp_path, "q8kv8_topk_length_from_indices")
    kmap = at.build_map(tmp_path)
    assert [r.short_name for r in kmap.match("get_num_kv_splits_triton")] == ["q8kv8_topk_length_from_indices"]
    assert any(n.startswith("q8kv8_topk_length_from_indices: Triton source absent") for n in kmap.notes)


def test_launched_from_follows_same_file_calls() -> None:
    assert at.launched_from(METADATA, "q8kv8_topk_length_from_indices") == {"q8kv8_topk_length_backscan_kernel"}
    assert at.launched_from(METADATA, "normal_decode_set_metadata") == {"_fused_decode_metadata_kernel"}
    assert at.launched_from(METADATA, "no_such_entry") is None
    assert at.launched_from("def broken(:\n", "broken") is None


@pytest.mark.skipif(not METADATA_SRC.is_file(), reason="the extracted metadata.py is not regenerated here")
def test_recorded_trace_leaves_the_backends_metadata_kernel_to_its_group() -> None:
    """On the H200 decode step: get_num_kv_splits_triton is not q8kv8's (SGLang's triton_backend launches it),
    and the hot list says why; decode attention keeps both its kernels."""
    hot = at.hot_list(summarize(TRACE, steps=1), at.build_map(EXTRACTED), at.patch_info(), "decode", 32)
    row = next(r for r in hot.rows if r.kernel == "get_num_kv_splits_triton")
    assert (row.op, row.group, row.short_name) == ("other", "other", None)
    assert any(n.startswith("get_num_kv_splits_triton: listed in q8kv8_topk_length_from_indices's recipe")
               for n in hot.notes)
    for kernel in ("_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2"):
        assert next(r for r in hot.rows if r.kernel == kernel).short_name == "decode_attention"


def test_enums_in_order_with_explicit_values() -> None:
    text = "enum class A : uint32_t { kX, kY = 4, kZ /* 5 */ };\nenum class B { p = 0x2, q }; enum class C { r = N };"
    assert at.enums(text) == {"A": {0: "kX", 4: "kY", 5: "kZ"}, "B": {2: "p", 3: "q"}}


def _activation_map(root: Path) -> at.KernelMap:
    for name in ACTIVATION_OPS:
        _op(root, name, "src/kernels/jit/csrc/elementwise/activation.cuh", ACTIVATION)
    return at.build_map(root)


@pytest.mark.parametrize(("value", "ops"), [
    (0, ["silu_and_mul", "silu_and_mul_with_activation_rounding"]),
    (1, ["gelu_and_mul"]),
    (2, ["gelu_tanh_and_mul"]),
    (3, ["relu2"]),
])
def test_a_shared_cuda_kernel_is_narrowed_by_its_enum_argument(tmp_path: Path, value: int, ops: list[str]) -> None:
    kmap = _activation_map(tmp_path)
    assert [r.short_name for r in kmap.match(ACT.format(value))] == ops


def test_the_two_silu_ops_left_are_named_with_what_was_told(tmp_path: Path) -> None:
    """silu_and_mul and its rounding variant differ only in template flags: still ambiguous, and the row says
    which enumerator both hold."""
    kmap = _activation_map(tmp_path)
    trace = summarize(TRACE, steps=1)
    row = next(r for r in at.hot_list(trace, kmap, at.patch_info()).rows if "act_and_mul_kernel" in r.kernel)
    assert row.candidates == ["silu_and_mul", "silu_and_mul_with_activation_rounding"]
    assert row.status == ("ambiguous: 2 ops share this kernel (all ActivationKind::kSiLU; their other template "
                          "arguments are not told apart)")


def test_a_kernel_whose_enum_the_sources_do_not_declare_stays_shared(tmp_path: Path) -> None:
    no_enum = ACTIVATION.replace("enum class", "// was an enum class")
    for name in ACTIVATION_OPS:
        _op(tmp_path, name, "src/kernels/jit/csrc/elementwise/activation.cuh", no_enum)
    assert [r.short_name for r in at.build_map(tmp_path).match(ACT.format(1))] == list(ACTIVATION_OPS)


@pytest.mark.skipif(not ACTIVATION_SRC.is_file(), reason="silu_and_mul's CUDA source is not restored here")
def test_the_extracted_activation_source_narrows_gelu_tanh() -> None:
    assert [r.short_name for r in at.build_map(EXTRACTED).match(ACT.format(2))] == ["gelu_tanh_and_mul"]
