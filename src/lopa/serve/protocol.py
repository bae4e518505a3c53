"""The OpenAI request schema (the subset lopa honours) and the response bodies it sends back."""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


MAX_MESSAGES = 512
MAX_CONTENT_CHARS = 1_000_000  # per message or prompt; the context check bounds it further, before tokenizing
MAX_STOPS = 4  # as OpenAI
MAX_STOP_CHARS = 256
INT64 = 2**63
# OpenAI fields lopa does not implement, with the value that means "not used" (anything else is refused by name)
UNSUPPORTED = {
    "logprobs": (None, False, 0), "top_logprobs": (None, 0), "logit_bias": (None, {}), "tools": (None, []),
    "tool_choice": (None, "none"), "functions": (None, []), "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}), "echo": (None, False), "best_of": (None, 1), "suffix": (None, ""),
    "parallel_tool_calls": (None, False, True), "prediction": (None,),
}


class UnsupportedField(ValueError):
    """A request field lopa knows of but does not implement: answered with a 400 naming it."""

    def __init__(self, field: str, message: str | None = None):
        super().__init__(message or f"{field} is not supported by lopa")
        self.field = field


class _Request(BaseModel):
    # unknown fields pass (clients send `user`, `metadata`, ...); known ones lopa cannot honour are refused
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(0.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int = Field(0, ge=0)  # vLLM's extra parameter; 0 = off
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0, allow_inf_nan=False)  # vLLM's extra parameter
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0, allow_inf_nan=False)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0, allow_inf_nan=False)
    min_tokens: int = Field(0, ge=0)  # vLLM's extra parameter: no end-of-sequence before this many tokens
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-INT64, lt=INT64)
    stream: bool = False
    stream_options: dict | None = None  # {"include_usage": true}: the final chunk carries usage (it always does)
    n: int = Field(1, ge=1)  # more than one choice per request is refused (400) by name
    ignore_eos: bool = False  # vLLM's extension: generate exactly max_tokens

    @model_validator(mode="after")
    def _refuse_unsupported(self):
        if self.n != 1:
            raise UnsupportedField("n", "n: lopa returns one choice per request; send n requests")
        for name, value in (self.model_extra or {}).items():
            if name in UNSUPPORTED and value not in UNSUPPORTED[name]:
                raise UnsupportedField(name)
        stops = self.stops()
        if len(stops) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"stop: at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters")
        return self

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "developer"]
    content: str = Field(max_length=MAX_CONTENT_CHARS)

    def for_template(self) -> dict:
        """OpenAI's `developer` role is the `system` role of chat templates."""
        return {"role": "system" if self.role == "developer" else self.role, "content": self.content}


class ChatRequest(_Request):
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(None, ge=1)

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Request):
    prompt: str | list[str] = Field(max_length=MAX_CONTENT_CHARS)

    def limit(self) -> int | None:
        return self.max_tokens

    def text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("prompt: send one prompt per request")
        return self.prompt[0]


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class Reply:
    """Builds the response bodies of one request (ids and timestamps shared by its chunks)."""

    def __init__(self, chat: bool, model: str):
        self.chat = chat
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.headers = {"X-Request-Id": self.id}  # the id of the body, for logs on both sides

    def _body(self, kind: str, choice: dict, **extra) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice], **extra}

    def full(self, text: str, finish: str, usage: dict, lopa: dict) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            return self._body("chat.completion", choice, usage=usage, lopa=lopa)
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return self._body("text_completion", choice, usage=usage, lopa=lopa)

    def chunk(self, text: str, finish: str | None = None, **extra) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": {"role": "assistant", "content": text} if text else {}, "finish_reason": finish}
            return self._body("chat.completion.chunk", choice, **extra)
        return self._body("text_completion", {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}, **extra)
