"""Where the installed SGLang binds a kernel's entry point: every module attribute that *is* that object.

A later stage patches by rebinding exactly these attributes (SGLang's REPLACE hook does the same scan), so
stale ``from X import f`` copies are found too. Modules that cannot import on this host are skipped; the
catalog adds the CUDA-only bindings read from source.
"""

from __future__ import annotations

import sys
from typing import Any

from astra_sglang.contract.op import CallSite, hook_target
from astra_sglang.extract.sglang_env import import_optional


def bound_attributes(obj: Any, prefix: str = "sglang") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name, module in sorted(list(sys.modules.items())):
        if module is None or not (name == prefix or name.startswith(prefix + ".")):
            continue
        try:
            attrs = vars(module)
        except TypeError:
            continue
        for attr, value in list(attrs.items()):
            if value is obj:
                found.append((name, attr))
    return found


def scan_call_sites(
    obj: Any,
    entry_point: str,
    modules: tuple[str, ...],
    serving: dict[str, str],
    extra: list[CallSite],
) -> tuple[list[CallSite], list[str]]:
    """Call sites of ``obj`` (the entry point) after importing ``modules``, then the catalog's ``extra`` sites
    (CUDA-only bindings read from source, library kernels SGLang serves with); returns the sites and the
    modules that did not import.

    Every attribute bound to ``obj`` is reached by one REPLACE on the entry point's own path, so they all
    carry that target.
    """
    skipped = [m for m in modules if import_optional(m) is None]
    target = hook_target(entry_point)
    sites: dict[tuple[str, str], CallSite] = {}
    for module, attr in bound_attributes(obj):
        key = f"{module}:{attr}"
        sites[(module, attr)] = CallSite(
            module=module,
            attr=attr,
            binds="entry_point",
            target=target,
            same_function=True,
            reached_by_serving=key in serving,
            note=serving.get(key, "bound to the entry point (found by scanning sys.modules)"),
        )
    for site in extra:
        key2 = (site.module, site.attr)
        found = sites.get(key2)
        if found is None:
            sites[key2] = site
        elif site.reached_by_serving and not found.reached_by_serving:
            # the scan proves what the attribute binds; the catalog knows that serving reaches it, and how
            sites[key2] = found.model_copy(update={"reached_by_serving": True, "note": site.note})
        if found is not None and site.call is not None:  # how the site calls it is read from source: the catalog's
            sites[key2] = sites[key2].model_copy(update={"call": site.call})
    return list(sites.values()), skipped
