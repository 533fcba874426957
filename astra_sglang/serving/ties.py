"""Whether a divergence between two servers' greedy completions is a near-tie flip or a real disagreement.

A patched kernel that computes the same function in another order moves the logits by about one ulp. Where the
model's two best tokens are that close, greedy decoding may pick the other one, and from there the two sequences
condition on different text. Such a flip says nothing against the kernel; a divergence where one token clearly
wins on one server and loses on the other does. So at each first divergence both servers are asked again for
the same context (prompt + common prefix, one new token, top-k logprobs) and the two tokens' logprob gap is read
on each side. The gap counts as a near tie when it is within ``margin``: by default twice the largest |logprob
difference| the two servers showed on identical tokens (each of two logprobs may move by that much), but never
more than ``MARGIN_CAP``: a patch whose logprobs drift further is not reordering arithmetic, and its flips must
not be excused by its own drift. (Measured on the H200, a correct bf16 patch moved logprobs by 0.032.)
The floor widens it: a flip as small as one the unpatched server makes against itself is SGLang's own noise. With
128 requests in flight SGLang flipped against itself at gaps of 0.125 nats, one bf16 ulp of the logits there, and
moved logprobs by 0.12 on identical tokens (H200, 2026-12-04): a cap of 0.1 then called every patched flip of
that one-ulp size a wrong token.

The probe goes through SGLang's native ``/generate`` with ``input_ids``: the OpenAI-compatible top logprobs are
keyed by token text, which collide (all ``""``) on a server started with ``--skip-tokenizer-init``. Its numbers
come from a prefill of the whole context, not the decode step that diverged, so they carry the same ulp-level
noise; a clear winner stays clear.
"""

from __future__ import annotations

from typing import Any

import requests
from pydantic import Field

from astra_sglang.contract.base import Model
from astra_sglang.errors import AstraError
from astra_sglang.serving.client import Completion
from astra_sglang.serving.compare import Agreement
from astra_sglang.serving.prompts import Prompt


class TopK(Model):
    token_ids: list[int]
    logprobs: list[float]

    def logprob(self, token: int) -> float | None:
        return next((lp for t, lp in zip(self.token_ids, self.logprobs, strict=True) if t == token), None)


class Probe(Model):
    index: int = Field(description="the prompt")
    position: int = Field(description="the first diverging output token")
    token_a: int = Field(description="what the first server chose there")
    token_b: int = Field(description="what the second server chose there")
    top_a: TopK | None = None
    top_b: TopK | None = None
    gap_a: float | None = Field(default=None, description="first server, asked again: logprob(token_a) - "
                                "logprob(token_b); None when token_b is not in its top k")
    gap_b: float | None = Field(default=None, description="second server: logprob(token_b) - logprob(token_a)")
    near_tie: bool = False
    note: str = ""


class TieReport(Model):
    top_k: int
    margin: float = Field(description="a gap up to this (nats) on both servers is a near tie")
    probes: list[Probe] = Field(default_factory=list)

    @property
    def near_ties(self) -> int:
        return sum(p.near_tie for p in self.probes)


MARGIN_CAP = 0.1  # nats


def default_margin(agreement: Agreement, max_logprob_diff: float, floor: TieReport | None = None) -> float:
    """Twice the drift, capped; never below the largest flip the floor (unpatched against itself) made, which
    is itself bounded by ``max_logprob_diff``."""
    own = min(2.0 * min(agreement.max_abs_logprob_diff, max_logprob_diff), MARGIN_CAP)
    return max(own, min(floor_flip_gap(floor), max_logprob_diff))


def floor_flip_gap(floor: TieReport | None) -> float:
    """The widest gap at which the unpatched server chose differently from itself (0 without such a flip)."""
    gaps = [max(abs(p.gap_a), abs(p.gap_b)) for p in (floor.probes if floor else [])
            if p.gap_a is not None and p.gap_b is not None]
    return max(gaps, default=0.0)


def top_k_next(client: requests.Session, url: str, input_ids: list[int], k: int, timeout_s: float) -> TopK:
    body: dict[str, Any] = {"input_ids": input_ids, "return_logprob": True, "top_logprobs_num": k,
                            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
    try:
        r = client.post(f"{url}/generate", json=body, timeout=timeout_s)
    except requests.RequestException as e:
        raise AstraError(f"{url}: /generate request failed ({type(e).__name__}: {e})") from None
    if r.status_code != 200:
        raise AstraError(f"{url}: /generate answered {r.status_code}: {r.text[:300]}")
    try:
        out = r.json()
        out = out[0] if isinstance(out, list) else out
        top = out["meta_info"]["output_top_logprobs"][0]
        return TopK(token_ids=[int(t[1]) for t in top], logprobs=[float(t[0]) for t in top])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise AstraError(f"{url}: /generate gave no top logprobs ({type(e).__name__}: {e}); "
                         "is this an SGLang server?") from None


def prompt_ids(prompt: Prompt, done: Completion) -> list[int] | None:
    if isinstance(prompt.prompt, list):
        return list(prompt.prompt)
    return list(done.prompt_token_ids) or None


def diverging(index: int, position: int, a: Completion, b: Completion) -> Probe:
    """The probe's subject: the two tokens chosen at the first divergence (none when one completion ended)."""
    if position >= min(len(a.token_ids), len(b.token_ids)):
        return Probe(index=index, position=position, token_a=-1, token_b=-1, note="the completions' lengths differ")
    return Probe(index=index, position=position, token_a=a.token_ids[position], token_b=b.token_ids[position])


def probe_one(client: requests.Session, urls: tuple[str, str], probe: Probe, prompt: Prompt, a: Completion,
              k: int, margin: float, timeout_s: float) -> None:
    """Both servers' top k at the divergence's context, and the two tokens' gaps, into ``probe``."""
    ids = prompt_ids(prompt, a)
    if ids is None:
        probe.note = "no prompt token ids (the server returned no prompt_token_ids)"
        return
    ta, tb = probe.token_a, probe.token_b
    context = ids + a.token_ids[:probe.position]
    probe.top_a = top_k_next(client, urls[0], context, k, timeout_s)
    probe.top_b = top_k_next(client, urls[1], context, k, timeout_s)
    la_a, la_b = probe.top_a.logprob(ta), probe.top_a.logprob(tb)
    lb_a, lb_b = probe.top_b.logprob(ta), probe.top_b.logprob(tb)
    probe.gap_a = None if la_a is None or la_b is None else la_a - la_b
    probe.gap_b = None if lb_a is None or lb_b is None else lb_b - lb_a
    probe.near_tie = (probe.gap_a is not None and probe.gap_b is not None
                      and abs(probe.gap_a) <= margin and abs(probe.gap_b) <= margin)
    if probe.gap_a is None or probe.gap_b is None:
        probe.note = f"one server does not have the other's token in its top {k}"


def probe_divergences(urls: tuple[str, str], prompts: list[Prompt], a: list[Completion], b: list[Completion],
                      agreement: Agreement, k: int, margin: float, timeout_s: float) -> TieReport:
    """One probe per diverging prompt, one request at a time (as the correctness passes)."""
    report = TieReport(top_k=k, margin=margin)
    with requests.Session() as client:
        for row in agreement.per_prompt:
            if row.first_divergence is None:
                continue
            i = row.index
            probe = diverging(i, row.first_divergence, a[i], b[i])
            if not probe.note:
                try:
                    probe_one(client, urls, probe, prompts[i], a[i], k, margin, timeout_s)
                except AstraError as e:  # a server without /generate: the divergence stays unexplained, not fatal
                    probe.note = f"probe failed: {e}"[:300]
            report.probes.append(probe)
    return report
