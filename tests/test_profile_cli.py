"""``astra-sglang profile`` at the command line, on the SYNTHETIC decode trace (tests/h_fixtures/profile/README.md),
and its config-only model folders."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from astra_sglang.cli.main import main
from astra_sglang.profile.configs import CONFIGS, config_names, model_config, write_config_model
from astra_sglang.profile.runner import NEEDS_GPU

DECODE = Path(__file__).parent / "h_fixtures" / "profile" / "astra_batch128_input512_output16_decode.trace.json"


def test_trace_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--trace", str(DECODE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (hl,) = out["hot_lists"]
    assert (hl["phase"], hl["batch_size"], hl["steps"]) == ("decode", 128, 1)  # read off one_batch's file name
    assert sum(r["share"] for r in hl["rows"]) == pytest.approx(100.0)
    assert hl["rows"][0]["kernel"] == "_fwd_grouped_kernel_stage1"
    assert [t["short_name"] for t in out["top"]] == ["decode_attention", "fused_add_rmsnorm", "fused_rope"]
    assert out["top"][0]["command"] == "astra-sglang optimize decode_attention"


def test_trace_table_ends_with_the_top_three(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--trace", str(DECODE), "--steps", "2", "--phase", "decode", "--batch-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "decode, batch 64: 5000.0 us of GPU kernels per step" in out
    assert "attention.decode_attention_fwd" in out and "GEMM" in out
    tail = out.split("most worth optimizing:")[1].splitlines()
    assert tail[1].strip().startswith("1. attention.decode_attention_fwd: 58.7% of step GPU time (decode, batch 64;")
    assert tail[2].strip().endswith("optimize decode_attention")


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "hot.png"
    assert main(["profile", "--trace", str(DECODE), "--png", str(png), "--json"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["profile"], "nothing to run"),
    (["profile", "--trace", str(DECODE), "--config", "llama3-8b"], "takes no --config"),
    (["profile", "--trace", "/nonexistent.json"], "no trace file"),
    (["profile", "--only-config"], "--only-config goes with --config"),
    (["profile", "--config", "gpt-17", "--only-config"], "no config 'gpt-17' (known: deepseek-v2-lite"),
    (["profile", "--trace", str(DECODE), "--compare"], "--compare needs exactly two --trace files"),
])
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_without_a_gpu_the_run_says_how_to_attribute_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available() and importlib.util.find_spec("sglang") is not None:
        pytest.skip("this host can run the forward")
    assert main(["profile", "--", "--model-path", "m"]) == 2
    assert capsys.readouterr().err.strip() == f"astra-sglang: error: {NEEDS_GPU}"


@pytest.mark.parametrize("name, fields", [
    ("llama3-8b", {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "intermediate_size": 14336, "vocab_size": 128256, "rope_theta": 500000.0,
                   "max_position_embeddings": 16384}),
    ("qwen3-8b", {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36,
                  "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936}),
    ("qwen3-30b-a3b", {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
                       "num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8,
                       "moe_intermediate_size": 768}),
    ("mixtral-8x7b", {"architectures": ["MixtralForCausalLM"], "num_local_experts": 8, "num_experts_per_tok": 2,
                      "intermediate_size": 14336, "vocab_size": 32000}),
    ("deepseek-v2-lite", {"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 27,
                          "kv_lora_rank": 512, "qk_rope_head_dim": 64, "n_routed_experts": 64,
                          "num_experts_per_tok": 6, "moe_intermediate_size": 1408, "first_k_dense_replace": 1}),
])
def test_config_writer_fields(name: str, fields: dict[str, object], tmp_path: Path) -> None:
    out = write_config_model(name, tmp_path / name)
    cfg = json.loads((out / "config.json").read_text())
    assert {k: cfg[k] for k in fields} == fields
    assert cfg["torch_dtype"] == "bfloat16"
    assert cfg["eos_token_id"] < cfg["vocab_size"]  # the small tokenizer's ids are valid model input
    assert (out / "tokenizer.json").is_file()


def test_config_cli_writes_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--config", "Qwen3-8B", "--out", str(tmp_path), "--only-config"]) == 0
    assert json.loads((tmp_path / "model-qwen3-8b" / "config.json").read_text())["model_type"] == "qwen3"
    assert "config-only model" in capsys.readouterr().err
    assert set(config_names()) == set(CONFIGS) and model_config("LLaMA-3-8B")["hidden_size"] == 4096


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_configs_and_tokenizer_load_with_transformers(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    for name in config_names():
        out = write_config_model(name, tmp_path / name)
        cfg = AutoConfig.from_pretrained(out)
        assert cfg.architectures == CONFIGS[name]["architectures"]
        assert cfg.hidden_size == CONFIGS[name]["hidden_size"]
    tok = AutoTokenizer.from_pretrained(tmp_path / "llama3-8b")
    ids = tok("The scheduler batches requests.").input_ids
    assert ids and max(ids) < 2048 and tok.decode(ids) == "The scheduler batches requests."


def _patched_trace(folder: Path, name: str = DECODE.name, stage1_scale: float = 0.75) -> Path:
    """The SYNTHETIC decode trace as if the decode-attention patch served: its kernels under the patch's names
    (mr-da2-single-r1's ``_decode_split_stage1/2``), stage 1 at ``stage1_scale`` of the original's time."""
    trace = json.loads(DECODE.read_text())
    for e in trace["traceEvents"] if isinstance(trace, dict) else trace:
        if e.get("name") == "_fwd_grouped_kernel_stage1":
            e["name"], e["dur"] = "_decode_split_stage1", e["dur"] * stage1_scale
        elif e.get("name") == "_fwd_kernel_stage2":
            e["name"] = "_decode_split_stage2"
    path = folder / name
    path.write_text(json.dumps(trace))
    return path


def test_compare_lines_the_patched_kernels_up_with_the_originals_op(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Patches off against patches on: the patch's kernels have other names but count as the op they replace, so
    the op's in-situ saving is one row (the question the e2e's 76% realisation left open), and every other op and
    group shows it did not move."""
    on = _patched_trace(tmp_path)
    assert main(["profile", "--trace", str(DECODE), "--trace", str(on), "--compare", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["a_gpu_us_per_step"] == pytest.approx(10000.0)
    assert out["delta_us_per_step"] == pytest.approx(-0.25 * 32 * 179.375)
    first, *rest = out["rows"]
    assert first["key"] == "attention.decode_attention_fwd"
    assert first["delta_us_per_step"] == pytest.approx(-0.25 * 32 * 179.375)
    assert (first["a_calls_per_step"], first["b_calls_per_step"]) == (64, 64)  # stage 1 and 2, 32 layers
    assert {r["key"] for r in rest} >= {"GEMM", "layernorm.fused_add_rmsnorm"}
    assert all(r["delta_us_per_step"] == pytest.approx(0.0) for r in rest)
    assert main(["profile", "--trace", str(DECODE), "--trace", str(on), "--compare"]) == 0
    table = capsys.readouterr().out
    assert "A 10000.0 -> B 8565.0 (-1435.0)" in table and "attention.decode_attention_fwd" in table


def test_compare_refuses_traces_of_different_batch_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _patched_trace(tmp_path, "astra_batch32_input512_output16_decode.trace.json")
    assert main(["profile", "--trace", str(DECODE), "--trace", str(other), "--compare"]) == 2
    err = capsys.readouterr().err.strip()
    assert "differ in batch size (128 vs 32)" in err and len(err.splitlines()) == 1


_COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
         "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
         "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda"
         "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::"
         "{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::"
         "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
         "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda"
         "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::"
         "{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})")


def _with_q_copies(path: Path, in_hook: bool) -> Path:
    """The patched trace plus what the decode-attention adapter launches before its kernel on LLaMA's strided q:
    a 2.8 us bf16 copy a layer (as on the H100, 2026-12-06), launched inside the adapter's ``launch`` frame
    (``in_hook``; a helper frame nested in it ends before the copy's launch) or from no adapter at all."""
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    corr = max(launches) + 1
    for k in [e for e in events if e.get("name") == "_decode_split_stage1"]:
        launch = launches[k["args"]["correlation"]]
        ts, tid = launch["ts"], launch["tid"]
        if in_hook:
            frame = {"ph": "X", "cat": "python_function", "pid": 1, "tid": tid}
            events.append({**frame, "name": "astra_sglang/patches/adapters/decode_attention.py(106): launch",
                           "ts": ts - 1.0, "dur": 1.5})
            events.append({**frame, "name": "astra_sglang/patches/adapters/decode_attention.py(40): _is_number",
                           "ts": ts - 0.9, "dur": 0.1})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
                       "ts": ts - 0.5, "dur": 0.2, "args": {"correlation": corr}})
        # on a stream of its own: the recorded kernels left no 2.8-us gap before stage 1, and on one stream the
        # overlap would count once, for the kernel that ran first (trace._own_times)
        events.append({"ph": "X", "cat": "kernel", "name": _COPY, "pid": 0, "tid": 70, "ts": k["ts"] - 3.0,
                       "dur": 2.8, "args": {"correlation": corr, "stream": 70, "device": 0}})
        corr += 1
    path.write_text(json.dumps(trace))
    return path


@pytest.mark.parametrize("in_hook", [True, False])
def test_compare_counts_what_the_patch_hook_launches_as_the_patched_op(
        in_hook: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kernel launched inside a patch adapter's frame is that op's cost: the q copy the decode-attention adapter
    makes is part of the patch's in-situ time, not a 'torch elementwise' row that grew (2026-12-06, H100: the op
    row said -1665 us a step, with the copy -1575). A copy launched outside every adapter stays in its group."""
    on = _with_q_copies(_patched_trace(tmp_path), in_hook)
    assert main(["profile", "--trace", str(DECODE), "--trace", str(on), "--compare", "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    op, elementwise = rows["attention.decode_attention_fwd"], rows.get("torch elementwise")
    saving, copies = -0.25 * 32 * 179.375, 32 * 2.8
    if in_hook:
        assert op["delta_us_per_step"] == pytest.approx(saving + copies)
        assert op["b_calls_per_step"] == 96
        assert elementwise is None or elementwise["delta_us_per_step"] == pytest.approx(0.0)
    else:
        assert op["delta_us_per_step"] == pytest.approx(saving)
        assert elementwise is not None and elementwise["delta_us_per_step"] == pytest.approx(copies)


def test_compare_lists_each_changed_ops_kernels_with_their_time_a_call(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Which kernel of the patched op moved, a call at a time: the original's stage 1 gone, the patch's stage 1 at
    0.75 of it, the q copy its hook launches, each with its us a call in both traces (the in-situ stage 2 of
    2026-12-06 had to be read off the raw traces)."""
    on = _with_q_copies(_patched_trace(tmp_path), in_hook=True)
    assert main(["profile", "--trace", str(DECODE), "--trace", str(on), "--compare", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    kernels = {r["key"]: r for r in out["kernels"]["attention.decode_attention_fwd"]}
    old, new = kernels["_fwd_grouped_kernel_stage1"], kernels["_decode_split_stage1"]
    assert (old["a_calls_per_step"], old["b_calls_per_step"], new["a_calls_per_step"], new["b_calls_per_step"]) == (
        32, 0, 0, 32)
    assert new["b_us_per_step"] / new["b_calls_per_step"] == pytest.approx(0.75 * 179.375)
    assert kernels[_COPY]["b_us_per_step"] == pytest.approx(32 * 2.8)
    assert sum(r["delta_us_per_step"] for r in kernels.values()) == pytest.approx(
        out["rows"][0]["delta_us_per_step"])
    assert main(["profile", "--trace", str(DECODE), "--trace", str(on), "--compare"]) == 0
    table = capsys.readouterr().out
    assert "Kernels of the 3 rows that changed most" in table and "134.53" in table  # 0.75 x 179.375 a call


def test_profile_hands_the_prefill_grouping_to_its_one_batch_child_and_nothing_else(tmp_path, capsys, monkeypatch):
    """`profile --prefill-chunk-tokens N` puts N in both one_batch children's environment (chunked_prefill.py reads it
    there); without the flag a value left in the user's shell is taken out."""
    from astra_sglang.profile import runner

    seen: list[str | None] = []

    def child(cmd: list[str], env: dict[str, str]) -> str:
        seen.append(env.get("ASTRA_PREFILL_CHUNK_TOKENS"))
        return ""

    monkeypatch.setattr(runner, "require_gpu", lambda: None)
    monkeypatch.setattr(runner, "_run", child)
    monkeypatch.setenv("ASTRA_PREFILL_CHUNK_TOKENS", "8")
    args = ["profile", "--out", str(tmp_path), "--batch-size", "32", "--input-len", "8160", "--phase", "decode"]
    for extra, want in (([], None), (["--prefill-chunk-tokens", "32768"], "32768")):
        seen.clear()
        assert main([*args, *extra, "--", "--model-path", "nowhere"]) != 0  # no trace came back: said, no traceback
        assert "wrote no trace" in capsys.readouterr().err
        assert seen == [want, want]  # the profiled pass and the timed pass
