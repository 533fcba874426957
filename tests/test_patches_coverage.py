"""`patches coverage`: which patch would serve each call of a model's forward, from its config alone.

On 2026-12-07 an end-to-end run was planned for Qwen3-30B-A3B with both decode-attention patches, whose guards'
outer boxes hold GQA 8 with 4 KV heads but whose measured regions take no such call at batch 32 or 128: the arms
would have measured patches that serve nothing. These tests pin what the tool must say before any GPU time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_sglang.cli.main import main
from astra_sglang.contract.patch import DimRange, GuardSpec, PatchManifest, load_patch_manifest
from astra_sglang.profile.configs import model_config
from astra_sglang.profile.coverage import coverage
from astra_sglang.profile.traffic import count, forward_dims

REPO = Path(__file__).resolve().parents[1]
REWRITE = REPO / "patches" / "decode_attention" / "mr-da2-single-r1"
RETUNE = REPO / "patches" / "decode_attention" / "sglang-retuned-da"
W1 = REPO / "patches" / "fused_moe_kernel" / "sglang-retuned-moe-w1"


def _box(**ranges: tuple[int, int]) -> dict[str, DimRange]:
    return {k: DimRange(min=lo, max=hi) for k, (lo, hi) in ranges.items()}


def _guard(*regions: dict[str, DimRange]) -> GuardSpec:
    """Decode attention's wide outer box (any GQA, any KV heads) with the given measured regions."""
    return GuardSpec(dtypes=["bfloat16"], dims=_box(B=(1, 256), NK=(1, 8), G=(1, 8), D=(64, 256), MS=(8, 8),
                                                    P=(1, 64)), regions=list(regions))


def _patch(path: Path, guard: GuardSpec, gpus: list[str] | None = None, **update: object) -> PatchManifest:
    m = load_patch_manifest(path)
    on = m.validated_on.model_copy(update={"gpus": gpus if gpus is not None else ["NVIDIA H200"]})
    return m.model_copy(update={"guard": guard, "validated_on": on, "guard_in_front": {}, **update})


LLAMA_SMALL_B = _box(B=(1, 16), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))


def test_a_patch_serves_a_call_only_inside_one_of_its_measured_regions_not_its_outer_box() -> None:
    rewrite = _patch(REWRITE, _guard(LLAMA_SMALL_B))
    rows, _ = coverage(model_config("llama3-8b"), [rewrite], [1, 32], ["decode"], 1024, "bfloat16")
    at = {r.batch_size: r for r in rows}
    assert at[1].serves and at[1].why == "serves"
    assert not at[32].serves and "measured region" in at[32].why
    # Qwen3-30B-A3B: GQA 8 and 4 KV heads are inside the outer box, in no region
    rows, _ = coverage(model_config("qwen3-30b-a3b"), [rewrite], [1, 128], ["decode"], 1024, "bfloat16")
    assert [(r.dims["NK"], r.dims["G"]) for r in rows] == [(4, 8), (4, 8)]
    assert not any(r.serves for r in rows) and all("measured region" in r.why for r in rows)


def test_a_rewrite_in_front_of_its_retune_takes_its_front_guard_and_the_retune_what_is_left() -> None:
    front = _box(B=(1, 16), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))
    rewrite = _patch(REWRITE, _guard(_box(B=(1, 256), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))),
                     guard_in_front={"sglang-retuned-da": _guard(front)})
    retune = _patch(RETUNE, _guard(_box(B=(1, 256), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))))
    rows, _ = coverage(model_config("llama3-8b"), [retune, rewrite], [8, 64], ["decode"], 1024, "bfloat16")
    got = {(r.batch_size, r.patch_id): (r.serves, r.why) for r in rows}
    assert got[(8, "mr-da2-single-r1")] == (True, "serves (its guard in front of sglang-retuned-da)")
    assert got[(8, "sglang-retuned-da")] == (False, "mr-da2-single-r1 serves it, standing in front")
    assert got[(64, "mr-da2-single-r1")][0] is False  # its own guard would take B 64; in front, only B 1..16
    assert got[(64, "sglang-retuned-da")] == (True, "serves")
    # alone, the rewrite's own guard decides
    rows, _ = coverage(model_config("llama3-8b"), [rewrite], [64], ["decode"], 1024, "bfloat16")
    assert rows[0].serves


def test_a_retune_whose_guard_won_nothing_on_this_gpu_leaves_the_rewrite_its_own_guard_as_the_plugin_does() -> None:
    """The plugin refuses a retune whose guard serves no shape on this GPU (``guard_problem``), and the rewrite in
    front of it then serves its own guard. Coverage once gated the retune on its GPU list alone, so a retune recorded
    on an H200 that won nothing there kept the rewrite on its narrow front guard in the table."""
    llama = _box(B=(1, 256), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))
    rewrite = _patch(REWRITE, _guard(llama), guard_in_front={"sglang-retuned-da": _guard(LLAMA_SMALL_B)})
    h100 = "NVIDIA H100 80GB HBM3"
    retune = _patch(RETUNE, _guard(llama).model_copy(update={"gpu_regions": {h100: [llama], "NVIDIA H200": []}}),
                    gpus=[h100, "NVIDIA H200"])  # recorded on both; won only on the H100
    rows, _ = coverage(model_config("llama3-8b"), [retune, rewrite], [64], ["decode"], 1024, "bfloat16",
                       gpu="NVIDIA H200", attention_backend="triton")
    got = {r.patch_id: (r.serves, r.why) for r in rows}
    assert got["mr-da2-single-r1"] == (True, "serves")  # its own guard: B 64 is outside its front guard
    assert not got["sglang-retuned-da"][0]
    assert got["sglang-retuned-da"][1].startswith("stands aside on NVIDIA H200: its guard serves no shape")
    rows, _ = coverage(model_config("llama3-8b"), [retune, rewrite], [64], ["decode"], 1024, "bfloat16",
                       gpu=h100, attention_backend="triton")
    got = {r.patch_id: (r.serves, r.why) for r in rows}  # on the H100 the retune serves, the front guard holds
    assert got["sglang-retuned-da"] == (True, "serves") and not got["mr-da2-single-r1"][0]


def test_a_patch_measured_on_another_gpu_stands_aside_there_as_the_plugin_does() -> None:
    rewrite = _patch(REWRITE, _guard(LLAMA_SMALL_B), gpus=["NVIDIA H100 80GB HBM3"])
    config = model_config("llama3-8b")
    rows, _ = coverage(config, [rewrite], [1], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200",
                       attention_backend="triton")
    assert not rows[0].serves and rows[0].why.startswith("stands aside on NVIDIA H200")
    rows, _ = coverage(config, [rewrite], [1], ["decode"], 1024, "bfloat16", gpu="NVIDIA H100 80GB HBM3",
                       attention_backend="triton")
    assert rows[0].serves
    rows, _ = coverage(config, [rewrite], [1], ["decode"], 1024, "float16")
    assert not rows[0].serves and "dtype float16" in rows[0].why


def test_the_moe_gemms_dims_are_what_the_patch_adapter_reads_from_sglangs_tensors() -> None:
    """w1: N is the gate and up rows (2 x the expert width), K the hidden size; w2: H hidden, I the expert width;
    T is tokens, not tokens x top-k (fused_moe adapter). Their bytes follow the routing: the profile counts none."""
    dims, _ = forward_dims(model_config("qwen3-30b-a3b"), "decode", 32, 1024, 1033)
    assert dims["fused_moe_kernel"] == {"T": 32, "TK": 8, "E": 128, "N": 1536, "K": 2048}
    assert dims["fused_moe_down"] == {"T": 32, "TK": 8, "E": 128, "H": 2048, "I": 768}
    dims, _ = forward_dims(model_config("mixtral-8x7b"), "prefill", 2, 1024, 1024)
    assert dims["fused_moe_kernel"] == {"T": 2048, "TK": 2, "E": 8, "N": 28672, "K": 4096}
    traffic = count(REPO / "extracted", model_config("qwen3-30b-a3b"), "decode", 32, 1024, 1033, "bfloat16")
    assert not {"fused_moe_kernel", "fused_moe_down"} & set(traffic.bytes_per_call)
    assert not any("fused_moe" in why for why in traffic.not_counted)
    # the shipped w1 retune's region is Qwen3's decode (T 1..256): the tool finds it serving there
    rows, _ = coverage(model_config("qwen3-30b-a3b"), [load_patch_manifest(W1)], [32, 512], ["decode"], 1024,
                       "bfloat16", gpu="NVIDIA H200")
    assert [(r.batch_size, r.serves) for r in rows] == [(32, True), (512, False)]


def test_cli_prints_the_table_and_names_the_patches_that_serve_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["patches", "coverage", "--config", "qwen3-30b-a3b", "--batch-size", "32", "--patches",
                 "sglang-retuned-moe-w1,merge-state-mr-k1", "--gpu", "NVIDIA H200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["patch_id"], r["serves"]) for r in out["rows"]] == [("sglang-retuned-moe-w1", True)]
    assert any(n.startswith("merge_state (merge-state-mr-k1): ") for n in out["notes"])
    assert main(["patches", "coverage", "--config", "qwen3-30b-a3b", "--batch-size", "32", "--patches",
                 "sglang-retuned-moe-w1,merge-state-mr-k1"]) == 0
    text = capsys.readouterr().out
    assert "sglang-retuned-moe-w1" in text and "not judged: merge_state" in text
    assert "serving none of these calls" not in text  # the one patch judged serves


def test_cli_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["patches", "coverage", "--config", "qwen3-30b-a3b", "--patches", "no-such-patch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no patch no-such-patch" in err[0]
    assert main(["patches", "coverage", "--config", "gpt-9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no config 'gpt-9'" in err[0]


def test_e2e_warns_before_its_run_of_each_patch_that_would_serve_none_of_the_forwards_calls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The w2 MoE retune serves T 16, 64 and 256 only: an e2e at batch 32 and 128 would measure it serving nothing."""
    from astra_sglang.profile import coverage as cov
    from astra_sglang.profile.configs import write_config_model

    model = write_config_model("qwen3-30b-a3b", tmp_path / "qwen3")
    monkeypatch.setattr(cov, "_gpu_name", lambda: "NVIDIA H200")
    args = ["--model-path", str(model), "--load-format", "dummy", "--batch-size", "32", "128", "--input-len", "1024"]
    lines = cov.idle_patch_lines(cov.forward_rows(args, "sglang-retuned-moe-w1,sglang-retuned-moe-w2"))
    assert len(lines) == 1 and lines[0].startswith("sglang-retuned-moe-w2 would serve none")
    assert "batch 32, 128" in lines[0] and "measured region" in lines[0]
    assert cov.idle_patch_lines(cov.forward_rows(args[:2] + ["--batch-size", "16"], "sglang-retuned-moe-w2")) == []
    assert cov.forward_rows(["--model-path", "Qwen/Qwen3-30B-A3B"], "all") is None  # a Hub id: nothing to read


def test_patches_guard_without_evidence_files_derives_from_the_records_in_the_manifest(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`patches verify ID --record` adds its harness result to the manifest's evidence; after a record at new shapes
    (a contract revision), `patches guard ID --write` must be able to use it without a separate bench file. On the
    shipped rewrite the records reproduce the guard it ships with."""
    assert main(["patches", "guard", "mr-da2-single-r1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    shipped = load_patch_manifest(REWRITE).guard
    assert out["written"] is False and GuardSpec.model_validate(out["guard"]) == shipped


def test_a_retune_standing_aside_leaves_the_rewrite_in_front_its_own_guard_as_the_runtime_does() -> None:
    front = _box(B=(1, 16), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))
    rewrite = _patch(REWRITE, _guard(_box(B=(1, 256), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))),
                     gpus=["NVIDIA H200", "NVIDIA H100 80GB HBM3"], guard_in_front={"sglang-retuned-da": _guard(front)})
    retune = _patch(RETUNE, _guard(_box(B=(1, 256), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))),
                    gpus=["NVIDIA H100 80GB HBM3"])
    config = model_config("llama3-8b")
    on_h200, _ = coverage(config, [rewrite, retune], [128], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200",
                          attention_backend="triton")
    assert {r.patch_id: r.serves for r in on_h200} == {"mr-da2-single-r1": True, "sglang-retuned-da": False}
    on_h100, _ = coverage(config, [rewrite, retune], [128], ["decode"], 1024, "bfloat16",
                          gpu="NVIDIA H100 80GB HBM3", attention_backend="triton")
    assert {r.patch_id: r.serves for r in on_h100} == {"mr-da2-single-r1": False, "sglang-retuned-da": True}


def test_a_served_call_at_a_kv_length_its_records_never_came_near_is_said() -> None:
    """The guard cannot see decode attention's KV length; the first shipped guards were won at S >= 1033 and both
    patches lost at S 512 on the H100 (2026-12-07). Since then each H100 record also times S 512 (the contract's
    shortest decode context). Coverage names a served call's S that lies more than 10% outside what the records
    measured at that guard point on that GPU, and stays quiet near it (S 1024 beside records at 1033)."""
    retune = load_patch_manifest(RETUNE)
    h100 = "NVIDIA H100 80GB HBM3"

    def row(s: int):
        rows, _ = coverage(model_config("qwen3-30b-a3b"), [retune], [128], ["decode"], s, "bfloat16", gpu=h100,
                           attention_backend="triton")
        return rows[0]

    short, near, long = row(256), row(1024), row(65536)
    assert short.serves and "S=256 outside the S 512..32768 its records measured in this box" in short.why, short.why
    assert long.serves and "S=65536 outside the S 512..32768" in long.why, long.why
    assert near.serves and near.why == "serves", near.why
    assert row(512).why == "serves"  # the twin timed there


def test_a_default_server_on_an_h100_or_h200_never_reaches_the_decode_attention_patches(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang 0.5.23 picks fa3 for LLaMA/Qwen3 on Hopper when --attention-backend is not given
    (get_default_attn_backend); decode_attention_fwd is the triton backend's, so a default server reaches neither
    decode-attention patch there. The fused-MoE GEMMs and the norm are reached under any attention backend."""
    from astra_sglang.profile.coverage import default_attention_backend

    llama, qwen3 = model_config("llama3-8b"), model_config("qwen3-30b-a3b")
    assert [default_attention_backend(llama, g) for g in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H20",
                                                           "NVIDIA A100-SXM4-80GB", "NVIDIA B200", None)] == [
        "fa3", "fa3", "fa3", "flashinfer", "trtllm_mha", None]
    rewrite, w1 = load_patch_manifest(REWRITE), load_patch_manifest(W1)
    rows, _ = coverage(llama, [rewrite], [1], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200")
    assert not rows[0].serves and "called only by the triton attention backend" in rows[0].why
    assert "fa3" in rows[0].why and "get_default_attn_backend" in rows[0].why
    rows, _ = coverage(llama, [rewrite], [1], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200",
                       attention_backend="flashinfer")
    assert not rows[0].serves and "--attention-backend flashinfer" in rows[0].why
    rows, _ = coverage(llama, [rewrite], [1], ["decode"], 1024, "bfloat16", gpu="NVIDIA H100 80GB HBM3",
                       attention_backend="triton")
    assert rows[0].serves
    rows, _ = coverage(llama, [rewrite], [1], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200",
                       attention_backend="triton")
    assert not rows[0].serves and "serves no shape on NVIDIA H200" in rows[0].why  # no S 512 twins timed there
    rows, _ = coverage(qwen3, [w1], [32], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200")
    assert rows[0].serves  # the MoE GEMMs: any attention backend
    assert main(["patches", "coverage", "--config", "llama3-8b", "--batch-size", "1", "--patches",
                 "mr-da2-single-r1", "--gpu", "NVIDIA H200"]) == 0
    text = capsys.readouterr().out
    assert "serving none of these calls: mr-da2-single-r1" in text and "SGLang default" in text


def _row(dims: dict[str, int], served: float, cand: float, gpu: str = "NVIDIA H100 80GB HBM3") -> object:
    from astra_sglang.contract.patch import GuardRow

    return GuardRow(dims=dims, dtype="bfloat16", served_us=served, candidate_us=cand, speedup=served / cand,
                    wins=True, served=True, gpu=gpu)


def test_a_served_call_forecasts_its_saving_from_the_record_timed_in_the_form_it_is_served() -> None:
    """A LLaMA forward hands decode attention q as a view of the qkv rows (QS 1) and uniform contexts (R 1). The
    rewrite's H100 records time B 128 in three forms: eager (no QS: 265.8 -> 198.2 us, 67.6 saved), ragged (R 2)
    and served (QS 1, S 1033: 261.6 -> 213.5 us, 48.1 saved). The forecast must take the served form, though the
    eager row's S 1024 is the nearer, and the newest of equal rows; on another GPU, or with no GPU named, none."""
    llama = _box(B=(1, 256), NK=(8, 8), G=(4, 4), D=(128, 128), MS=(8, 8), P=(1, 1))
    base = {"B": 128, "NK": 8, "G": 4, "D": 128, "P": 1, "MS": 8, "X": 1}
    table = [_row({**base, "S": 1024, "R": 1}, 265.8, 198.2), _row({**base, "S": 1024, "R": 2, "QS": 1}, 238.0, 210.3),
             _row({**base, "S": 1033, "R": 1, "QS": 1}, 262.0, 212.0), _row({**base, "S": 1033, "R": 1, "QS": 1},
                                                                          261.6, 213.5),
             _row({**base, "S": 512, "R": 1, "QS": 1}, 140.6, 109.3), _row({**base, "S": 1024, "R": 1}, 231.4, 146.1,
                                                                          "NVIDIA H200")]
    rewrite = _patch(REWRITE, _guard(llama), gpus=["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
    rewrite = rewrite.model_copy(update={"evidence": rewrite.evidence.model_copy(update={"guard_table": table})})
    config = model_config("llama3-8b")
    rows, _ = coverage(config, [rewrite], [128], ["decode"], 1024, "bfloat16", gpu="NVIDIA H100 80GB HBM3",
                       attention_backend="triton")
    rec = rows[0].record
    assert rec is not None and (rec.served_us, rec.candidate_us) == (261.6, 213.5)
    assert rec.dims["S"] == 1033 and rec.dims["QS"] == 1
    from astra_sglang.profile.coverage import step_savings

    (step,) = step_savings(config, rows)
    assert step.saved_us == pytest.approx(32 * 48.1) and "32 calls x 48.1 us" in step.parts[0]
    on_h200, _ = coverage(config, [rewrite], [128], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200",
                          attention_backend="triton")
    assert on_h200[0].record is not None and on_h200[0].record.served_us == 231.4  # its own GPU's row only
    unnamed, _ = coverage(config, [rewrite], [128], ["decode"], 1024, "bfloat16", attention_backend="triton")
    assert unnamed[0].serves and unnamed[0].record is None
    (step,) = step_savings(config, unnamed)
    assert step.saved_us == 0 and step.uncounted == ["decode_attention by mr-da2-single-r1: no record of it on "
                                                     "this GPU at these dims"]


def test_calls_per_step_only_where_the_config_says_them() -> None:
    from astra_sglang.profile.traffic import calls_per_step

    llama, qwen_moe, ds = (model_config(n) for n in ("llama3-8b", "qwen3-30b-a3b", "deepseek-v2-lite"))
    assert calls_per_step(llama, "decode_attention", "decode") == 32
    assert calls_per_step(llama, "silu_and_mul", "decode") == 32
    assert calls_per_step(llama, "fused_add_rmsnorm", "decode") is None  # the layer communicator decides
    assert calls_per_step(qwen_moe, "fused_moe_kernel", "decode") == 48
    assert calls_per_step(qwen_moe, "silu_and_mul", "decode") is None
    assert calls_per_step(ds, "fused_moe_down", "decode") is None  # its first layer is dense
    assert calls_per_step({**llama, "layer_types": ["sliding_attention", "full_attention"] * 16},
                          "decode_attention", "decode") is None


def test_cli_on_a_named_gpu_prints_each_batch_sizes_forecast_from_the_records(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["patches", "coverage", "--config", "llama3-8b", "--batch-size", "128", "--gpu",
                 "NVIDIA H100 80GB HBM3", "--attention-backend", "triton", "--patches",
                 "mr-da2-single-r1,sglang-retuned-da"]) == 0
    out = capsys.readouterr().out
    assert "decode bs 128: the records forecast" in out and "decode_attention by sglang-retuned-da: 32 calls x" in out
    assert main(["patches", "coverage", "--config", "llama3-8b", "--batch-size", "128", "--attention-backend",
                 "triton"]) == 0
    assert "records forecast" not in capsys.readouterr().out  # no GPU named: no record is this GPU's
    # a long output: the decode calls' mean context (1024 + 14336 / 2) reads the retune's S 8201 record at bs 32
    assert main(["patches", "coverage", "--config", "llama3-8b", "--batch-size", "32", "--gpu", "NVIDIA H100 80GB HBM3",
                 "--attention-backend", "triton", "--patches", "sglang-retuned-da", "--output-len", "14336",
                 "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["record"]["dims"]["S"] == 8201


def test_a_record_row_from_before_rows_named_their_gpu_is_its_one_validated_gpus() -> None:
    """The w1 MoE retune's guard table predates rows naming their GPU; it was validated on the H200 alone, so its
    rows are the H200's and forecast a Qwen3-30B-A3B step there (48 layers), and nothing on an H100."""
    w1 = load_patch_manifest(W1)
    assert w1.validated_on.gpus == ["NVIDIA H200"] and all(r.gpu is None for r in w1.evidence.guard_table)
    from astra_sglang.profile.coverage import step_savings

    config = model_config("qwen3-30b-a3b")
    rows, _ = coverage(config, [w1], [32], ["decode"], 1024, "bfloat16", gpu="NVIDIA H200")
    (step,) = step_savings(config, rows)
    assert rows[0].record is not None and rows[0].record.dims["T"] == 32
    assert step.saved_us == pytest.approx(48 * rows[0].record.saved_us) and step.saved_us > 0
    rows, _ = coverage(config, [w1], [32], ["decode"], 1024, "bfloat16", gpu="NVIDIA H100 80GB HBM3")
    assert rows[0].record is None


def test_e2e_forecasts_a_long_output_from_the_record_at_its_mean_decode_context(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode step's KV length grows from the prompt to prompt + output: an e2e with a 1024-token prompt and 14,336
    new tokens decodes at 8,192 on average, where the retune's H100 record at S 8201 saves 120 us a call, not the
    2.3 us of its S 1033 record (stop 57). The forecast took the prompt length alone."""
    from astra_sglang.profile import coverage as cov
    from astra_sglang.profile.configs import write_config_model

    model = write_config_model("llama3-8b", tmp_path / "llama")
    monkeypatch.setattr(cov, "_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    args = ["--model-path", str(model), "--load-format", "dummy", "--batch-size", "32", "--input-len", "1024",
            "--attention-backend", "triton"]

    def record_s(extra: list[str]) -> int:
        found = cov.forward_rows(args + extra, "sglang-retuned-da")
        assert found is not None
        (row,) = [r for r in found.rows if r.serves]
        assert row.record is not None
        return row.record.dims["S"]

    assert record_s(["--output-len", "14336"]) == 8201
    assert record_s([]) == 1033  # one_batch's default 16 new tokens
    both = cov.forward_rows(args + ["--output-len", "16", "14336"], "sglang-retuned-da")  # one run, two shapes
    saved = cov.forward_savings(both)
    assert saved is not None
    steps = {(s.batch_size, s.input_len, s.output_len): s.saved_us for s in saved[1]}
    assert set(steps) == {(32, 1024, 16), (32, 1024, 14336)}
    assert steps[(32, 1024, 14336)] > 40 * steps[(32, 1024, 16)]  # 32 x 119.7 us against 32 x 2.3 us


@pytest.mark.parametrize("model_type, qs", [("llama", 1), ("qwen2", 1), ("qwen2_moe", 1), ("qwen3", 0)])
def test_decode_attention_is_forecast_in_the_q_layout_the_models_forward_passes(model_type: str, qs: int) -> None:
    """Qwen2's forward (the most served family after LLaMA) splits qkv and ropes in place as LLaMA's does, so its
    decode attention gets q in the qkv rows; Qwen3 normalizes q first (a copy). The record a call is forecast
    from follows that form (read from SGLang 0.5.23's models/qwen2.py, qwen2_moe.py, qwen3.py)."""
    config = {**model_config("llama3-8b"), "model_type": model_type}
    rewrite = load_patch_manifest(REPO / "patches" / "decode_attention" / "mr-da2-single-r1")
    rows, _ = coverage(config, [rewrite], [128], ["decode"], 1024, "bfloat16", gpu="NVIDIA H100 80GB HBM3",
                       attention_backend="triton")
    (row,) = rows
    assert row.record is not None and row.record.dims.get("QS", 0) == qs
    # the H100 records of the two forms: 261.6 -> 213.5 us (q in the qkv rows, S 1033), 265.8 -> 198.2 (contiguous)
    assert row.record.saved_us == pytest.approx(48.1 if qs else 67.6, abs=0.1)
