"""Moving a pin from one op-manifest digest to another, only where it is proven that the contract did not change.

Validation records (``extracted/<op>/validation.json``) and patches (``patches/<op>/<id>/manifest.json``) pin the
``manifest_digest`` of the op manifest they were verified against, on a GPU. A manifest that changes breaks the pin,
as it must: the verdict was about the old contract. A rename of the op id alone (issue 24: one ``family.name`` form)
changes the digest but not one thing the verdict depends on, and re-running every record on a GPU to say so again
would be the only alternative. So a pin may move from digest X to digest Y only when

- the two manifests, compared field by field (``manifest_digest``'s view: defaults left out), differ in nothing but
  ``op_id``, and
- the new op id is the old one in the one form (``canonical_op_id``): a rename by the rule, not any rename.

Anything else (a tolerance, a shape, a file's SHA-256) is refused: that needs the GPU again. Every re-pin is written
into the record it moves, as a ``RePin`` (from, to, both op ids, why, when), and ``check_repin`` proves it again from
the current manifest alone: put the old op id back and its digest is the pinned one (tests/test_op_id_form.py does
that for every committed re-pin). The records are edited as JSON, so their other bytes stay as the GPU wrote them.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from astra_sglang.contract.base import Model, write_atomic
from astra_sglang.contract.op import Manifest, canonical_op_id, manifest_digest
from astra_sglang.errors import AstraError

# What a re-pin may find different between the two manifests.
REPIN_FIELDS = ("op_id",)


class RePin(Model):
    """One pin moved: the record was verified against ``from_sha256`` and now pins ``to_sha256``."""

    from_sha256: str
    to_sha256: str
    op_id_from: str
    op_id_to: str
    why: str
    date: str = ""


class RePinRefused(AstraError, ValueError):
    """The two manifests are not proven to state the same contract: one line saying what differs."""


def _said(m: Manifest) -> dict[str, Any]:
    """What ``manifest_digest`` hashes (fields at their default left out), as a dict."""
    body = m.model_dump(mode="json", exclude_defaults=True)
    body["schema_version"] = m.schema_version
    return body


def differences(old: Manifest, new: Manifest) -> list[str]:
    """The top-level fields whose value differs between the two manifests, as the digest sees them."""
    a, b = _said(old), _said(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def prove_rename(old: Manifest, new: Manifest, why: str) -> RePin:
    """The re-pin from ``old`` to ``new``; RePinRefused unless they differ only in an op id renamed by the rule."""
    name = new.short_name
    other = [k for k in differences(old, new) if k not in REPIN_FIELDS]
    if other:
        raise RePinRefused(f"{name}: the manifests differ in {', '.join(other)}, not only in the op id: the records "
                           "pinned to the old one say nothing about this contract; re-validate on a GPU host")
    if old.op_id == new.op_id:
        raise RePinRefused(f"{name}: the manifests say the same thing (digest {manifest_digest(new)[:12]}): "
                           "nothing to re-pin")
    if canonical_op_id(old.op_id) != new.op_id:
        raise RePinRefused(f"{name}: op id {new.op_id} is not the one-form spelling of the old op id (that is "
                           f"{canonical_op_id(old.op_id)}): only that rename is re-pinned without a GPU")
    r = RePin(from_sha256=manifest_digest(old), to_sha256=manifest_digest(new), op_id_from=old.op_id,
              op_id_to=new.op_id, why=why, date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    problem = check_repin(new, r)
    if problem:  # cannot happen after the comparison above; a digest that disagreed would be a bug in it
        raise RePinRefused(f"{name}: {problem}")
    return r


def check_repin(current: Manifest, r: RePin) -> str | None:
    """Why ``r`` is not proven by ``current`` (the manifest it re-pinned to), or None when it is: ``current`` has the
    digest the record now pins, its op id is the old one by the rule, and with the old op id put back its digest is
    the one the record pinned before (so the two differed in the op id and nothing else)."""
    if manifest_digest(current) != r.to_sha256:
        return f"the manifest's digest is {manifest_digest(current)[:12]}, the re-pin's target {r.to_sha256[:12]}"
    if current.op_id != r.op_id_to or canonical_op_id(r.op_id_from) != r.op_id_to:
        return f"op id {r.op_id_to} is not the one-form spelling of the old op id"
    before = manifest_digest(current.model_copy(update={"op_id": r.op_id_from}))
    if before != r.from_sha256:
        return (f"with the old op id put back the digest is {before[:12]}, not the pinned {r.from_sha256[:12]}: "
                "the manifests differed in more than the op id")
    return None


def _edit_json(path: Path, edit: Any, model: type[Model]) -> bool:
    """Apply ``edit(raw) -> changed`` to the JSON at ``path``, check the result still reads as ``model``, write it."""
    raw = json.loads(path.read_text())
    if not edit(raw):
        return False
    model.model_validate(raw)
    write_atomic(path, json.dumps(raw, indent=2, ensure_ascii=False) + "\n")
    return True


def repin_validations(op_dir: Path, r: RePin) -> int:
    """Move every record of ``op_dir/validation.json`` pinned to ``r.from_sha256`` onto ``r.to_sha256`` (the record's
    op id renamed with it), each noting ``r``; how many moved (0 when there is no such record)."""
    from astra_sglang.contract.validation import VALIDATION_NAME, ValidationFile

    path = Path(op_dir) / VALIDATION_NAME
    moved = 0

    def edit(raw: dict[str, Any]) -> bool:
        nonlocal moved
        for v in raw.get("validations", []):
            if v.get("manifest_sha256") == r.from_sha256:
                v["manifest_sha256"] = r.to_sha256
                v.setdefault("repinned", []).append(r.model_dump(mode="json"))
                moved += 1
        renamed = raw.get("op_id") == r.op_id_from
        if renamed:
            raw["op_id"] = r.op_id_to
        return bool(moved) or renamed

    if path.is_file():
        _edit_json(path, edit, ValidationFile)
    return moved


def repin_patch(patch_dir: Path, r: RePin) -> bool:
    """Move the patch at ``patch_dir`` from ``r.from_sha256`` onto ``r.to_sha256``, noting ``r`` in its manifest; the
    op id its evidence's results name is renamed with it. False when the patch does not pin ``r.from_sha256``."""
    from astra_sglang.contract.patch import MANIFEST_NAME, PatchManifest

    def edit(raw: dict[str, Any]) -> bool:
        if raw.get("op_manifest_sha256") != r.from_sha256:
            return False
        raw["op_manifest_sha256"] = r.to_sha256
        for result in raw.get("evidence", {}).get("results", []):
            if result.get("op_id") == r.op_id_from:
                result["op_id"] = r.op_id_to
        raw.setdefault("repinned", []).append(r.model_dump(mode="json"))
        return True

    return _edit_json(Path(patch_dir) / MANIFEST_NAME, edit, PatchManifest)
