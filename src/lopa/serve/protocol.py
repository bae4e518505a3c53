"""The OpenAI request schema (the subset lopa honours) and the response bodies it sends back."""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send fields lopa has no use for (user, logprobs=None, ...)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    n: Literal[1] = 1
    ignore_eos: bool = False  # vLLM's extension: generate exactly max_tokens

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "developer"]
    content: str


class ChatRequest(_Request):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Request):
    prompt: str | list[str]

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
