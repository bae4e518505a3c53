"""The OpenAI request schema (the subset lopa honours) and the response bodies it sends back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from ..config import MAX_LOGPROBS
from ..decode.sampling import TokenLogprob

MAX_MESSAGES = 512
MAX_CONTENT_CHARS = 1_000_000  # per message or prompt; the context check bounds it further, before tokenizing
MAX_STOPS = 4  # as OpenAI
MAX_STOP_CHARS = 256
INT64 = 2**63
MAX_COMPLETION_LOGPROBS = 5  # as OpenAI's legacy completions
# OpenAI fields lopa does not implement, with the value that means "not used" (anything else is refused by name)
UNSUPPORTED = {
    "logit_bias": (None, {}),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "parallel_tool_calls": (None, False, True),
    "prediction": (None,),
}


def _utf8(text: str) -> str:
    """JSON may carry lone surrogates ("\\ud800") that no UTF-8 tokenizer can take: refuse them here."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode text (a lone surrogate at character {exc.start})") from None
    return text


Text = Annotated[str, AfterValidator(_utf8)]


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
    min_p: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False)  # vLLM's extra parameter; 0 = off
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0, allow_inf_nan=False)  # vLLM's extra parameter
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0, allow_inf_nan=False)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0, allow_inf_nan=False)
    min_tokens: int = Field(0, ge=0)  # vLLM's extra parameter: no end-of-sequence before this many tokens
    stop: Text | list[Text] | None = None
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
    content: Text = Field(max_length=MAX_CONTENT_CHARS)

    def for_template(self) -> dict:
        """OpenAI's `developer` role is the `system` role of chat templates."""
        return {"role": "system" if self.role == "developer" else self.role, "content": self.content}


class ChatRequest(_Request):
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    @model_validator(mode="after")
    def _top_needs_logprobs(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs: set logprobs to true to get them")
        return self

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def logprob_count(self) -> int | None:
        """GenerationConfig.logprobs: alternatives per token, None when no logprobs were asked for."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Request):
    prompt: Text | list[Text] = Field(max_length=MAX_CONTENT_CHARS)
    logprobs: int | None = Field(None, ge=0, le=MAX_COMPLETION_LOGPROBS)  # the legacy API's: top alternatives

    def limit(self) -> int | None:
        return self.max_tokens

    def logprob_count(self) -> int | None:
        return self.logprobs

    def text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("prompt: send one prompt per request")
        return self.prompt[0]


def error_body(
    message: str, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class Reply:
    """Builds the response bodies of one request (ids and timestamps shared by its chunks).

    `token_text` turns a token id into its text, for the logprobs."""

    def __init__(self, chat: bool, model: str, token_text: Callable[[int], str]):
        self.chat = chat
        self.model = model
        self.token_text = token_text
        self.offset = 0  # characters of tokens reported so far: the legacy logprobs' text_offset
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.headers = {"X-Request-Id": self.id}  # the id of the body, for logs on both sides

    def _body(self, kind: str, choice: dict, **extra) -> dict:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            **extra,
        }

    def logprobs(self, entries: list[TokenLogprob] | None) -> dict | None:
        """OpenAI's logprobs object of these tokens: chat's `content` list, or the legacy completions' columns."""
        if entries is None:
            return None
        if self.chat:
            return {"content": [self._chat_entry(e.token, e.logprob, e.top) for e in entries]}
        texts = [self.token_text(e.token) for e in entries]
        offsets = [self.offset + sum(len(t) for t in texts[:i]) for i in range(len(texts))]
        self.offset += sum(len(t) for t in texts)
        return {
            "tokens": texts,
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{self.token_text(t): lp for t, lp in e.top} for e in entries],
            "text_offset": offsets,
        }

    def _chat_entry(self, token: int, logprob: float, top: list[tuple[int, float]] | None = None) -> dict:
        text = self.token_text(token)
        entry = {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}
        if top is not None:
            entry["top_logprobs"] = [self._chat_entry(t, lp) for t, lp in top]
        return entry

    def full(self, text: str, finish: str, usage: dict, lopa: dict, logprobs: list[TokenLogprob] | None = None) -> dict:
        if self.chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": self.logprobs(logprobs)}
            return self._body("chat.completion", choice, usage=usage, lopa=lopa)
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": self.logprobs(logprobs)}
        return self._body("text_completion", choice, usage=usage, lopa=lopa)

    def chunk(self, text: str, finish: str | None = None, logprobs: list[TokenLogprob] | None = None, **extra) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": self.logprobs(logprobs)}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if text else {}
            return self._body("chat.completion.chunk", choice, **extra)
        return self._body("text_completion", choice | {"text": text}, **extra)
