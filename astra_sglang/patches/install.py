"""Choose the patches this process should use and hand their guarded stand-ins to an installer.

The installer is a parameter so the selection, checks and stand-ins are tested without SGLang's HookRegistry
(the plugin passes its registration; tests pass a recorder).
Every refusal here is fail-closed: the patch is skipped with one warning and the original stays.
"""

from __future__ import annotations

import os
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from astra_sglang.patches import status
from astra_sglang.patches.env import ENV_PLACEBO, placebo_requested
from astra_sglang.patches.registry import (
    ENV_ROOT,
    discover,
    installed_sglang_version,
    patches_root,
    selected,
    static_problem,
)

#: install(target, original, hook): make ``target`` resolve to ``hook``
Installer = Callable[[str, Any, Callable[..., Any]], None]

_runtimes: dict[str, Any] = {}


def resolve_target(target: str) -> Any:
    return pkgutil.resolve_name(target)


def install_selected(installer: Installer, *, root: Path | None = None, value: str | None = None,
                     sglang_version: str | None = None,
                     conflict: Callable[[str], str | None] | None = None) -> dict[str, Any]:
    """Install every selected, applicable patch; returns {patch_id: PatchRuntime} of those installed.

    ``conflict(target)`` names another plugin's hook already on a call site: a patch with any such target is
    refused whole (one line), so a half-installed patch never exists and nobody else's hook is overridden."""
    from astra_sglang.patches.runtime import PatchRuntime

    folder = Path(root) if root is not None else patches_root()
    if not folder.is_dir():
        named = f"{ENV_ROOT}={os.environ[ENV_ROOT]}" if root is None and os.environ.get(ENV_ROOT) else str(folder)
        status.logger.warning("astra-sglang: patch folder %s does not exist; no patches installed, SGLang's "
                              "originals serve", named)
        return {}
    entries = discover(folder)
    chosen, unknown = selected(entries, value)
    for pid in unknown:
        status.fail(pid, f"requested in ASTRA_SGLANG_PATCHES but no such patch under {folder}")
    version = sglang_version or installed_sglang_version()
    chosen = stack_order(chosen)
    claimed: dict[str, list[tuple[str, str, bool]]] = {}  # target -> [(patch id, op, retune)], innermost first
    hooks: dict[str, Callable[..., Any]] = {}  # target -> its outermost stand-in so far
    originals: dict[str, Any] = {}  # target -> SGLang's function
    installed: dict[str, Any] = {}
    for e in chosen:
        problem = static_problem(e, version)
        if problem:
            status.fail(e.patch_id, problem, e.op)
            continue
        m = e.manifest
        assert m is not None
        clash = [pid for t in m.targets for pid, op, _ in claimed.get(t, [])
                 if (op == m.op and not stacks_on(claimed[t], m.op, is_retune(e))) or
                 (op != m.op and not shares_target(op, m.op))]
        if clash:
            status.fail(m.patch_id, f"call site already patched by {clash[-1]} (enable one patch per op, or a "
                        "rewrite with SGLang's kernel retuned behind it)", m.op)
            continue
        others = [(t, who) for t in m.targets if conflict is not None and (who := conflict(t))]
        if others:
            status.fail(m.patch_id, f"call site {others[0][0]} already has {others[0][1]}: left to it (astra-sglang "
                        "never overrides another plugin's hook)", m.op)
            continue
        try:
            rt = PatchRuntime(e.path, m)
            found = {t: originals[t] if t in originals else resolve_target(t) for t in m.targets}
        except Exception as ex:
            status.fail(m.patch_id, f"cannot prepare ({type(ex).__name__}: {ex})", m.op)
            continue
        for target, original in found.items():
            originals[target] = original
            below = claimed.get(target, [])
            stacked = bool(below) and below[-1][1] == m.op
            hooks[target] = rt.hook_for(original, target, passthrough=hooks.get(target),
                                        behind=below[-1][0] if stacked else "")
            claimed.setdefault(target, []).append((m.patch_id, m.op, is_retune(e)))
        installed[m.patch_id] = rt
        _runtimes[m.patch_id] = rt
    # one registration per call site, of its outermost stand-in, once every patch is chosen: a second REPLACE of
    # the same target would override the first (SGLang keeps the last), and the conflict check above must not see
    # our own hooks as another plugin's
    for target, hook in hooks.items():
        installer(target, originals[target], hook)
    return installed


def is_retune(e: Any) -> bool:
    """A retune patch: SGLang's own kernel under swept launch configs (``patches add-retune``)."""
    return e.manifest is not None and bool(e.manifest.source.retune)


def stack_order(entries: list[Any]) -> list[Any]:
    """The install order, innermost first: each op's patches together (a chain of ops on one call site keeps the
    order they were chosen in), its retune before its rewrite, so the rewrite's stand-in sits right in front of
    the retune's and hands it every call of its form it does not serve."""
    first: dict[str, int] = {}
    keyed = []
    for i, e in enumerate(entries):
        op = e.manifest.op if e.manifest is not None else f"#{i}"  # an unreadable one: refused later, alone
        first.setdefault(op, i)
        keyed.append(((first[op], not is_retune(e), i), e))
    return [e for _, e in sorted(keyed, key=lambda k: k[0])]


def stacks_on(below: list[tuple[str, str, bool]], op: str, retune: bool) -> bool:
    """Whether a patch of ``op`` may stand in front of the patches of ``op`` already on a call site: one rewrite in
    front of one retune (SGLang's own kernel with swept configs), never two of a kind. The rewrite serves its
    guard, the retune what the rewrite leaves (decode attention: the rewrite is slower at B 17..127, where the
    retune's configs win), SGLang's original the rest; each is checked against that original at its first call.
    Two rewrites would overlap where neither was measured against the other."""
    mine = [r for _, o, r in below if o == op]
    return not retune and mine == [True]


def shares_target(op_a: str, op_b: str) -> bool:
    """Whether patches of these two ops may stand on one call site: different ops whose adapters each take only
    their own call form of it (``OpAdapter.call_form_of``), so every call reaches at most one of them."""
    from astra_sglang.patches.adapters import ADAPTERS, get_adapter

    if op_a == op_b or op_a not in ADAPTERS or op_b not in ADAPTERS:
        return False
    a, b = get_adapter(op_a).call_form_of, get_adapter(op_b).call_form_of
    return a is not None and a == b


def startup_line(installed: dict[str, Any]) -> str:
    """The one line per process that says what this process patched and what it refused, and why."""
    refused = sorted((s.patch_id, s.reason) for s in status.statuses().values()
                     if s.state == "failed" and s.patch_id not in installed)
    parts = [f"installed (checked at first call): {', '.join(sorted(installed)) or 'none'}"]
    if installed and placebo_requested():
        parts.append(f"placebo ({ENV_PLACEBO}): hooks installed, SGLang's originals serve every call")
    if refused:
        parts.append("refused: " + "; ".join(f"{pid} ({why})" for pid, why in refused))
    return "astra-sglang: patches " + "; ".join(parts)


def activate(patch_id: str | None = None, device: Any = None) -> dict[str, bool]:
    """Build and check installed patches now instead of at their first call; {patch_id: active}."""
    out = {}
    for pid, rt in list(_runtimes.items()):
        if patch_id is None or pid == patch_id:
            out[pid] = rt.activate(device)
    return out
