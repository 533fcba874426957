"""Model and retry settings plus token counts: plain pydantic, no SDK import (run folders persist them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from astra_sglang.contract.base import Model


class ModelOptions(Model):
    """Which model; persisted in the run folder: names only, never a key."""

    model: str = "o4-mini"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    request_timeout_s: float = Field(default=600.0, gt=0)
    file_timeout_s: float = Field(default=3600.0, gt=0)
    trace: bool = False

    @property
    def kind(self) -> Literal["file", "litellm", "openai"]:
        if self.model.startswith("file:"):
            return "file"
        if self.model.startswith("litellm/"):
            return "litellm"
        return "openai"

    def describe(self) -> str:
        if self.kind == "openai":
            return f"{self.model} @ {self.base_url or 'https://api.openai.com/v1'}"
        return self.model


class RetryPolicy(Model):
    retries: int = Field(default=3, ge=0, description="retries after the first failed attempt")
    backoff_s: float = Field(default=2.0, ge=0, description="first delay; doubles each retry")
    max_backoff_s: float = 60.0

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * (2 ** attempt))


class TokenCount(Model):
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: TokenCount) -> TokenCount:
        return TokenCount(requests=self.requests + other.requests, input_tokens=self.input_tokens + other.input_tokens,
                          output_tokens=self.output_tokens + other.output_tokens)
