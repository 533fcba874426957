"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for the agents-loop tests and the scripted GPU runs.

Real HTTP through the real SDK: the loop cannot tell it from a model server, so the tests exercise the same
request/response path, tool calls, structured outputs, retries and timeouts a real run goes through. No
model is involved: every answer is scripted by the caller, per agent role (read from the system prompt's
``# Role: <name> agent`` first line), in order.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROLE_RE = re.compile(r"#\s*Role:\s*([\w-]+)\s+agent", re.IGNORECASE)


@dataclass
class Reply:
    """One scripted answer to one /v1/chat/completions request."""

    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    error_body: str = ""
    delay_s: float = 0.0


def final(obj: dict[str, Any] | str, delay_s: float = 0.0) -> Reply:
    """The agent's final (structured) output: JSON text matching the agent's output schema."""
    return Reply(content=obj if isinstance(obj, str) else json.dumps(obj), delay_s=delay_s)


def tool_call(name: str, args: dict[str, Any], delay_s: float = 0.0) -> Reply:
    return Reply(tool_calls=[(name, args)], delay_s=delay_s)


def http_error(status: int = 500, body: str = '{"error": {"message": "scripted server error"}}') -> Reply:
    return Reply(status=status, error_body=body)


def delayed(reply: Reply, seconds: float) -> Reply:
    reply.delay_s = seconds
    return reply


def role_of(body: dict[str, Any]) -> str:
    for msg in body.get("messages", []):
        if msg.get("role") in ("system", "developer"):
            content = msg.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            m = ROLE_RE.search(text)
            if m:
                return m.group(1).lower()
    return "unknown"


Responder = Callable[[dict[str, Any]], Reply]


class Script:
    """Per-role queues of replies; a role whose queue is empty falls back to its default responder."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[Reply | Responder]] = {}
        self.defaults: dict[str, Responder] = {}
        self.lock = threading.Lock()

    def add(self, role: str, *replies: Reply | Responder) -> Script:
        with self.lock:
            self.queues.setdefault(role, deque()).extend(replies)
        return self

    def default(self, role: str, responder: Responder) -> Script:
        self.defaults[role] = responder
        return self

    def remaining(self, role: str) -> int:
        return len(self.queues.get(role, ()))

    def __call__(self, body: dict[str, Any]) -> Reply:
        role = role_of(body)
        with self.lock:
            queue = self.queues.get(role)
            item = queue.popleft() if queue else None
        if item is None:
            responder = self.defaults.get(role)
            if responder is None:
                message = f"fake server: script for {role!r} exhausted"
                return http_error(500, json.dumps({"error": {"message": message}}))
            return responder(body)
        return item(body) if callable(item) else item


@dataclass
class Recorded:
    path: str
    role: str
    body: dict[str, Any]
    authorization: str
    t: float


class FakeOpenAIServer:
    """ThreadingHTTPServer serving /v1/models and /v1/chat/completions with scripted replies."""

    def __init__(self, responder: Responder, api_key: str | None = "test-key",
                 models: tuple[str, ...] = ("o4-mini",)):
        self.responder = responder
        self.api_key = api_key
        self.models = models
        self.requests: list[Recorded] = []
        self._counter = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def roles(self) -> list[str]:
        return [r.role for r in self.requests if r.path.endswith("/chat/completions")]

    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: str) -> None:
                data = payload.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away: that is the point of a delay reply

            def _authorized(self) -> bool:
                if server.api_key is None:
                    return True
                if self.headers.get("Authorization", "") == f"Bearer {server.api_key}":
                    return True
                self._send(401, json.dumps({"error": {"message": "Incorrect API key provided",
                                                      "code": "invalid_api_key"}}))
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    server._record(self.path, {}, self.headers.get("Authorization", ""))
                    data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in server.models]
                    self._send(200, json.dumps({"object": "list", "data": data}))
                else:
                    self._send(404, json.dumps({"error": {"message": "not found"}}))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length) if length else b"{}"
                if not self._authorized():
                    return
                body = json.loads(raw or b"{}")
                server._record(self.path, body, self.headers.get("Authorization", ""))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, json.dumps({"error": {"message": f"fake server does not serve {self.path}"}}))
                    return
                reply = server.responder(body)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.status != 200:
                    self._send(reply.status, reply.error_body)
                    return
                self._send(200, json.dumps(server._completion(body, reply)))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def _record(self, path: str, body: dict[str, Any], auth: str) -> None:
        with self._lock:
            self.requests.append(Recorded(path, role_of(body) if body else "", body, auth, time.time()))

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        with self._lock:
            self._counter += 1
            n = self._counter
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
        completion_tokens = max(1, len(json.dumps(message)) // 4)
        return {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
