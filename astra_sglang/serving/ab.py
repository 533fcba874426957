"""One A/B validation: the same prompts through the unpatched and the patched server, then the same load.

Order matters for trust. Correctness first, one request at a time, so both servers see identical batches (a
batch's size changes which kernel shapes run, hence rounding); the unpatched server answers twice, and its
agreement with itself is the floor the patched one is read against. Then the load, alternated A B B A so
neither server always runs on a warmer GPU.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from astra_sglang.contract.base import Model, write_atomic
from astra_sglang.patches.tooling.status_report import aggregate, server_dirs
from astra_sglang.serving.client import LoadPass, complete_all, load_pass, model_id, quantile
from astra_sglang.serving.compare import Agreement, compare
from astra_sglang.serving.launch import Server, plugin_log_lines
from astra_sglang.serving.prompts import Prompt


class Thresholds(Model):
    min_identical: float = Field(default=0.9, ge=0.0, le=1.0)
    max_logprob_diff: float = Field(default=0.5, ge=0.0)
    expect: list[str] = Field(default_factory=list, description="patch ids that must be active and serve calls")


class LoadOptions(Model):
    max_tokens: int = Field(default=32, ge=1)
    concurrency: int = Field(default=8, ge=1)
    rounds: int = Field(default=2, ge=0, description="load passes per server, alternated A B B A ...")
    repeat: int = Field(default=4, ge=1, description="copies of the prompt set in one load pass")
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
    servers: list[ServerSide]
    throughput_ratio: float = Field(description="patched tokens/s over unpatched tokens/s (medians)")
    failures: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def _side(server: Server, patches: str, passes: list[LoadPass]) -> ServerSide:
    lat = [x for p in passes for x in p.latencies_s]
    return ServerSide(name=server.name, url=server.url, patches=patches, command=server.command,
                      ready_s=server.ready_s, load=passes,
                      tokens_per_s=statistics.median([p.tokens_per_s for p in passes]) if passes else 0.0,
                      latency_p50_s=quantile(lat, 0.5), latency_p90_s=quantile(lat, 0.9),
                      plugin_lines=plugin_log_lines(server))


def read_status(server: Server) -> dict[str, Any] | None:
    """The patched server's records: its own process group's folder when we launched it, else the newest."""
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
    if a.identical_rate < t.min_identical:
        worst = [f"#{r.index} at token {r.first_divergence}" for r in a.per_prompt if r.first_divergence is not None]
        out.append(f"outputs diverge: {a.identical_prompts}/{a.prompts} prompts identical "
                   f"({a.identical_rate:.2f} < {t.min_identical:.2f}; unpatched against itself "
                   f"{report.floor.identical_rate:.2f}); first divergences: {', '.join(worst[:6])}")
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


def run(off: Server, on: Server, patches: str, prompts: list[Prompt], opts: LoadOptions,
        thresholds: Thresholds, progress: Any = None) -> ValidateReport:
    say = progress or (lambda msg: None)
    model_off = _model(off)
    model_on = _model(on)
    say("correctness: unpatched, one request at a time")
    a1, _ = complete_all(off.url, model_off, prompts, opts.max_tokens, 1, opts.timeout_s)
    say("correctness: patched, one request at a time")
    b, _ = complete_all(on.url, model_on, prompts, opts.max_tokens, 1, opts.timeout_s)
    say("correctness: unpatched again (the floor)")
    a2, _ = complete_all(off.url, model_off, prompts, opts.max_tokens, 1, opts.timeout_s)
    load = prompts * opts.repeat
    passes: dict[str, list[LoadPass]] = {"off": [], "on": []}
    for r in range(opts.rounds):
        order = [(off, model_off, "off"), (on, model_on, "on")]
        for server, model, key in (order if r % 2 == 0 else order[::-1]):
            say(f"load round {r + 1}/{opts.rounds}: {server.name}, {len(load)} requests x {opts.concurrency}")
            passes[key].append(load_pass(server.name, server.url, model, load, opts.max_tokens, opts.concurrency,
                                         opts.timeout_s))
    sides = [_side(off, "off", passes["off"]), _side(on, patches, passes["on"])]
    ratio = sides[1].tokens_per_s / sides[0].tokens_per_s if sides[0].tokens_per_s else 0.0
    report = ValidateReport(created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), prompts=len(prompts), options=opts,
                            thresholds=thresholds, agreement=compare(a1, b), floor=compare(a1, a2),
                            servers=sides, throughput_ratio=ratio)
    return with_status(report, read_status(on))


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
