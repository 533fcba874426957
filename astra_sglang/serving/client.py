"""Greedy completions from one server over SGLang's OpenAI-compatible ``/v1/completions``.

Token ids (SGLang's ``return_token_ids``) and per-token logprobs come back with each completion, so two servers
are compared token by token, not by text that a detokenizer may merge. ``ignore_eos`` keeps every completion at
its full length: an early end of sequence would hide a later divergence.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from pydantic import Field

from astra_sglang.contract.base import Model
from astra_sglang.errors import AstraError
from astra_sglang.serving.prompts import Prompt


class Completion(Model):
    token_ids: list[int]
    logprobs: list[float | None] = Field(default_factory=list)
    text: str = ""
    latency_s: float = 0.0
    prompt_token_ids: list[int] = Field(default_factory=list, description="as the server tokenized the prompt")


class LoadPass(Model):
    """One pass of the whole request load through one server at a fixed concurrency."""
    server: str
    wall_s: float
    requests: int
    output_tokens: int
    tokens_per_s: float
    latencies_s: list[float]


def model_id(client: requests.Session, url: str) -> str:
    try:
        r = client.get(f"{url}/v1/models", timeout=30.0)
        r.raise_for_status()
        return str(r.json()["data"][0]["id"])
    except (requests.RequestException, KeyError, IndexError, TypeError, ValueError) as e:
        raise AstraError(f"{url}: no model list at /v1/models ({type(e).__name__}: {e})") from None


def complete(client: requests.Session, url: str, model: str, prompt: Prompt, max_tokens: int,
             timeout_s: float = 600.0) -> Completion:
    body: dict[str, Any] = {"model": model, "prompt": prompt.prompt, "max_tokens": prompt.max_tokens or max_tokens,
                            "temperature": 0.0, "logprobs": 1, "return_token_ids": True, "ignore_eos": True}
    t0 = time.perf_counter()
    try:
        r = client.post(f"{url}/v1/completions", json=body, timeout=timeout_s)
    except requests.RequestException as e:
        raise AstraError(f"{url}: completion request failed ({type(e).__name__}: {e})") from None
    latency = time.perf_counter() - t0
    if r.status_code != 200:
        raise AstraError(f"{url}: /v1/completions answered {r.status_code}: {r.text[:300]}")
    try:
        choice = r.json()["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        lps = (choice.get("logprobs") or {}).get("token_logprobs") or []
        pids = [int(t) for t in choice.get("prompt_token_ids") or []]
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise AstraError(f"{url}: a completion without token ids ({type(e).__name__}: {e}); "
                         "is this an SGLang server (return_token_ids)?") from None
    return Completion(token_ids=ids, logprobs=[None if x is None else float(x) for x in lps],
                      text=str(choice.get("text") or ""), latency_s=latency, prompt_token_ids=pids)


def complete_all(url: str, model: str, prompts: list[Prompt], max_tokens: int, concurrency: int,
                 timeout_s: float) -> tuple[list[Completion], float]:
    """Every prompt, ``concurrency`` in flight; the completions in prompt order and the pass's wall time."""
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=concurrency)
    with requests.Session() as client, ThreadPoolExecutor(max_workers=concurrency) as pool:
        client.mount("http://", adapter)
        t0 = time.perf_counter()
        out = list(pool.map(lambda p: complete(client, url, model, p, max_tokens, timeout_s), prompts))
        return out, time.perf_counter() - t0


def load_pass(name: str, url: str, model: str, prompts: list[Prompt], max_tokens: int, concurrency: int,
              timeout_s: float) -> LoadPass:
    done, wall = complete_all(url, model, prompts, max_tokens, concurrency, timeout_s)
    tokens = sum(len(c.token_ids) for c in done)
    return LoadPass(server=name, wall_s=wall, requests=len(done), output_tokens=tokens,
                    tokens_per_s=tokens / wall if wall > 0 else 0.0, latencies_s=[c.latency_s for c in done])


def quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q * 100) - 1))]
