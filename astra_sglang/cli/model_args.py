"""The model options every command that talks to a model takes (``optimize``, ``extract --draft``): one
definition, so the flags, defaults and help read the same everywhere."""

from __future__ import annotations

import argparse

from astra_sglang.agents.config import ModelOptions, RetryPolicy
from astra_sglang.cli.args import at_least_two, non_negative_float, non_negative_int, positive_float


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="model name on an OpenAI-compatible server (default o4-mini), litellm/PROVIDER/NAME, or file:DIR")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server URL (e.g. http://127.0.0.1:30000/v1)")
    p.add_argument("--api-key-env", default=None, help="environment variable holding the API key (default OPENAI_API_KEY)")
    p.add_argument("--request-timeout-s", type=positive_float, default=None, help="per model request (default 600)")
    p.add_argument("--file-timeout-s", type=positive_float, default=None, help="file: provider wait per request (default 3600)")
    p.add_argument("--retries", type=non_negative_int, default=3, help="retries of a failed model request (default 3)")
    p.add_argument("--retry-backoff-s", type=non_negative_float, default=2.0, help="first retry delay, doubling (default 2)")
    p.add_argument("--max-turns", type=at_least_two, default=12, help="agent turns (model calls) per step (default 12)")
    p.add_argument("--trace", action="store_true", help="enable openai-agents tracing (off by default)")


def model_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The model settings given on the command line (None = not given): a resumed run applies only these."""
    return {"model": args.model, "base_url": args.base_url, "api_key_env": args.api_key_env,
            "request_timeout_s": args.request_timeout_s, "file_timeout_s": args.file_timeout_s,
            "trace": True if args.trace else None}


def model_options(args: argparse.Namespace) -> ModelOptions:
    return ModelOptions(**{k: v for k, v in model_overrides(args).items() if v is not None})  # type: ignore[arg-type]


def retry_policy(args: argparse.Namespace) -> RetryPolicy:
    return RetryPolicy(retries=args.retries, backoff_s=args.retry_backoff_s)
