"""``validate-contract --device cpu`` says what the Triton interpreter cannot run instead of failing on it, ends
with a totals line, and leaves the committed validation.json alone unless asked (``--record``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from astra_sglang.cli.main import main
from astra_sglang.contract.op import load_manifest
from astra_sglang.contract.validation import read_validations
from astra_sglang.harness.parent.contract_validation import INTERPRETER_LIMITS

REPO = Path(__file__).resolve().parents[1]


def _copy(restored_op, root: Path, *names: str) -> Path:
    for name in names:
        shutil.copytree(restored_op(name), root / name, ignore=shutil.ignore_patterns("build"))
    return root


def test_interpreter_limits_are_skipped_by_name_and_the_run_ends_with_totals(restored_op, tmp_path, capsys):
    """bfloat16 under the interpreter is computed on raw integer bits (a FAIL with errors of 1e8 before):
    left out by name while float16 still has to pass; an op the interpreter cannot run at all (libdevice) is
    skipped with the reason, not 'refused' case by case; the last line counts every op once."""
    root = _copy(restored_op, tmp_path / "extracted", "fused_qk_rope_reshape_and_cache", "softcap_inplace_logits",
                 "rmsnorm")
    rc = main(["validate-contract", "--all", "--device", "cpu", "--extracted", str(root)])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0, lines
    by_op = {line.split(":")[0]: line for line in lines[:-2]}
    rope = by_op["fused_qk_rope_reshape_and_cache"]
    assert rope.startswith("fused_qk_rope_reshape_and_cache: PASS |") and " x float16 x " in rope
    assert "skipped: bfloat16 is not supported by the Triton CPU interpreter" in rope
    assert by_op["softcap_inplace_logits"].startswith(
        "softcap_inplace_logits: skipped: the Triton CPU interpreter does not implement triton.language.extra.libdevice")
    assert by_op["rmsnorm"].startswith("rmsnorm: skipped: a CUDA kernel needs a GPU")
    assert lines[-2] == ("3 contracts: 1 pass (1 without bfloat16: interpreter limit), 2 skipped (1 need a GPU, "
                         "1 interpreter limits), 0 fail")
    assert "validation.json left unchanged" in lines[-1] and "--record" in lines[-1]
    name = "fused_qk_rope_reshape_and_cache"
    assert (root / name / "validation.json").read_bytes() == (restored_op(name) / "validation.json").read_bytes()


def test_a_cpu_run_leaves_validation_json_alone_unless_recorded(restored_op, tmp_path, capsys):
    """The committed validation.json holds the H200's records: an interpreter run appended to it by default
    before. Now only ``--record`` does, and the last line says where the results went."""
    op = _copy(restored_op, tmp_path, "merge_state") / "merge_state"
    before = (op / "validation.json").read_bytes()
    assert main(["validate-contract", str(op), "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (op / "validation.json").read_bytes() == before
    assert out[-1].startswith("results: this output; validation.json left unchanged")
    n = len(read_validations(op).validations)  # type: ignore[union-attr]

    assert main(["validate-contract", str(op), "--device", "cpu", "--record"]) == 0
    out = capsys.readouterr().out.splitlines()
    records = read_validations(op).validations  # type: ignore[union-attr]
    assert len(records) == n + 1 and records[-1].device_kind == "cpu" and records[-1].passed
    assert out[-1].startswith("results: appended to validation.json")


def test_record_and_no_record_together_are_refused(capsys):
    assert main(["validate-contract", "merge_state", "--record", "--no-record"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not allowed with argument --record" in err


_PROBE = r'''
import torch, triton, triton.language as tl
from triton.language.extra import libdevice

@triton.jit
def neg_mul(x_ptr, y_ptr, z_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(x_ptr + o)
    tl.store(y_ptr + o, -x)
    tl.store(z_ptr + o, x * x)

@triton.jit
def dot(a_ptr, c_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    a = tl.load(a_ptr + o[:, None] * N + o[None, :])
    tl.store(c_ptr + o[:, None] * N + o[None, :], tl.dot(a, a))

@triton.jit
def tanh(x_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(x_ptr + o, libdevice.tanh(tl.load(x_ptr + o)) * 2.0)

for dt in (torch.bfloat16, torch.float16):
    x = torch.linspace(-2, 3, 16, dtype=dt)
    y, z = torch.empty_like(x), torch.empty_like(x)
    neg_mul[(1,)](x, y, z, N=16)
    a, c = torch.eye(16, dtype=dt) * 2, torch.empty(16, 16)
    dot[(1,)](a, c, N=16)
    print(str(dt), "neg", torch.equal(y, -x), "mul", torch.allclose(z, x * x), "dot", torch.equal(c, 4 * torch.eye(16)))
try:
    tanh[(1,)](torch.zeros(16), N=16)
    print("libdevice ok")
except Exception as e:
    print("libdevice", type(e.__cause__ or e).__name__)
'''


def test_the_interpreter_still_has_each_limit_the_table_names(tmp_path):
    """The skip table is true of the installed Triton: bfloat16 negation, products and tl.dot are wrong under
    the interpreter while float16's are right, and libdevice does not run. Once Triton fixes one, this fails:
    drop the entries that name it from INTERPRETER_LIMITS (and the validation column of docs/contracts.md)."""
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    run = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=600,
                         env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == ["torch.bfloat16 neg False mul False dot False",
                                       "torch.float16 neg True mul True dot True", "libdevice TypeError"]


def test_contracts_page_validation_column_says_what_the_cpu_run_says():
    """docs/contracts.md's op-contract table must not say 'CPU pass' where the tool skips (all or bfloat16 of) an op."""
    rows = {}
    for line in (REPO / "docs" / "contracts.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"[a-z0-9_]+", cells[0]) and (REPO / "extracted" / cells[0]).is_dir():
            rows[cells[1]] = cells[4]
    assert len(rows) >= 40
    for op_id, (dtypes, _) in INTERPRETER_LIMITS.items():
        column = rows[op_id]
        if dtypes is None:
            assert "CPU skipped" in column and "CPU pass" not in column, (op_id, column)
        else:
            assert "CPU pass" in column and "bf16 skipped" in column, (op_id, column)
    for folder in sorted((REPO / "extracted").iterdir()):
        if (folder / "manifest.json").is_file():
            m = load_manifest(folder)
            if m.source_kind == "cuda_jit":
                assert "CPU" not in rows[m.op_id], (m.op_id, rows[m.op_id])
