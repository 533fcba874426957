"""Which model the agents talk to, and a preflight that fails once, clearly, before any work starts.

``--model`` forms: ``NAME`` (an OpenAI-compatible server: OpenAI by default, or ``--base-url`` for a local
SGLang/vLLM server or a gateway), ``litellm/PROVIDER/NAME`` (through the SDK's LiteLLM extension, when
installed), ``file:DIR`` (requests as files, see ``file_provider``). The API key is read from the
environment variable named by ``--api-key-env`` and is only ever held in memory.
"""

from __future__ import annotations

import os
from pathlib import Path

from astra_sglang.agents.config import ModelOptions
from astra_sglang.errors import AstraError


def _api_key(opts: ModelOptions, required: bool = True) -> str | None:
    key = os.environ.get(opts.api_key_env)
    if not key and required:
        raise AstraError(f"no API key: environment variable {opts.api_key_env} is not set (choose another with "
                         f"--api-key-env; any non-empty value for a server without authentication)")
    return key or None


def model_name(opts: ModelOptions) -> str:
    """``--model`` as the SDK's MultiProvider names models: ``prefix/name``, the prefix choosing the provider.
    An OpenAI-compatible server's model keeps its whole id behind ``openai/`` (a local SGLang server's ids look
    like ``Qwen/Qwen3-8B``, which must not read as a prefix)."""
    if opts.kind == "file":
        return f"file/{opts.model[len('file:'):]}"
    if opts.kind == "litellm":
        return opts.model
    return f"openai/{opts.model}"


def model_provider(opts: ModelOptions):  # -> agents.MultiProvider
    """Every transport behind one map, as openai-agents-python composes them (``MultiProvider``): ``file/`` is
    ours, ``litellm/`` the SDK's LiteLLM model with this run's base URL and key, an OpenAI-compatible
    server (``openai/``: what SGLang and vLLM serve, through Chat Completions, with this run's timeout and no
    client-side retries: RecordingModel retries). Providers build nothing until asked, so a ``file:`` run never
    needs an API key."""
    from agents import ModelProvider, MultiProvider
    from agents.models.multi_provider import MultiProviderMap

    class FileProvider(ModelProvider):
        def get_model(self, model_name: str | None):  # -> FileModel
            from astra_sglang.agents.file_provider import FileModel

            return FileModel(Path(model_name or "."), timeout_s=opts.file_timeout_s)

    class LitellmProvider(ModelProvider):
        def get_model(self, model_name: str | None):  # -> LitellmModel
            try:
                from agents.extensions.models.litellm_model import LitellmModel
            except ImportError:
                raise AstraError("litellm/ models need LiteLLM: pip install 'openai-agents[litellm]'") from None
            return LitellmModel(model=model_name or "", base_url=opts.base_url, api_key=_api_key(opts))

    class OpenAICompatibleProvider(ModelProvider):
        def get_model(self, model_name: str | None):  # -> OpenAIChatCompletionsModel
            from agents import OpenAIChatCompletionsModel
            from openai import AsyncOpenAI

            client = AsyncOpenAI(base_url=opts.base_url, api_key=_api_key(opts), max_retries=0,
                                 timeout=opts.request_timeout_s)
            return OpenAIChatCompletionsModel(model=model_name or opts.model, openai_client=client)

    providers = MultiProviderMap()
    providers.add_provider("file", FileProvider())
    providers.add_provider("litellm", LitellmProvider())
    providers.add_provider("openai", OpenAICompatibleProvider())
    return MultiProvider(provider_map=providers)


def build_model(opts: ModelOptions):  # -> agents.Model
    """The transport only; the loop wraps it in RecordingModel for logging and retries."""
    return model_provider(opts).get_model(model_name(opts))


def configure_tracing(opts: ModelOptions) -> None:
    """Tracing uploads prompts to OpenAI's trace store: off unless the user asked for it."""
    from agents import set_tracing_disabled, set_tracing_export_api_key

    if opts.trace and opts.kind == "openai":
        set_tracing_disabled(False)
        set_tracing_export_api_key(_api_key(opts) or "")
    else:
        set_tracing_disabled(True)


async def preflight(opts: ModelOptions) -> str:
    """One cheap request before any work: a missing key, an unreachable server, a server that is not a model
    server (any HTTP server answers a GET) or one without the model is one clear error, not R failed rounds.
    A /models listing that names the model is enough; otherwise a chat request of 1 token must be answered."""
    if opts.kind == "file":
        directory = Path(opts.model[len("file:"):])
        try:
            directory.mkdir(parents=True, exist_ok=True)
            probe = directory / ".astra-write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise AstraError(f"file: model folder {directory} is not writable: {e}") from None
        return f"requests go to {directory} (answer each NNNN-*.request.json with a .response.json)"
    if opts.kind == "litellm":
        build_model(opts)  # import check and key check; LiteLLM has no cheap provider-neutral probe
        return f"LiteLLM {opts.model} (not probed: LiteLLM has no provider-neutral preflight)"
    import openai

    key = _api_key(opts)
    url = opts.base_url or "https://api.openai.com/v1"
    client = openai.AsyncOpenAI(base_url=opts.base_url, api_key=key, max_retries=1,
                                timeout=min(30.0, opts.request_timeout_s))
    try:
        names = await _listed_models(client)
        if names is not None and opts.model in names:
            return f"{url} reachable; model {opts.model} listed"
        # No listing, or one without the model: only an answer to a real request shows a model server.
        listed = "" if names is None else f" (it lists {len(names)} other model(s): {', '.join(names[:5])})"
        try:
            reply = await client.chat.completions.create(
                model=opts.model, messages=[{"role": "user", "content": "Reply with one word: ok"}], max_tokens=1)
        except openai.NotFoundError:
            what = (f"does not serve model {opts.model!r}{listed}" if names is not None
                    else "is not an OpenAI-compatible model server (no /models listing, and POST /chat/completions "
                         "gave HTTP 404)")
            raise AstraError(f"{url} {what}") from None
        except openai.BadRequestError as e:
            if isinstance(e.body, dict):  # an OpenAI-style error about the request: a model server answered
                return f"{url} answered a 1-token chat request for {opts.model} (HTTP 400: {e.message[:120]})"
            raise AstraError(f"{url} is not an OpenAI-compatible model server (HTTP 400 without an API error)") from None
        except openai.APIStatusError as e:
            if e.status_code not in (405, 501):
                raise
            raise AstraError(f"{url} is not an OpenAI-compatible model server ({'no' if names is None else 'a'} "
                             f"/models listing, and POST /chat/completions gave HTTP {e.status_code})") from None
        except (openai.APIResponseValidationError, ValueError) as e:
            raise AstraError(f"{url} is not an OpenAI-compatible model server (its reply to a chat request is "
                             f"not a chat completion: {type(e).__name__})") from None
        if not getattr(reply, "choices", None):
            raise AstraError(f"{url} is not an OpenAI-compatible model server (its reply to a chat request has "
                             f"no choices)")
        return f"{url} reachable; model {opts.model} answered a 1-token chat request{listed}"
    except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
        raise AstraError(f"the model server at {url} rejected the API key from {opts.api_key_env} "
                         f"(HTTP {e.status_code})") from None
    except openai.APIConnectionError as e:  # includes timeouts
        raise AstraError(f"cannot reach the model server at {url}: {type(e).__name__}: {e.__cause__ or e}") from None
    except openai.APIStatusError as e:
        raise AstraError(f"model server preflight at {url} failed: HTTP {e.status_code}") from None
    finally:
        await client.close()


async def _listed_models(client) -> list[str] | None:
    """The server's /models listing; None when it has none (404) or answers something that is not one."""
    import openai

    try:
        page = await client.models.list()
        return [m.id for m in page.data]
    except openai.NotFoundError:
        return None
    except (openai.APIResponseValidationError, ValueError, AttributeError, TypeError):
        return None
