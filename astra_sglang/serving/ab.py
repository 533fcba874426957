"""One A/B validation: the same prompts through the unpatched and the patched server, then the same load.

Order matters for trust. Correctness first, one request at a time by default, so both servers see identical
batches (a batch's size changes which kernel shapes run, hence rounding); the unpatched server answers twice, and
its agreement with itself is the floor the patched one is read against. A patch guarded on the batch (decode
attention at batch 128) is reached only when requests are batched: ``check_batch`` sends that many at once in all
three passes, and the floor then also measures what batching alone changes. Then the load, alternated A B B A so
neither server always runs on a warmer GPU.

Each first divergence is probed (serving/ties.py): a flip between two tokens whose logprobs are within the
measured ulp-level noise of each other counts as a near tie, not as a wrong token, unless ``strict_tokens``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from astra_sglang.contract.base import Model, write_atomic
from astra_sglang.patches.status_file import INTERVAL_S
from astra_sglang.patches.tooling.status_report import aggregate, server_dirs
from astra_sglang.serving.client import LoadPass, complete_all, load_pass, model_id, quantile
from astra_sglang.serving.compare import Agreement, compare
from astra_sglang.serving.launch import Server, plugin_log_lines
from astra_sglang.serving.prompts import Prompt
from astra_sglang.serving.ties import Probe, TieReport, default_margin, probe_divergences


class Thresholds(Model):
    min_identical: float = Field(default=0.9, ge=0.0, le=1.0)
    max_logprob_diff: float = Field(default=0.5, ge=0.0)
    strict_tokens: bool = Field(default=False, description="count near-tie flips as divergences too")
    tie_margin: float | None = Field(default=None, ge=0.0, description="nats; default: twice the largest "
                                     "|logprob diff| measured on identical tokens, at most ties.MARGIN_CAP, and "
                                     "never below the widest flip of the unpatched server against itself")
    top_k: int = Field(default=5, ge=2, le=20, description="top logprobs asked for at a divergence")
    expect: list[str] = Field(default_factory=list, description="patch ids that must be active and serve calls")


class LoadOptions(Model):
    max_tokens: int = Field(default=32, ge=1)
    concurrency: int = Field(default=8, ge=1)
    check_batch: int = Field(default=1, ge=1, description="requests in flight in the three correctness passes: "
                             "a patch guarded on the batch (decode attention at batch 128) is reached only by a "
                             "batched decode; the floor, unpatched against itself batched the same way, shows what "
                             "batching alone changes")
    rounds: int = Field(default=4, ge=0, description="load passes per server, alternated A B B A ...")
    repeat: int = Field(default=16, ge=1, description="copies of the prompt set in one load pass")
    timeout_s: float = Field(default=600.0, gt=0)


class ServerSide(Model):
    name: str
    url: str
    patches: str
    command: list[str] = Field(default_factory=list)
    ready_s: float = 0.0
    load: list[LoadPass] = Field(default_factory=list)
    tokens_per_s: float = Field(default=0.0, description="median over its load passes")
    latency_p50_s: float = 0.0
    latency_p90_s: float = 0.0
    plugin_lines: list[str] = Field(default_factory=list)
    status: dict[str, Any] | None = Field(default=None, description="the plugin's per-process records, added up")


class ValidateReport(Model):
    created: str
    prompts: int
    options: LoadOptions
    thresholds: Thresholds
    agreement: Agreement = Field(description="patched against unpatched")
    floor: Agreement = Field(description="unpatched against itself (a second pass)")
    ties: TieReport | None = Field(default=None, description="each patched-vs-unpatched divergence, probed")
    floor_ties: TieReport | None = Field(default=None, description="each divergence of the floor, probed")
    servers: list[ServerSide]
    throughput_ratio: float = Field(description="patched tokens/s over unpatched tokens/s (medians)")
    throughput_ratio_range: tuple[float, float] = Field(
        default=(0.0, 0.0), description="slowest patched pass over fastest unpatched one, and the reverse: a "
                                        "range holding 1.0 means the difference is within pass-to-pass noise")
    failures: list[str] = Field(default_factory=list)
    load_measured: bool = Field(default=True, description="False in the report written after the correctness "
                                "passes: the load passes had not run yet (a run cut there keeps its token verdict)")

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def near_tie_flips(self) -> int:
        """Divergences that count as agreement: the probed near ties, none under ``strict_tokens``."""
        return 0 if self.thresholds.strict_tokens or self.ties is None else self.ties.near_ties


def _side(server: Server, patches: str, passes: list[LoadPass]) -> ServerSide:
    lat = [x for p in passes for x in p.latencies_s]
    return ServerSide(name=server.name, url=server.url, patches=patches, command=server.command,
                      ready_s=server.ready_s, load=passes,
                      tokens_per_s=statistics.median([p.tokens_per_s for p in passes]) if passes else 0.0,
                      latency_p50_s=quantile(lat, 0.5), latency_p90_s=quantile(lat, 0.9),
                      plugin_lines=plugin_log_lines(server))


def read_status(server: Server, settle: bool = True) -> dict[str, Any] | None:
    """The patched server's records: its own process group's folder when we launched it, else the newest.

    A running server writes its counts within a second of a change (patches/status_file.py), so a read right
    after the last request can see the plugin-load record alone: CI, 2026-12-06, failed "active but served no
    call" on a stand-in that had served every request, all within one second. So ``settle`` reads until the
    counts have stood still for ``SETTLE_S``; a stopped server's records are final and need no wait."""
    first = _read_status(server)
    if not settle or first is None:
        return first
    last, since = first, time.monotonic()
    deadline = since + SETTLE_MAX_S
    while time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_S)
        now = _read_status(server)
        if now is not None and _counts(now) != _counts(last):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLE_S:
            break
    return last


SETTLE_S = 3 * INTERVAL_S  # the flusher's sleep, its write, and a loaded host's scheduling lag
SETTLE_MAX_S = 15.0  # a server still serving other traffic never stands still
SETTLE_POLL_S = 0.25


def _counts(status: dict[str, Any]) -> list[Any]:
    return list(status["patches"])


def _read_status(server: Server) -> dict[str, Any] | None:
    if server.status_root is None or not server.status_root.is_dir():
        return None
    if server.pgid is not None:
        folder = server.status_root / f"pg-{server.pgid}"
        return aggregate(folder) if folder.is_dir() else None
    dirs = server_dirs(server.status_root)
    return aggregate(dirs[0]) if dirs else None


def judge(report: ValidateReport, status: dict[str, Any] | None) -> list[str]:
    t, a = report.thresholds, report.agreement
    out = []
    near = report.near_tie_flips
    agreeing = a.identical_prompts + near
    if agreeing < t.min_identical * a.prompts:
        probed = {p.index: p for p in (report.ties.probes if report.ties else [])}
        worst = [_divergence(r.index, r.first_divergence, probed.get(r.index)) for r in a.per_prompt
                 if r.first_divergence is not None and not (near and probed[r.index].near_tie)]
        tie_note = "" if t.strict_tokens or report.ties is None else f", {near} near-tie flip(s)"
        out.append(f"outputs diverge: {a.identical_prompts}/{a.prompts} prompts identical{tie_note} "
                   f"({agreeing / a.prompts:.2f} < {t.min_identical:.2f}; unpatched against itself "
                   f"{report.floor.identical_rate:.2f}); divergences: {', '.join(worst[:6])}")
    if a.max_abs_logprob_diff > t.max_logprob_diff:
        out.append(f"logprobs differ by up to {a.max_abs_logprob_diff:.3g} on identical tokens "
                   f"(> {t.max_logprob_diff:.3g})")
    rows = {r["patch_id"]: r for r in (status or {}).get("patches", [])}
    for row in rows.values():
        if row["fallbacks"]:
            out.append(f"patch {row['patch_id']} fell back to the original: {row['fallbacks'][0]}")
        failed = [c for c in row["first_call_checks"] if c.startswith("failed")]
        if failed:
            out.append(f"patch {row['patch_id']} failed its first-call check: {failed[0]}")
    for pid in t.expect:
        row = rows.get(pid)
        if row is None:
            out.append(f"patch {pid} expected, but no server process reported it")
        elif "active" not in row["states"].values():
            out.append(f"patch {pid} expected, but it is not active in any process ({row['reasons'][:1]})")
        elif row["served_by_patch"] == 0:
            out.append(f"patch {pid} is active but served no call (its guard does not cover this model's shapes?)")
    return out


def _divergence(index: int, position: int | None, probe: Probe | None) -> str:
    if probe is None or probe.gap_a is None or probe.gap_b is None:
        return f"#{index} at token {position}" + (f" ({probe.note})" if probe is not None and probe.note else "")
    return f"#{index} at token {position} (gaps {probe.gap_a:.3g} / {probe.gap_b:.3g} nats)"


def run(off: Server, on: Server, patches: str, prompts: list[Prompt], opts: LoadOptions,
        thresholds: Thresholds, progress: Any = None,
        checkpoint: Callable[[ValidateReport], None] | None = None) -> ValidateReport:
    """``checkpoint`` gets the report as soon as the tokens are judged, before the load passes (minutes on a
    batched check): a run cut during the load keeps its correctness verdict."""
    say = progress or (lambda msg: None)
    model_off = _model(off)
    model_on = _model(on)
    how = "one request at a time" if opts.check_batch == 1 else f"{opts.check_batch} requests in flight"
    say(f"correctness: unpatched, {how}")
    a1, _ = complete_all(off.url, model_off, prompts, opts.max_tokens, opts.check_batch, opts.timeout_s)
    say(f"correctness: patched, {how}")
    b, _ = complete_all(on.url, model_on, prompts, opts.max_tokens, opts.check_batch, opts.timeout_s)
    say("correctness: unpatched again (the floor)")
    a2, _ = complete_all(off.url, model_off, prompts, opts.max_tokens, opts.check_batch, opts.timeout_s)
    agreement, floor = compare(a1, b), compare(a1, a2)
    say(f"probing {len(agreement.per_prompt) - agreement.identical_prompts} divergence(s) for near ties")
    floor_ties = probe_divergences((off.url, off.url), prompts, a1, a2, floor, thresholds.top_k,
                                   _margin(thresholds, floor), opts.timeout_s)
    ties = probe_divergences((off.url, on.url), prompts, a1, b, agreement, thresholds.top_k,
                             _margin(thresholds, agreement, floor_ties), opts.timeout_s)
    if checkpoint is not None:
        early = _report(off, on, patches, prompts, opts, thresholds, (agreement, floor, ties, floor_ties),
                        {"off": [], "on": []})
        early.load_measured = False
        checkpoint(with_status(early, read_status(on)))
    load = prompts * opts.repeat
    passes: dict[str, list[LoadPass]] = {"off": [], "on": []}
    for r in range(opts.rounds):
        order = [(off, model_off, "off"), (on, model_on, "on")]
        for server, model, key in (order if r % 2 == 0 else order[::-1]):
            say(f"load round {r + 1}/{opts.rounds}: {server.name}, {len(load)} requests x {opts.concurrency}")
            passes[key].append(load_pass(server.name, server.url, model, load, opts.max_tokens, opts.concurrency,
                                         opts.timeout_s))
    report = _report(off, on, patches, prompts, opts, thresholds, (agreement, floor, ties, floor_ties), passes)
    return with_status(report, read_status(on))


def _report(off: Server, on: Server, patches: str, prompts: list[Prompt], opts: LoadOptions, thresholds: Thresholds,
            tokens: tuple[Agreement, Agreement, TieReport | None, TieReport | None],
            passes: dict[str, list[LoadPass]]) -> ValidateReport:
    agreement, floor, ties, floor_ties = tokens
    sides = [_side(off, "off", passes["off"]), _side(on, patches, passes["on"])]
    ratio = sides[1].tokens_per_s / sides[0].tokens_per_s if sides[0].tokens_per_s else 0.0
    return ValidateReport(created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), prompts=len(prompts), options=opts,
                          thresholds=thresholds, agreement=agreement, floor=floor, ties=ties,
                          floor_ties=floor_ties, servers=sides, throughput_ratio=ratio,
                          throughput_ratio_range=ratio_range(passes["off"], passes["on"]))


def _margin(t: Thresholds, g: Agreement, floor: TieReport | None = None) -> float:
    return t.tie_margin if t.tie_margin is not None else default_margin(g, t.max_logprob_diff, floor)


def ratio_range(off: list[LoadPass], on: list[LoadPass]) -> tuple[float, float]:
    a = [p.tokens_per_s for p in off if p.tokens_per_s > 0]
    b = [p.tokens_per_s for p in on]
    if not a or not b:
        return (0.0, 0.0)
    return (min(b) / max(a), max(b) / min(a))


def throughput_note(report: ValidateReport) -> str:
    """How far the load passes' throughput ratio may be read. H100, 2026-12-05: 1.150x (passes 1.044-1.267) while no
    patch served a single call: separate servers with the same kernels differ that much, so the ratio is never
    a speed claim (``e2e`` makes those: alternated processes, intervals, a placebo arm)."""
    status = report.servers[1].status if len(report.servers) > 1 else None
    if status is not None and not sum(r.get("served_by_patch", 0) for r in status.get("patches", [])):
        return ("no patch served a call in the patched server: both ran SGLang's kernels, so this ratio is "
                "server-to-server noise, not a speedup")
    lo, hi = report.throughput_ratio_range
    noise = "within pass-to-pass noise; " if lo <= 1.0 <= hi else ""
    return (f"{noise}load passes check the patched server under load, they do not measure speed: "
            "`astra-sglang e2e` does (alternated processes, intervals, a placebo arm)")


def with_status(report: ValidateReport, status: dict[str, Any] | None) -> ValidateReport:
    """The patched server's counters (read again after it stopped: each process writes its last record at
    exit, while serving only once a second) and the verdict that depends on them."""
    report.servers[1].status = status
    report.failures = judge(report, status)
    return report


def _model(server: Server) -> str:
    import requests

    with requests.Session() as client:
        return model_id(client, server.url)


def write_report(report: ValidateReport, path: Path) -> None:
    write_atomic(path, report.model_dump_json(indent=2) + "\n")
