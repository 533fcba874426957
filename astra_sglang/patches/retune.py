"""A retune patch's kernel: SGLang's own source of the op with its launch configs chosen per call.

The sweep baseline (``astra-sglang tune``) often finds that SGLang's kernel under another launch config gains most
of what a rewrite gains (decode attention on the H100: 1.514x against the loop's 1.534x, 2026-12-06). A retune
patch ships only the numbers (``retune.json``); the kernel text is made here, each time the patch loads, from the
op folder completed with the installed SGLang's files (pinned by SHA-256 through the op manifest), so the registry
never holds SGLang code, and a changed SGLang launch refuses to load instead of running a stale table.
"""

from __future__ import annotations

from pathlib import Path

from astra_sglang.contract.base import sha256_text, write_atomic
from astra_sglang.contract.op import Manifest
from astra_sglang.contract.patch import PatchManifest, PatchManifestError, RetuneRecipe
from astra_sglang.data_paths import user_cache
from astra_sglang.errors import AstraError

RECIPE_NAME = "retune.json"


def load_recipe(path: Path) -> RetuneRecipe:
    try:
        return RetuneRecipe.model_validate_json(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise PatchManifestError(f"{path}: not a retune recipe ({type(e).__name__}: {str(e).splitlines()[0][:200]})") \
            from None


def retuned_text(op_dir: Path, op: Manifest, recipe: RetuneRecipe) -> str:
    """SGLang's source of the op (from ``op_dir``, completed with the installed SGLang's files) under ``recipe``."""
    from astra_sglang.contract.op import TritonRecipe
    from astra_sglang.harness.parent.launch_params import RetuneTable, retuned_source
    from astra_sglang.harness.parent.tune_baseline import original_params

    if not isinstance(op.recipe, TritonRecipe):
        raise AstraError(f"{op.short_name} is a {op.recipe.kind} op: a retune patch needs a Triton original")
    params = original_params(op_dir, op)
    if {p.name for p in params} != set(recipe.parameters):
        raise AstraError(f"retune of {op.short_name}: SGLang's source exposes {sorted(p.name for p in params)}, the "
                         f"recipe sets {sorted(recipe.parameters)}; its launch changed since the sweep")
    table: RetuneTable = [(r.dims, {k: v for k, v in r.config.items()}) for r in recipe.rows]
    return retuned_source((op_dir / op.recipe.source).read_text(), params, table, op)


def kernel_file(patch_dir: Path, m: PatchManifest, op_dir: Path, op: Manifest) -> Path:
    """The source file the patch runs: its kernel as shipped, or a retune's text made from SGLang's (kept in the
    user cache under its own hash, so every process of a server loads the same file)."""
    path = Path(patch_dir) / m.source.file
    if not m.source.retune:
        return path
    text = retuned_text(op_dir, op, load_recipe(path))
    out = user_cache() / "retuned" / f"{m.patch_id}-{sha256_text(text)[:16]}.py"
    if not out.is_file() or out.read_text() != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, text)
    return out
