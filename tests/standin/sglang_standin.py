"""A STAND-IN for ``python -m sglang.launch_server`` (labelled as such: no model, no GPU), for validate's CPU tests.

It speaks the slice of SGLang's HTTP API that validate uses (/health, /v1/models, /v1/completions with
return_token_ids and logprobs), runs in a process group with one child process like SGLang's schedulers, and
records its "patch" through the plugin's real status module and status file, so validate's gathering, verdict
and teardown are exercised for real. Its completions are a deterministic function of the prompt.

Env knobs: STANDIN_DIVERGE=1 (patched: prompts with an even first token id diverge from token 5),
STANDIN_FALLBACK=1 (patched: the patch falls back after its first call), STANDIN_CRASH=1 (exit before ready),
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


def tokens_for(prompt: object, n: int, patched: bool) -> tuple[list[int], list[float]]:
    h = int(hashlib.sha256(json.dumps(prompt).encode()).hexdigest()[:8], 16)
    ids = [(h + 31 * i) % 1000 for i in range(n)]
    lps = [-0.1 * (i % 3) for i in range(n)]
    if patched and os.environ.get("STANDIN_DIVERGE") == "1" and ids[0] % 2 == 0:
        ids[5:] = [(x + 1) % 1000 for x in ids[5:]]
    if patched and lps:
        lps[0] += 1e-3  # a patched kernel's last-bit difference, well inside any threshold
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
        if self.path != "/v1/completions":
            self._send(404, {"error": "not found"})
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        patched = patches_requested()
        if patched:
            st = status.get(PATCH, "standin_op")
            if st.state == "active":
                st.served_by_patch += 1
                if os.environ.get("STANDIN_FALLBACK") == "1":
                    status.fail(PATCH, "stand-in: a launch error after the first call")
            else:
                st.served_by_original += 1
            status_file.tick()
        ids, lps = tokens_for(body["prompt"], int(body["max_tokens"]), patched)
        time.sleep(0.002 * len(ids))
        self._send(200, {"id": "cmpl-standin", "object": "text_completion", "model": body["model"],
                         "choices": [{"index": 0, "text": " ".join(map(str, ids)), "token_ids": ids,
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
