"""The preflight accepts a model server and nothing else: any web server answers a GET, only a model server
lists the model or answers a chat request. Real HTTP on 127.0.0.1, the real openai client."""

from __future__ import annotations

import asyncio
import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, Script, final
from loop_support import API_KEY

from astra_sglang.agents.config import ModelOptions
from astra_sglang.agents.models import preflight
from astra_sglang.cli.main import main
from astra_sglang.errors import AstraError

ROOT = Path(__file__).resolve().parents[1]


def _opts(url: str, model: str = "o4-mini") -> ModelOptions:
    return ModelOptions(model=model, base_url=url, api_key_env="ASTRA_TEST_KEY", request_timeout_s=5)


@pytest.fixture()
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRA_TEST_KEY", API_KEY)


@pytest.fixture()
def plain_http(tmp_path: Path):
    (tmp_path / "index.html").write_text("<html>not a model</html>")
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_a_plain_web_server_is_not_a_model_server(plain_http: str, key, tmp_path: Path, capsys,
                                                   validated_merge_state: Path) -> None:
    with pytest.raises(AstraError, match="is not an OpenAI-compatible model server"):
        asyncio.run(preflight(_opts(plain_http)))
    runs = tmp_path / "runs"
    assert main(["optimize", str(validated_merge_state), "--runs-dir", str(runs), "--base-url",
                 plain_http, "--api-key-env", "ASTRA_TEST_KEY", "--device", "cpu", "--shapes", "test",
                 "--no-live"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an OpenAI-compatible model server" in err[0]
    assert not runs.exists()


def test_a_listing_with_the_model_is_enough(key) -> None:
    with FakeOpenAIServer(Script(), api_key=API_KEY, models=("o4-mini",)) as srv:
        note = asyncio.run(preflight(_opts(srv.url)))
        assert srv.roles() == []  # no chat request was needed
    assert "model o4-mini listed" in note


def test_no_listing_of_the_model_takes_an_answered_chat_request(key) -> None:
    script = Script().default("unknown", lambda body: final("ok"))
    with FakeOpenAIServer(script, api_key=API_KEY, models=()) as srv:
        note = asyncio.run(preflight(_opts(srv.url)))
        chats = [r.body for r in srv.requests if r.path.endswith("/chat/completions")]
    assert "answered a 1-token chat request" in note
    assert len(chats) == 1 and chats[0]["max_tokens"] == 1 and chats[0]["model"] == "o4-mini"


def test_a_server_that_does_not_serve_the_model(key) -> None:
    from fake_openai_server import http_error

    script = Script().default("unknown", lambda body: http_error(404, '{"error": {"message": "model not found"}}'))
    with FakeOpenAIServer(script, api_key=API_KEY, models=("Qwen/Qwen3-32B",)) as srv:
        with pytest.raises(AstraError, match=r"does not serve model 'o4-mini' \(it lists 1 other model\(s\): "
                                             r"Qwen/Qwen3-32B\)"):
            asyncio.run(preflight(_opts(srv.url)))


def test_a_model_server_refusing_max_tokens_still_counts(key) -> None:
    """OpenAI's o-series answer max_tokens with an API error (HTTP 400): a model server did answer."""
    from fake_openai_server import http_error

    body = '{"error": {"message": "Unsupported parameter: \'max_tokens\'", "type": "invalid_request_error"}}'
    script = Script().default("unknown", lambda b: http_error(400, body))
    with FakeOpenAIServer(script, api_key=API_KEY, models=()) as srv:
        note = asyncio.run(preflight(_opts(srv.url)))
    assert "answered a 1-token chat request for o4-mini (HTTP 400" in note
