"""Issue 24: one op-id form, ``family.name``, everywhere; the pins that the rename moved were moved only with a proof.

Eight ops SGLang does not register had their ``module:attr`` as op id. Their contracts were re-extracted under the id
``op_id_of`` gives them, and their GPU-verified validation records and the fused_add_rmsnorm patch were re-pinned
by ``astra-sglang repin``, which refuses unless the old and new manifests differ in nothing but the op id.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from astra_sglang.cli.main import main
from astra_sglang.contract.op import (
    Manifest,
    call_form_op_id,
    canonical_op_id,
    find_op_dir,
    load_manifest,
    manifest_digest,
    manifest_text,
    op_id_of,
)
from astra_sglang.contract.patch import load_patch_manifest
from astra_sglang.contract.repin import RePinRefused, check_repin, prove_rename
from astra_sglang.contract.validation import current_validation, read_validations
from astra_sglang.errors import AstraError
from astra_sglang.extract import catalog

REPO = Path(__file__).resolve().parents[1]
EXTRACTED = REPO / "extracted"
DATA = REPO / "astra_sglang" / "_data"
FUSED_PATCH = REPO / "patches" / "fused_add_rmsnorm" / "fused-add-rmsnorm-mr-k4"

# short name -> (the op id before issue 24, the op id now)
RENAMED = {
    "gelu_and_mul": ("sglang.kernels.ops.activation.activation:gelu_and_mul", "activation.gelu_and_mul"),
    "gelu_tanh_and_mul": ("sglang.kernels.ops.activation.activation:gelu_tanh_and_mul",
                          "activation.gelu_tanh_and_mul"),
    "relu2": ("sglang.kernels.ops.activation.activation:relu2", "activation.relu2"),
    "silu_and_mul_with_activation_rounding": (
        "sglang.kernels.ops.activation.activation:silu_and_mul_with_activation_rounding",
        "activation.silu_and_mul_with_activation_rounding"),
    "fused_rope": ("sglang.kernels.ops.attention.rope:apply_rope_inplace", "attention.apply_rope_inplace"),
    "fused_add_rmsnorm": ("sglang.kernels.ops.layernorm.norm:fused_add_rmsnorm", "layernorm.fused_add_rmsnorm"),
    "fused_inplace_qknorm": ("sglang.kernels.ops.layernorm.norm:fused_inplace_qknorm",
                             "layernorm.fused_inplace_qknorm"),
    "rmsnorm": ("sglang.kernels.ops.layernorm.norm:rmsnorm", "layernorm.rmsnorm"),
}


def _op_ids(data: Any) -> list[str]:
    """Every value of a key named op_id, at any depth (a patch's evidence results carry one each)."""
    if isinstance(data, dict):
        return [v for k, v in data.items() if k == "op_id" and isinstance(v, str)] + [
            x for v in data.values() for x in _op_ids(v)]
    if isinstance(data, list):
        return [x for v in data for x in _op_ids(v)]
    return []


# ------------------------------------------------------------------------------------------------ the rule


def test_the_rule_is_sglangs_group_dot_name():
    for old, new in RENAMED.values():
        assert op_id_of(old) == new == canonical_op_id(old)
        assert canonical_op_id(new) == new
    assert canonical_op_id("attention.merge_state_triton") == "attention.merge_state_triton"
    for not_an_ops_function in ("sglang.srt.layers.layernorm:RMSNorm", "sglang.kernels.ops.layernorm:Norm.forward",
                                "layernorm.rmsnorm", "sglang.kernels.ops:rmsnorm"):
        with pytest.raises(AstraError):
            op_id_of(not_an_ops_function)
        assert canonical_op_id(not_an_ops_function) == not_an_ops_function


def test_every_catalog_id_is_one_form_and_an_unregistered_one_follows_the_rule():
    pytest.importorskip("sglang")
    import sglang.kernels.ops  # noqa: F401  (registers every op)
    from sglang.kernels.registry import registry

    registered = set(registry.ops())
    for e in catalog.entries():
        assert ":" not in e.op_id and not e.op_id.startswith("sglang."), e.short_name
        if e.op_id not in registered:  # SGLang has no id for it: the one rule gives it, not a hand-picked name
            forms = [o for o in catalog.entries() if o.entry_point == e.entry_point and o is not e]
            want = call_form_op_id(e.entry_point, e.short_name) if forms else op_id_of(e.entry_point)
            assert e.op_id == want, e.short_name
    assert {e.short_name for e in catalog.entries() if e.op_id not in registered} == set(RENAMED) | {"fused_moe_down"}


def test_a_catalog_entry_in_the_old_form_is_refused():
    entry = catalog.find("rmsnorm")
    assert entry is not None
    with pytest.raises(ValueError, match="layernorm.rmsnorm"):
        type(entry)(**{**entry.__dict__, "op_id": entry.entry_point})


# ------------------------------------------------------------------------- (4) nothing holds the old form


def test_no_manifest_or_record_holds_an_op_id_in_the_old_form():
    files = [p for root in (EXTRACTED, DATA / "extracted", DATA / "patches") for p in root.rglob("*.json")]
    names = {p.relative_to(REPO).parts[:2] for p in files}
    assert {("extracted", "rmsnorm"), ("astra_sglang", "_data")} <= names and len(files) > 2 * 45
    for path in files:
        bad = [i for i in _op_ids(json.loads(path.read_text())) if i.startswith("sglang.kernels.ops.")]
        assert not bad, f"{path}: {bad}"
    for short, (_, new) in RENAMED.items():
        m = load_manifest(EXTRACTED / short)
        assert m.op_id == new and canonical_op_id(m.entry_point) == new  # SGLang's name kept, as entry_point
        vf = read_validations(EXTRACTED / short)
        assert vf is not None and vf.op_id == new


# --------------------------------------------------------------------------- every committed re-pin holds


def test_every_committed_re_pin_is_proven_by_the_current_manifest():
    seen = 0
    for short in RENAMED:
        m = load_manifest(EXTRACTED / short)
        vf = read_validations(EXTRACTED / short)
        assert vf is not None
        for v in vf.validations:
            assert v.manifest_sha256 == manifest_digest(m), short
            assert [check_repin(m, r) for r in v.repinned] == [None], short
            seen += 1
    patch = load_patch_manifest(FUSED_PATCH)
    op = load_manifest(EXTRACTED / "fused_add_rmsnorm")
    assert patch.op_manifest_sha256 == manifest_digest(op)
    assert [check_repin(op, r) for r in patch.repinned] == [None]
    assert {r.op_id for r in patch.evidence.results} == {"layernorm.fused_add_rmsnorm"}
    assert seen == 10
    # the records that passed on the H200 still count for the renamed contracts (gelu_tanh_and_mul: a finding)
    assert [s for s in RENAMED if current_validation(EXTRACTED / s) is None] == ["gelu_tanh_and_mul"]


# ------------------------------------------------------------------------- (1) the re-pin refuses the rest


def _current() -> Manifest:
    return load_manifest(EXTRACTED / "fused_add_rmsnorm")


def _old(**update: Any) -> Manifest:
    m = _current()
    return m.model_copy(update={"op_id": RENAMED["fused_add_rmsnorm"][0], **update})


def test_re_pin_is_proven_for_the_rename_alone():
    r = prove_rename(_old(), _current(), "why")
    assert (r.from_sha256, r.to_sha256) == (manifest_digest(_old()), manifest_digest(_current()))
    assert (r.op_id_from, r.op_id_to) == RENAMED["fused_add_rmsnorm"]
    assert check_repin(_current(), r) is None


def _changed(what: str) -> Manifest:
    m = _current()
    if what == "tolerances":
        tol = dict(m.tolerances)
        tol["bfloat16"] = tol["bfloat16"].model_copy(update={"rtol": 0.032})
        return _old(tolerances=tol)
    if what == "shapes":
        return _old(shapes=m.shapes[1:])
    if what == "files":
        files = [f.model_copy(update={"sha256": "0" * 64}) if i == 0 else f for i, f in enumerate(m.files)]
        return _old(files=files)
    if what == "entry_point":
        return _old(entry_point="sglang.kernels.ops.layernorm.norm:rmsnorm")
    if what == "notes":
        return _old(notes=[*m.notes, "one more"])
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["tolerances", "shapes", "files", "entry_point", "notes"])
def test_re_pin_refuses_when_anything_else_differs(what: str):
    with pytest.raises(RePinRefused, match=f"differ in {what}"):
        prove_rename(_changed(what), _current(), "why")


def test_re_pin_refuses_a_rename_the_rule_does_not_give_and_no_rename():
    with pytest.raises(RePinRefused, match="not the one-form spelling"):
        prove_rename(_old(op_id="layernorm.norm_fused_add_rmsnorm"), _current(), "why")
    with pytest.raises(RePinRefused, match="nothing to re-pin"):
        prove_rename(_current(), _current(), "why")
    r = prove_rename(_old(), _current(), "why")
    forged = r.model_copy(update={"from_sha256": manifest_digest(_changed("tolerances"))})
    assert "differed in more than the op id" in (check_repin(_current(), forged) or "")


def _folder_before_the_rename(tmp_path: Path) -> tuple[Path, Path, Path]:
    """extracted/fused_add_rmsnorm and its patch as they were before issue 24 (pins on the old digest), the current
    manifest beside it: what `repin` found."""
    extracted, patches = tmp_path / "extracted", tmp_path / "patches"
    folder = extracted / "fused_add_rmsnorm"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(manifest_text(_current()))
    old = tmp_path / "old.json"
    old.write_text(manifest_text(_old()))
    old_sha, new_sha = manifest_digest(_old()), manifest_digest(_current())
    raw = json.loads((EXTRACTED / "fused_add_rmsnorm" / "validation.json").read_text())
    raw["op_id"] = RENAMED["fused_add_rmsnorm"][0]
    for v in raw["validations"]:
        assert v.pop("repinned") and v["manifest_sha256"] == new_sha
        v["manifest_sha256"] = old_sha
    (folder / "validation.json").write_text(json.dumps(raw, indent=2) + "\n")
    shutil.copytree(FUSED_PATCH, patches / "fused_add_rmsnorm" / FUSED_PATCH.name)
    praw = json.loads((FUSED_PATCH / "manifest.json").read_text())
    praw.pop("repinned")
    praw["op_manifest_sha256"] = old_sha
    for res in praw["evidence"]["results"]:
        res["op_id"] = RENAMED["fused_add_rmsnorm"][0]
    (patches / "fused_add_rmsnorm" / FUSED_PATCH.name / "manifest.json").write_text(json.dumps(praw, indent=2) + "\n")
    return extracted, patches, old


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _undated(path: Path) -> Any:
    raw = json.loads(path.read_text())
    for r in [r for v in raw.get("validations", [raw]) for r in v.get("repinned", [])]:
        r.pop("date")
    return raw


def test_repin_command_moves_every_pin_and_records_why(tmp_path, capsys):
    extracted, patches, old = _folder_before_the_rename(tmp_path)
    assert current_validation(extracted / "fused_add_rmsnorm") is None  # the rename broke the pins
    args = ["repin", RENAMED["fused_add_rmsnorm"][0], "--old", str(old), "--extracted", str(extracted),
            "--patches", str(patches)]  # the op named by its old id, which still resolves
    before = _snapshot(tmp_path)
    assert main([*args, "--dry-run"]) == 0
    assert "would re-pin 2 validation record(s) and 1 patch(es): fused-add-rmsnorm-mr-k4" in capsys.readouterr().out
    assert _snapshot(tmp_path) == before
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "re-pinned 2 validation record(s) and 1 patch(es)" in out and "sglang.kernels.ops" not in out
    m = load_manifest(extracted / "fused_add_rmsnorm")
    assert current_validation(extracted / "fused_add_rmsnorm") is not None
    patch = load_patch_manifest(patches / "fused_add_rmsnorm" / FUSED_PATCH.name)
    assert patch.op_manifest_sha256 == manifest_digest(m) and [check_repin(m, r) for r in patch.repinned] == [None]
    # what the command wrote is what is committed, but for when the re-pin was made
    for written, committed in ((extracted / "fused_add_rmsnorm" / "validation.json",
                                EXTRACTED / "fused_add_rmsnorm" / "validation.json"),
                               (patches / "fused_add_rmsnorm" / FUSED_PATCH.name / "manifest.json",
                                FUSED_PATCH / "manifest.json")):
        assert _undated(written) == _undated(committed), written
    after = _snapshot(tmp_path)
    assert main(args) == 0  # again: nothing is pinned to the old digest any more, nothing moves
    assert "re-pinned 0 validation record(s) and 0 patch(es)" in capsys.readouterr().out
    assert _snapshot(tmp_path) == after


def test_repin_command_refuses_in_one_line_and_writes_nothing(tmp_path, capsys):
    extracted, patches, old = _folder_before_the_rename(tmp_path)
    old.write_text(manifest_text(_changed("tolerances")))
    before = _snapshot(tmp_path)
    code = main(["repin", "fused_add_rmsnorm", "--old", str(old), "--extracted", str(extracted), "--patches",
                 str(patches)])
    err = capsys.readouterr().err
    assert code == 2 and "differ in tolerances" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _snapshot(tmp_path) == before


# ------------------------------------------------------------------- (2) the renamed op's patch still loads


def test_renamed_ops_patch_passes_its_load_checks(monkeypatch):
    """What a server does before the fused_add_rmsnorm patch serves a call, short of the GPU: the pin, the op
    manifest, its targets (static_problem), then the first-call gate on every covered check shape, with the
    renamed contract's reference and tolerances (the kernel and SGLang's original stood in by torch code)."""
    import torch

    from astra_sglang.patches import registry, status
    from astra_sglang.patches.adapters import make_guard
    from astra_sglang.patches.runtime import PatchRuntime, check_against_original

    monkeypatch.setenv("ASTRA_SGLANG_EXTRACTED_DIR", str(EXTRACTED))
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(REPO / "patches"))
    e = registry.find(FUSED_PATCH.name)
    assert e.manifest is not None
    assert registry.static_problem(e, "0.5.23") is None
    assert registry.load_op(e.manifest).op_id == "layernorm.fused_add_rmsnorm"

    def fused(a: dict[str, Any], scale: float = 1.0) -> None:
        x, r, w = a["input"], a["residual"], a["weight"]
        s = x.float() + r.float()
        r.copy_(s)
        x.copy_(s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + a["eps"]) * w.float() * scale)

    def original(x: Any, r: Any, w: Any, eps: float = 1e-6, enable_pdl: Any = None) -> None:
        fused({"input": x, "residual": r, "weight": w, "eps": eps})

    status.reset(e.patch_id)
    rt = PatchRuntime(e.path, e.manifest)
    assert rt.op.op_id == "layernorm.fused_add_rmsnorm"
    rt.guard = make_guard(e.manifest.guard, "cpu")  # the patch's own guard, on CPU tensors (it serves CUDA ones)
    rt.kernel = fused
    assert check_against_original(rt, original, "cpu") is None
    rt.kernel = lambda a: fused(a, scale=1.1)
    assert "at {'T': 1, 'H': 4096} bfloat16" in (check_against_original(rt, original, "cpu") or "")


def test_the_patch_refuses_the_manifest_from_before_the_rename(tmp_path, monkeypatch):
    """The pin moved, it was not loosened: the pre-rename manifest no longer matches the patch."""
    from astra_sglang.patches import registry

    folder = tmp_path / "fused_add_rmsnorm"
    folder.mkdir()
    (folder / "manifest.json").write_text(manifest_text(_old()))
    monkeypatch.setenv("ASTRA_SGLANG_EXTRACTED_DIR", str(tmp_path))
    m = load_patch_manifest(FUSED_PATCH)
    with pytest.raises(AstraError, match="changed since the patch was validated"):
        registry.load_op(m)


# ----------------------------------------------------------- (3) the old id on the command line, same op


@pytest.mark.parametrize("short", sorted(RENAMED))
def test_old_id_names_the_same_op(short: str):
    old, new = RENAMED[short]
    entry = catalog.find(short)
    assert entry is not None and catalog.find(old) is entry and catalog.find(new) is entry
    folder = (EXTRACTED / short).resolve()
    assert find_op_dir(old, EXTRACTED) == find_op_dir(new, EXTRACTED) == find_op_dir(short, EXTRACTED) == folder


def test_old_id_resolves_in_the_sglang_listing():
    pytest.importorskip("sglang")
    from astra_sglang.extract.discovery import list_ops, resolve

    infos = list_ops()
    assert not [i.op_id for i in infos if ":" in i.op_id or i.op_id.startswith("sglang.")]
    for short, (old, new) in RENAMED.items():
        info = resolve(old, infos)
        assert info is resolve(new, infos) is resolve(short, infos)
        assert info.op_id == new and info.entry_point == old and info.short_name == short and not info.registered


def test_extract_given_the_old_id_writes_the_op_under_its_one_form(tmp_path):
    pytest.importorskip("sglang")
    old, new = RENAMED["rmsnorm"]
    proc = subprocess.run([sys.executable, "-m", "astra_sglang", "extract", old, "--out",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "sglang.kernels.ops" not in proc.stdout
    written = tmp_path / "rmsnorm" / "manifest.json"
    assert json.loads(written.read_text())["op_id"] == new
    assert written.read_bytes() == (EXTRACTED / "rmsnorm" / "manifest.json").read_bytes()


def test_what_was_written_under_the_old_id_still_names_the_same_op(tmp_path):
    """A folder, draft log or validation file from before the rename is the same op, and takes the new spelling."""
    from astra_sglang.agents.draft_log import DraftLog
    from astra_sglang.contract.op import ShapeCase
    from astra_sglang.contract.validation import ValidationFile, record_validation
    from astra_sglang.extract.extractor import _kept_traced

    old, new = RENAMED["rmsnorm"]
    folder = tmp_path / "rmsnorm"
    folder.mkdir()
    m = load_manifest(EXTRACTED / "rmsnorm")
    traced = ShapeCase(dims={"T": 3, "H": 4096}, tags=["traced"], source="a trace")
    (folder / "manifest.json").write_text(manifest_text(m.model_copy(update={"op_id": old,
                                                                             "shapes": [*m.shapes, traced]})))
    assert _kept_traced(folder, new) == [traced]  # re-extracting keeps the workload's shapes
    log = DraftLog.create(tmp_path / "drafts", old, "some-model")
    assert DraftLog.open(log.path, new).status.op_id == new
    with pytest.raises(AstraError, match="is a draft of layernorm.rmsnorm, not of layernorm.fused_add_rmsnorm"):
        DraftLog.open(log.path, "layernorm.fused_add_rmsnorm")
    committed = read_validations(EXTRACTED / "rmsnorm")
    assert committed is not None
    (folder / "validation.json").write_text(ValidationFile(op_id=old).model_dump_json())
    record_validation(folder, new, committed.validations[0])
    assert read_validations(folder).op_id == new  # type: ignore[union-attr]
