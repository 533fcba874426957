"""A STAND-IN for ``python -m sglang.launch_server`` (labelled as such: no model, no GPU), for validate's CPU tests.

It speaks the slice of SGLang's HTTP API that validate uses (/health, /v1/models, /v1/completions with
return_token_ids and logprobs, /generate with input_ids and top_logprobs_num), runs in a process group with one
child process like SGLang's schedulers, and records its "patch" through the plugin's real status module and status
file, so validate's gathering, verdict and teardown are exercised for real.

Its "model" is a hash of the context: each context has five candidate next tokens with logprobs about 1 nat
apart, except one context in five, where the top two are 0.0005 apart (a near tie). Greedy decoding is exact on
both endpoints, so a probe at a divergence sees what the completion saw. The patched side adds 1e-3 to the top
logprob everywhere (a kernel's last-bit difference, well inside any threshold).

Env knobs (patched side): STANDIN_DIVERGE=1 (in one context in three the third token, 2 nats behind, jumps 1
nat ahead: a wrong kernel), STANDIN_DIVERGE=tie (at near ties the second token gains 1e-3 and wins: a one-ulp flip),
STANDIN_FALLBACK=1 (the patch falls back after its first call), STANDIN_CRASH=1 (exit before ready),
STANDIN_CHILD_PIDFILE (write the child's pid there).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from astra_sglang.patches import status, status_file
from astra_sglang.patches.env import patches_requested

PATCH = "standin-patch"


V = 1000
BASE = [-0.3, -1.3, -2.3, -3.3, -4.3]


def encode(prompt: object) -> list[int]:
    return [int(t) for t in prompt] if isinstance(prompt, list) else [b % V for b in str(prompt).encode()]


def _h(context: list[int]) -> int:
    return int(hashlib.sha256(json.dumps(context).encode()).hexdigest()[:12], 16)


def top(context: list[int], patched: bool) -> list[tuple[float, int]]:
    """The five best next tokens for this context, best first, as (logprob, token id)."""
    h = _h(context)
    ids = [(h + 97 * i) % V for i in range(5)]
    lps = list(BASE)
    tie = h % 5 == 0
    if tie:
        lps[1] = lps[0] - 0.0005
    if patched:
        mode = os.environ.get("STANDIN_DIVERGE")
        if mode == "tie" and tie:
            lps[1] += 1e-3
        elif mode == "1" and (h // 5) % 3 == 0:
            lps[2] = lps[0] + 1.0
        else:
            lps[0] += 1e-3
    return sorted(zip(lps, ids, strict=True), key=lambda x: -x[0])


def generate(prompt_ids: list[int], n: int, patched: bool) -> tuple[list[int], list[float]]:
    ctx, ids, lps = list(prompt_ids), [], []
    for _ in range(n):
        lp, tok = top(ctx, patched)[0]
        ids.append(tok)
        lps.append(lp)
        ctx.append(tok)
    return ids, lps


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "standin-model", "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path not in ("/v1/completions", "/generate"):
            self._send(404, {"error": "not found"})
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        patched = patches_requested()
        if self.path == "/generate":
            k = int(body.get("top_logprobs_num") or 1)
            best = top([int(t) for t in body["input_ids"]], patched)[:k]
            self._send(200, {"text": "", "output_ids": [best[0][1]], "meta_info": {
                "output_token_logprobs": [[best[0][0], best[0][1], None]],
                "output_top_logprobs": [[[lp, t, None] for lp, t in best]]}})
            return
        if patched:
            st = status.get(PATCH, "standin_op")
            if st.state == "active":
                st.served_by_patch += 1
                if os.environ.get("STANDIN_FALLBACK") == "1":
                    status.fail(PATCH, "stand-in: a launch error after the first call")
            else:
                st.served_by_original += 1
            status_file.tick()
        pids = encode(body["prompt"])
        ids, lps = generate(pids, int(body["max_tokens"]), patched)
        time.sleep(0.002 * len(ids))
        self._send(200, {"id": "cmpl-standin", "object": "text_completion", "model": body["model"],
                         "choices": [{"index": 0, "text": " ".join(map(str, ids)), "token_ids": ids,
                                      "prompt_token_ids": pids if body.get("return_token_ids") else None,
                                      "logprobs": {"tokens": [str(i) for i in ids], "token_logprobs": lps},
                                      "finish_reason": "length"}]})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--model-path")
    args = p.parse_args()
    if os.environ.get("STANDIN_CRASH") == "1":
        print("stand-in: CUDA error: out of memory (simulated)", flush=True)
        sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a "scheduler"
    if os.environ.get("STANDIN_CHILD_PIDFILE"):
        with open(os.environ["STANDIN_CHILD_PIDFILE"], "a") as f:
            f.write(f"{child.pid}\n")
    if patches_requested():
        status.get(PATCH, "standin_op").state = "active"
        status.get(PATCH).first_call_check = "passed (stand-in)"
        status_file.start()
        print(f"astra-sglang: 1 patch installed: {PATCH} (stand-in)", flush=True)
    else:
        print("astra-sglang: patches off (set ASTRA_SGLANG_PATCHES)", flush=True)
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
