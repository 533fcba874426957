"""``profile``'s bytes columns: the bytes an op's call moves in SGLang's forward, counted by the op's contract at the
dims the model config gives (profile/traffic.py), and its GB/s as a % of the copy ceiling in the hot list.

The recorded trace is the H200 one of tests/test_profile_recorded.py (LLaMA-3-8B dims, decode at batch 32, prompt
1024, graphs off, the runner's warm-up: context 1033 per request at the profiled step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_sglang.cli.main import main
from astra_sglang.contract.op import load_manifest
from astra_sglang.harness.shared.suite import contract_bytes
from astra_sglang.profile import attribution as at
from astra_sglang.profile import runner
from astra_sglang.profile.configs import model_config
from astra_sglang.profile.trace import summarize
from astra_sglang.profile.traffic import count, human_bytes, model_dtype

ROOT = Path(__file__).resolve().parents[1]
EXTRACTED = ROOT / "extracted"
FIXTURES = Path(__file__).parent / "h_fixtures" / "profile"
RECORDED = FIXTURES / "h200_llama3_8b_bs32_decode.trace.json.gz"
SYNTHETIC = FIXTURES / "astra_batch128_input512_output16_decode.trace.json"  # one_batch's name: bs 128, 512 / 16
LLAMA = model_config("llama3-8b")
H200_CEILING = 4267.0  # GB/s, measured on the H200


def _decode(config: dict[str, object], bs: int, context: int, input_len: int = 1024) -> dict[str, int]:
    return count(EXTRACTED, config, "decode", bs, input_len, context, "bfloat16").bytes_per_call


def test_decode_attention_bytes_are_the_contracts_count_by_hand() -> None:
    """LLaMA-3-8B decode at batch 128, 1033 KV rows per request: the batch's K and V rows, q and o, the indices and
    the split-K partials (attn_logits/lse at MS = 8); the pool's other slots (X) are not traffic."""
    b, s, nk, g, d, ms = 128, 1033, 8, 4, 128, 8
    bf16, f32, i32, i64 = 2, 4, 4, 8
    kv = 2 * (b * s * nk * d * bf16)  # k_buffer and v_buffer rows of the batch
    q_and_o = 2 * (b * nk * g * d * bf16)
    indices = (b + 1) * i32 + b * s * i64 + b * i32  # kv_indptr, kv_indices, num_kv_splits
    partials = b * nk * g * ms * d * f32 + b * nk * g * ms * f32  # attn_logits, attn_lse
    assert _decode(LLAMA, 128, 1033)["decode_attention"] == kv + q_and_o + indices + partials
    assert kv == 2 * 128 * 1033 * 8 * 128 * 2


def test_fused_add_rmsnorm_counts_its_in_place_tensors_twice() -> None:
    """input and residual are read and written (in place), the weight read once."""
    assert _decode(LLAMA, 32, 1033)["fused_add_rmsnorm"] == 4 * 32 * 4096 * 2 + 4096 * 2


def test_prefill_dims_come_from_the_prompt() -> None:
    t = count(EXTRACTED, LLAMA, "prefill", 4, 512, 0, "bfloat16")
    assert t.dims["extend_attention"] == {"B": 4, "L": 512, "R": 0, "NK": 8, "G": 4, "D": 128, "X": 0}
    assert t.dims["fused_add_rmsnorm"] == {"T": 4 * 512, "H": 4096}
    assert t.dims["silu_and_mul"] == {"T": 4 * 512, "H": 14336}
    assert t.bytes_per_call["silu_and_mul"] == 3 * 4 * 512 * 14336 * 2  # read 2H, write H
    assert "decode_attention" not in t.bytes_per_call


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite"])
def test_a_moe_model_gives_no_silu_and_mul_count(name: str) -> None:
    t = count(EXTRACTED, model_config(name), "decode", 32, 1024, 1033, "bfloat16")
    assert "silu_and_mul" not in t.bytes_per_call
    assert any(w.startswith("silu_and_mul: a MoE model") for w in t.not_counted)
    assert "fused_add_rmsnorm" in t.bytes_per_call


def test_what_the_config_does_not_give_is_not_counted() -> None:
    mla = count(EXTRACTED, model_config("deepseek-v2-lite"), "decode", 32, 1024, 1033, "bfloat16")
    assert "decode_attention" not in mla.bytes_per_call  # MLA attention runs with other dims
    tp = count(EXTRACTED, LLAMA, "decode", 32, 1024, 1033, "bfloat16", tp_size=2)
    assert set(tp.bytes_per_call) == {"fused_add_rmsnorm"}  # per-rank heads and MLP width are not derived
    assert count(EXTRACTED, {"model_type": "x"}, "decode", 32, 1024, 1033, "bfloat16").bytes_per_call == {}


def test_a_manifest_whose_dims_differ_gives_no_count() -> None:
    m = load_manifest(EXTRACTED / "fused_add_rmsnorm")
    assert contract_bytes(m, {"T": 32, "H": 4096}, "bfloat16") is not None
    assert contract_bytes(m, {"T": 32, "H": 4096, "X": 0}, "bfloat16") is None
    assert contract_bytes(m, {"T": 32}, "bfloat16") is None
    assert contract_bytes(m, {"T": 32, "H": 4096}, "float8_e4m3fn_unknown") is None


def test_the_harness_counts_bytes_by_the_same_rule() -> None:
    """One notion of bytes moved: the harness's ArgSet (real tensors) and the contract count agree."""
    pytest.importorskip("torch")
    from astra_sglang.harness.shared.tensors import ArgSet

    m = load_manifest(EXTRACTED / "fused_add_rmsnorm")
    dims = {"T": 3, "H": 16}
    assert ArgSet(m, dims, "bfloat16", "cpu").bytes_moved() == contract_bytes(m, dims, "bfloat16") == 4 * 48 * 2 + 32


def test_dtype_and_sizes_in_words() -> None:
    assert model_dtype(LLAMA) == "bfloat16"
    assert model_dtype({"torch_dtype": "float32"}) == "bfloat16"  # SGLang's auto runs float32 configs in bf16
    assert model_dtype(LLAMA, "half") == "float16"
    assert [human_bytes(n) for n in (512, 4096, 541_100_000, 2.5e9)] == ["512 B", "4.1 kB", "541.1 MB", "2.5 GB"]


@pytest.fixture(scope="module")
def recorded() -> at.HotList:
    traffic = count(EXTRACTED, LLAMA, "decode", 32, 1024, runner.decode_context(1024, 16, 1), "bfloat16")
    return at.hot_list(summarize(RECORDED, steps=1), at.build_map(EXTRACTED), at.patch_info(), "decode", 32,
                       traffic, H200_CEILING)


def test_recorded_decode_attention_runs_at_a_believable_share_of_the_ceiling(recorded: at.HotList) -> None:
    """Stage 1 (44 us) and stage 2 (3 us) together move the op's 140 MB: one % for both rows, 40-100% of copy."""
    rows = [r for r in recorded.rows if r.short_name == "decode_attention"]
    assert {r.kernel for r in rows} == {"_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2"}
    for r in rows:
        assert r.bytes_per_op_call == _decode(LLAMA, 32, 1033)["decode_attention"]
        assert r.bytes_moved == "140.4 MB"
        assert r.copy_ceiling_pct is not None and 40 < r.copy_ceiling_pct < 100
        assert r.pct_copy_ceiling == f"{r.copy_ceiling_pct:.0f}%"
    us = sum(r.us_per_step for r in rows)
    assert rows[0].op_gbps == pytest.approx(_decode(LLAMA, 32, 1033)["decode_attention"] * 32 / us / 1e3)
    assert recorded.traffic_dims["decode_attention"]["S"] == 1033 and recorded.copy_ceiling_gbps == H200_CEILING


def test_each_counted_op_says_how_much_of_the_step_it_could_give_back_at_the_ceiling(recorded: at.HotList) -> None:
    """A 57%-of-decode op at 57% of the copy ceiling can give back about a quarter of the step; a 72% op already
    near the ceiling far less. Share alone ranked them the other way round (Qwen3 bound, 2026-12-07-a)."""
    rows = [r for r in recorded.rows if r.short_name == "decode_attention"]
    pct = rows[0].copy_ceiling_pct
    assert pct is not None
    want = sum(r.share for r in rows) * (1 - pct / 100)
    assert all(r.ceiling_gain_pct == pytest.approx(want) for r in rows) and 0 < want < sum(r.share for r in rows)
    assert all(r.ceiling_gain_pct is None for r in recorded.rows if r.copy_ceiling_pct is None)
    (top,) = [t for t in at.top_ops([recorded]) if t.short_name == "decode_attention"]
    assert top.ceiling_gain == pytest.approx(want)


def test_rows_without_a_count_stay_dashes_and_the_note_says_what_was_counted(recorded: at.HotList) -> None:
    for r in recorded.rows:
        if r.short_name not in ("decode_attention", "fused_add_rmsnorm"):
            assert (r.bytes_moved, r.pct_copy_ceiling, r.bytes_per_op_call) == ("-", "-", None)
    assert at.BYTES_NOTE not in recorded.notes
    note = next(n for n in recorded.notes if n.startswith("bytes moved:"))
    assert "per op call, all its kernels together" in note and "context 1033 per request" in note
    assert "decode_attention (B=32 S=1033 NK=8 G=4 D=128 X=0 KX=0 MS=8" in note and "4267 GB/s" in note
    assert "silu_and_mul" in note  # counted, but its kernel is one five activation ops share


def test_without_a_ceiling_the_bytes_show_and_the_percent_does_not() -> None:
    traffic = count(EXTRACTED, LLAMA, "decode", 32, 1024, 1033, "bfloat16")
    hl = at.hot_list(summarize(RECORDED, steps=1), at.build_map(EXTRACTED), at.patch_info(), "decode", 32, traffic)
    r = next(r for r in hl.rows if r.short_name == "decode_attention")
    assert (r.bytes_moved, r.pct_copy_ceiling, r.copy_ceiling_pct) == ("140.4 MB", "-", None)
    assert r.op_gbps is not None and any("--copy-ceiling GBPS" in n for n in hl.notes)


def test_runner_reads_the_forward_from_its_server_arguments(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    args = ["--model-path", str(tmp_path), "--attention-backend", "triton", "--triton-attention-num-kv-splits=16"]
    t = runner.model_traffic(args, EXTRACTED, "decode", 32, 1024, 16, 1)
    assert t is not None and t.dims["decode_attention"]["MS"] == 16 and t.dims["decode_attention"]["S"] == 1033
    assert runner.decode_context(1024, 16, 3) == 1024 + 8 + 1 + 1  # the middle of steps 8..10
    assert runner.decode_context(512, 4, 1) == 512 + 2 + 1  # a short output: the warm-up shrinks
    assert runner.model_traffic(["--model-path", "meta-llama/Meta-Llama-3-8B"], EXTRACTED, "decode", 32, 1024, 16,
                                1) is None  # a Hub id: no local config to read


def test_cli_trace_with_model_config_and_ceiling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA))
    argv = ["profile", "--trace", str(RECORDED), "--batch-size", "32", "--phase", "decode", "--input-len", "1024",
            "--output-len", "16", "--model-config", str(cfg), "--copy-ceiling", "4267", "--json"]
    assert main(argv) == 0
    (hl,) = json.loads(capsys.readouterr().out)["hot_lists"]
    assert hl["copy_ceiling_gbps"] == 4267 and hl["traffic_dims"]["decode_attention"]["S"] == 1033
    row = next(r for r in hl["rows"] if r["kernel"] == "_fwd_grouped_kernel_stage1")
    assert row["bytes_per_op_call"] == _decode(LLAMA, 32, 1033)["decode_attention"]
    assert 40 < row["copy_ceiling_pct"] < 100 and row["op_gbps"] > 1000
    assert 0 < row["ceiling_gain_pct"] < row["share"]
    argv.remove("--json")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Step % at ceiling" in out and "% of the step back at 100% of the copy ceiling" in out


def test_cli_reads_lengths_off_one_batchs_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA))
    assert main(["profile", "--trace", str(SYNTHETIC), "--model-config", str(cfg), "--json"]) == 0
    (hl,) = json.loads(capsys.readouterr().out)["hot_lists"]
    assert hl["traffic_dims"]["decode_attention"]["B"] == 128
    assert hl["traffic_dims"]["decode_attention"]["S"] == 512 + 8 + 1  # input 512, output 16: step 8 profiled
    row = next(r for r in hl["rows"] if r["kernel"] == "_fwd_grouped_kernel_stage1")
    assert row["bytes_moved"].endswith(" MB") and row["pct_copy_ceiling"] == "-"


@pytest.mark.parametrize("extra, message", [
    (["--model-config", "CFG"], "--model-config and --copy-ceiling go with --trace"),
    (["--trace", str(RECORDED), "--model-config", "CFG"], "needs the batch size and phase"),
    (["--trace", str(SYNTHETIC), "--model-config", "BAD"], "is not JSON"),
    (["--trace", str(SYNTHETIC), "--copy-ceiling", "0"], "must be a number > 0"),
])
def test_bad_traffic_input_is_one_line(extra: list[str], message: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cfg.json").write_text(json.dumps(LLAMA))
    (tmp_path / "bad.json").write_text("{not json")
    paths = {"CFG": str(tmp_path / "cfg.json"), "BAD": str(tmp_path / "bad.json")}
    assert main(["profile", *[paths.get(a, a) for a in extra]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
