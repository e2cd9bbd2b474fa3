"""Remote engine: one OpenAI-compatible endpoint (``vllm serve``) behind extractor.

Scaling out is that endpoint's business: ``vllm serve --data-parallel-size N`` (one endpoint over
N engine ranks), or ``vllm-router`` in front of many servers (health checks, retries, cache-aware
routing). The client-side list of servers this engine once balanced is retired: it did nothing
the router does not (``bench/results/remote_router.md``). An endpoint that drops connections is
marked unhealthy, and re-probed on ``/health`` until it answers; meanwhile requests fail fast. A 429
or 503 is retried after its ``Retry-After`` (seconds or an HTTP date); a 400 is the request's
fault and is not retried (:class:`RequestRejectedError`, HTTP 422). When every try fails: 5xx
and broken answers give :class:`UpstreamError` (502), timeouts :class:`UpstreamTimeoutError`
(504), servers still busy :class:`EngineNotReadyError` (503 with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import math
import re
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import httpx

from extractor.config import Settings
from extractor.engines.base import Generation, GenerationRequest, Message
from extractor.engines.local import PROMPT_IDS_CACHE
from extractor.engines.loop import LoopThread
from extractor.engines.tokenizer import ChatIds, bytes_ends, estimate_tokens, load_tokenizer
from extractor.errors import (
    ConfigError,
    EngineError,
    EngineNotReadyError,
    InputError,
    ModelNotPreparedError,
    RequestRejectedError,
    UpstreamError,
    UpstreamTimeoutError,
)
from extractor.models import resolve_model_dir

_CONTEXT_LENGTH = re.compile(r"context length|too long|max_tokens", re.IGNORECASE)
_BUSY = (429, 503)
_FATAL = (400, 401, 403, 404, 413, 422)
_REJECTED = (400, 413, 422)  # the request's fault; 401/403/404 are the configuration's (key, model name)


@dataclass(eq=False)
class Endpoint:
    """The server: its health as this engine sees it."""

    url: str
    healthy: bool = True
    busy_until: float = 0.0
    last_error: str = ""
    probe: asyncio.Task[None] | None = field(default=None, repr=False)


class _Retry(Exception):  # noqa: N818 - control flow inside this module, never raised out of it
    """A try failed in a way that another try may not: ``kind`` is ``timeout``, ``busy`` or ``failed``."""

    def __init__(self, message: str, *, kind: str = "failed", wait_s: float = 0.0) -> None:
        super().__init__(message)
        self.kind = kind
        self.wait_s = wait_s


def chat_payload(request: GenerationRequest, *, model: str, stream: bool = False) -> dict[str, Any]:
    """The chat-completions body for one request (pure).

    With an adapter the model is the adapter's folder name: serve it with
    ``vllm serve BASE --enable-lora --lora-modules NAME=FOLDER``.
    """
    body: dict[str, Any] = {
        "model": PurePath(request.adapter).name if request.adapter is not None else model,
        "messages": [dict(m) for m in request.messages],
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }
    if request.stop:
        body["stop"] = list(request.stop)
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.seed is not None:
        body["seed"] = request.seed
    if request.logprobs:
        body["logprobs"] = True  # each token's own log-probability (vLLM: after the grammar's mask)
    if request.grammar is not None:
        # vLLM's own field (never beside response_format); the server's backend must read Lark:
        # start it with --structured-outputs-config '{"backend": "guidance"}'.
        body["structured_outputs"] = {"grammar": request.grammar}
    elif request.json_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "extraction", "schema": dict(request.json_schema)},
        }
    if stream:
        body["stream"] = True
    return body


def parse_completion(body: Any) -> Generation:
    """A chat-completions response as a :class:`Generation`; ``ValueError`` when malformed."""
    try:
        choice = body["choices"][0]
        text = choice["message"]["content"] or ""
        usage = body.get("usage") or {}
        tokens = (choice.get("logprobs") or {}).get("content") or []
        pieces = [bytes(t["bytes"]) if t.get("bytes") is not None else str(t["token"]).encode() for t in tokens]
        return Generation(
            text=str(text),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=str(choice.get("finish_reason") or "stop"),
            token_ends=bytes_ends(pieces),
            token_logprobs=tuple(float(t["logprob"]) for t in tokens),
        )
    except (KeyError, IndexError, TypeError, AttributeError) as error:
        raise ValueError(f"not a chat completion: {error!r}") from None


def retry_after_s(
    headers: Mapping[str, str], *, default: float = 1.0, cap: float = 30.0, now: float | None = None
) -> float:
    """Seconds to wait from a ``Retry-After`` header (seconds, or an HTTP date), within 0..``cap``."""
    raw = headers.get("retry-after")
    if raw is None:
        return min(default, cap)
    try:
        value = float(raw)
    except ValueError:
        value = _seconds_until(raw, now=time.time() if now is None else now, default=default)
    if not math.isfinite(value):
        value = default
    return min(max(value, 0.0), cap)


def _seconds_until(date: str, *, now: float, default: float) -> float:
    try:
        when = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError):
        return default
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        return default
    return when.timestamp() - now


def error_message(response: httpx.Response) -> str:
    """The server's error message from an OpenAI-style error body, else the raw text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    return response.text[:500]


class RemoteEngine:
    """Chat completions with structured outputs on one OpenAI-compatible endpoint.

    Its I/O runs on a loop of its own (:class:`~extractor.engines.loop.LoopThread`), so the
    connection pool and the health probes outlive any one caller's event loop.
    """

    def __init__(self, settings: Settings, *, probe_interval_s: float = 2.0, max_retry_wait_s: float = 30.0) -> None:
        if len(settings.remote_base_urls) != 1:
            raise ConfigError("EXTRACTOR_REMOTE_URLS: the remote engine needs one base URL")
        self._settings = settings
        self.endpoint = Endpoint(settings.remote_base_urls[0])
        self._probe_interval_s = probe_interval_s
        self._max_retry_wait_s = max_retry_wait_s
        self._loop: LoopThread | None = None
        self._client: httpx.AsyncClient | None = None
        self._chat_ids: ChatIds | None = None  # the local tokenizer's prompt token ids, when the model is local
        self._served_model: str | None = settings.remote_model
        self._max_model_len = settings.max_model_len
        self._start_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return self._served_model or self._settings.model

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    async def start(self) -> None:
        """Load the tokenizer if the model is local, open the connection pool, probe the servers."""
        await asyncio.to_thread(self.start_sync)

    def start_sync(self) -> None:
        """Blocking :meth:`start`; idempotent, and safe to call from many callers at once."""
        with self._start_lock:
            if self._loop is not None:
                return
            tokenizer = self._local_tokenizer()
            self._chat_ids = None if tokenizer is None else ChatIds(tokenizer, PROMPT_IDS_CACHE)
            loop = LoopThread("extractor-remote")
            try:
                loop.run(self._open_pool())
            except BaseException:
                loop.stop()
                raise
            self._loop = loop

    def _local_tokenizer(self) -> Any:
        try:
            model_dir = resolve_model_dir(self._settings)
        except (ConfigError, ModelNotPreparedError):
            return None  # counted approximately; the server rejects a prompt that does not fit
        return load_tokenizer(model_dir)

    async def _open_pool(self) -> None:
        s = self._settings
        headers = {"authorization": f"Bearer {s.remote_api_key}"} if s.remote_api_key else {}
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(s.remote_timeout_s, connect=min(5.0, s.remote_timeout_s)),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
            headers=headers,
        )
        await self._check(self.endpoint)

    def _running(self) -> LoopThread:
        if self._loop is None:
            raise EngineError("remote engine not started; call start() first")
        return self._loop

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise EngineError("remote engine not started; call start() first")
        return self._client

    async def _check(self, endpoint: Endpoint) -> None:
        """Probe once; an endpoint that does not answer is re-probed in the background."""
        if not await self._healthy(endpoint):
            self._mark_unhealthy(endpoint, endpoint.last_error or "no answer on /health")
        elif self._served_model is None:
            await self._discover(endpoint)

    async def _healthy(self, endpoint: Endpoint) -> bool:
        try:
            response = await self._http.get(f"{endpoint.url}/health", timeout=5.0)
        except httpx.HTTPError as error:
            endpoint.last_error = f"/health: {type(error).__name__}"
            return False
        endpoint.last_error = "" if response.status_code == 200 else f"/health answered {response.status_code}"
        return response.status_code == 200

    async def _discover(self, endpoint: Endpoint) -> None:
        """Learn the served model's name and window from ``/v1/models``."""
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            response = await self._http.get(f"{endpoint.url}/v1/models", timeout=5.0)
            card = response.json()["data"][0]
            self._served_model = self._served_model or str(card["id"])
            if card.get("max_model_len"):
                self._max_model_len = int(card["max_model_len"])

    def _mark_unhealthy(self, endpoint: Endpoint, reason: str) -> None:
        endpoint.healthy = False
        endpoint.last_error = reason
        if endpoint.probe is None or endpoint.probe.done():
            endpoint.probe = asyncio.create_task(self._reprobe(endpoint))

    async def _reprobe(self, endpoint: Endpoint) -> None:
        while not await self._healthy(endpoint):
            await asyncio.sleep(self._probe_interval_s)
        endpoint.healthy = True
        if self._served_model is None:
            await self._discover(endpoint)

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        if self._chat_ids is not None:  # remembered: the pipeline counts a prompt more than once
            return len(self._chat_ids(messages))
        # No local tokenizer: a low estimate; a prompt that does not fit is then rejected by the
        # server, and that rejection becomes an InputError.
        return estimate_tokens(messages)

    async def _pick(self) -> Endpoint:
        """The endpoint once healthy and past its Retry-After; unhealthy, fail fast."""
        endpoint = self.endpoint
        if not endpoint.healthy:
            raise EngineError(f"no healthy remote server (re-probing /health): {endpoint.url}: {endpoint.last_error}")
        wait = endpoint.busy_until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        return endpoint

    async def _request(
        self, request: GenerationRequest, *, stream: bool
    ) -> tuple[Endpoint, httpx.Response, Generation | None]:
        """Send with retries. A streamed response comes back open."""
        if self._served_model is None:
            await self._discover(await self._pick())
        body = chat_payload(request, model=self.model_name, stream=stream)
        tries = self._settings.remote_retries + 1
        last = _Retry("no try was made")
        where = ""
        for _ in range(tries):
            endpoint = await self._pick()
            try:
                response, generation = await self._try(endpoint, body, stream=stream)
                return endpoint, response, generation
            except _Retry as retry:
                last, where = retry, endpoint.url
        message = f"remote servers failed after {tries} tries; last: {where}: {last}"
        if last.kind == "timeout":
            raise UpstreamTimeoutError(message)
        if last.kind == "busy":
            raise EngineNotReadyError(message, retry_after=max(1, math.ceil(last.wait_s)))
        raise UpstreamError(message)

    async def _try(
        self, endpoint: Endpoint, body: dict[str, Any], *, stream: bool
    ) -> tuple[httpx.Response, Generation | None]:
        request = self._http.build_request("POST", f"{endpoint.url}/v1/chat/completions", json=body)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TimeoutException as error:
            raise _Retry(f"timed out ({type(error).__name__})", kind="timeout") from None
        except httpx.TransportError as error:  # refused, reset
            self._mark_unhealthy(endpoint, f"{type(error).__name__}: {error}")
            raise _Retry(f"connection failed ({type(error).__name__})") from None
        if response.status_code == 200 and stream:
            return response, None
        try:
            await response.aread()
        except httpx.TimeoutException as error:
            raise _Retry(f"timed out reading the answer ({type(error).__name__})", kind="timeout") from None
        except httpx.TransportError as error:  # dropped mid-answer
            self._mark_unhealthy(endpoint, f"{type(error).__name__}: {error}")
            raise _Retry(f"the answer broke off ({type(error).__name__})") from None
        finally:
            await response.aclose()
        if response.status_code == 200:
            try:
                return response, parse_completion(response.json())
            except ValueError as error:  # invalid JSON, or JSON of the wrong shape
                raise _Retry(f"answered 200 with an invalid body: {error}") from None
        status, message = response.status_code, error_message(response)
        if status in _BUSY:
            wait = retry_after_s(response.headers, cap=self._max_retry_wait_s)
            endpoint.busy_until = time.monotonic() + wait
            raise _Retry(f"busy ({status})", kind="busy", wait_s=wait)
        if status in _FATAL:
            if status == 400 and _CONTEXT_LENGTH.search(message):
                raise InputError(f"text too long for the remote model: {message}")
            if status in _REJECTED:
                raise RequestRejectedError(f"{endpoint.url} rejected the request ({status}): {message}")
            raise EngineError(f"{endpoint.url} refused the request ({status}): {message}")
        raise _Retry(f"answered {status}: {message}")

    async def generate(self, request: GenerationRequest) -> Generation:
        return await self._running().submit(self._generate(request))

    async def _generate(self, request: GenerationRequest) -> Generation:
        _, _, generation = await self._request(request, stream=False)
        if generation is None:  # pragma: no cover - _request parses every non-streamed answer
            raise EngineError("remote server: no answer")
        return generation

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Yield the cumulative text; closing the iterator closes the connection (vLLM aborts)."""
        async for text in self._running().stream(lambda: self._stream(request)):
            yield text

    async def _stream(self, request: GenerationRequest) -> AsyncIterator[str]:
        endpoint, response, _ = await self._request(request, stream=True)
        text = ""
        try:
            async for delta in _sse_deltas(response.aiter_lines()):
                text += delta
                yield text
        except httpx.HTTPError as error:
            raise EngineError(f"{endpoint.url}: the stream broke off ({type(error).__name__})") from error
        finally:
            await response.aclose()

    async def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            await loop.submit(self._close_pool())
            await asyncio.to_thread(loop.stop)

    async def _close_pool(self) -> None:
        endpoint = self.endpoint
        if endpoint.probe is not None:
            endpoint.probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await endpoint.probe
            endpoint.probe = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None


async def _sse_deltas(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The content deltas of a chat-completions event stream."""
    async for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            delta = json.loads(data)["choices"][0].get("delta", {}).get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
            raise EngineError(f"remote stream: not a chat-completion chunk: {data[:200]!r}") from error
        if delta:
            yield delta
