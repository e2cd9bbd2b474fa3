"""vLLM in a process of its own: its front end and the pipeline each get an interpreter.

vLLM's ``AsyncLLM`` runs two parts: the engine core (the model, the scheduler, the grammar masks),
always a child process, and a front end in the caller's process that feeds the core and collects
each step's outputs for every running request. On a GPU the front end keeps a core busy; beside it
the pipeline's calls that let the GIL go (the tokenizer, numpy, a file write) wait far past the
switch interval to take it back (bench/results/gil_starvation.md: a 0.1 ms render took 0.64 s).

:class:`ProcessEngine` runs the whole of :class:`~extractor.engines.vllm.VLLMEngine` in a child
process and talks to it over a local ZeroMQ socket: the prompt's token ids and the request (its
constraint and sampling, without the chat) go in, one :class:`Generation` (or a stream's texts)
comes out. This process keeps the tokenizer, for counting prompts and making their ids once.

The child dies with this process (it reads its stdin until the end, and its lifeline guard kills
it when this process is killed: :mod:`extractor.engines.lifeline`), and a child that dies fails
every request in flight with :class:`~extractor.errors.EngineDeadError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from extractor.config import Settings
from extractor.engines import lifeline
from extractor.engines.base import Generation, GenerationRequest
from extractor.engines.local import LocalModel
from extractor.engines.loop import LoopThread
from extractor.engines.tokenizer import ChatIds
from extractor.engines.vllm import VLLMEngine, cuda_environment, has_cuda
from extractor.errors import ConfigError, EngineDeadError, EngineError, ModelNotPreparedError
from extractor.models import resolve_model_dir

log = logging.getLogger("extractor.engine")
START_TIMEOUT_S = 1800.0  # a cold start on a GPU compiles for minutes; the child's own failure comes sooner
CLOSE_TIMEOUT_S = 60.0
# the replies that end a request: it is no longer in the child
FINAL = frozenset({"done", "error", "gone"})


def _send(socket: Any, message: tuple[Any, ...]) -> Any:
    return socket.send(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), copy=False)


def portable(request: GenerationRequest) -> GenerationRequest:
    """The request as the child needs it: no chat (the ids carry it), plain containers only."""
    schema = None if request.json_schema is None else _plain(request.json_schema)
    return dataclasses.replace(request, messages=(), json_schema=schema, stop=tuple(request.stop))


def _plain(value: Any) -> Any:
    """A JSON value made of dicts and lists (a task's schema may be read-only mapping views)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class ProcessEngine(LocalModel):
    """vLLM, front end included, in a child process; constrained decoding as :class:`VLLMEngine`."""

    def __init__(self, settings: Settings, *, share: int = 1) -> None:
        """``share``: how many engines share this machine; each takes that share of the memory."""
        self._settings = settings
        self._share = share
        self._model_dir: Path = resolve_model_dir(settings)
        self._chat_ids: ChatIds | None = None
        self._loop: LoopThread | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._socket: Any = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._replies: dict[int, asyncio.Queue[tuple[str, Any]]] = {}  # request id -> its replies
        self._held: set[int] = set()  # requests sent and not yet ended in the child
        self._numbers = itertools.count(1)
        self._dead: str | None = None  # why the child is gone
        self._start_lock = threading.Lock()
        self._tasks: tuple[asyncio.Future[Any], ...] = ()  # the link's own: the receiver, the child's exit

    @property
    def unfinished_requests(self) -> int:
        """Requests the child still holds (0 when idle: an aborted request counts until the child lets it go)."""
        return len(self._held)

    async def start(self) -> None:
        await asyncio.to_thread(self.start_sync)

    def start_sync(self) -> None:
        """Start the child and wait until its vLLM is loaded; idempotent."""
        with self._start_lock:
            if self._loop is not None:
                return
            lifeline.claim(self._settings.home)  # the child and its vLLM's processes die with this one
            self._load_tokenizer()
            self._folder = tempfile.TemporaryDirectory(prefix="extractor-engine-")
            loop = LoopThread("extractor-vllm-link")
            try:
                loop.run(self._launch(f"ipc://{self._folder.name}/engine"), timeout=START_TIMEOUT_S)
            except BaseException as error:
                self._teardown(loop)
                if isinstance(error, (EngineError, ConfigError)):  # a setting to fix stays one
                    raise
                raise EngineError(f"vLLM's process failed to start on {self._model_dir}: {error}") from error
            self._loop = loop

    async def _launch(self, address: str) -> None:
        import zmq
        import zmq.asyncio

        socket = zmq.asyncio.Context.instance().socket(zmq.PAIR)
        socket.setsockopt(zmq.SNDHWM, 0)  # no limit: every request in flight has its messages queued
        socket.setsockopt(zmq.RCVHWM, 0)
        socket.setsockopt(zmq.LINGER, 0)
        socket.bind(address)
        self._socket = socket
        if has_cuda():  # what the child's engine sets on CUDA, set here too: this process reports it
            cuda_environment(os.environ)
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # the child imports this very extractor
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        # A session of its own: vLLM's engine core and workers share the child's process group, so
        # they can all be stopped at once, even when the child itself was killed.
        child = subprocess.Popen(
            [sys.executable, "-m", "extractor.engines.process", address],
            stdin=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self._child = child
        assert child.stdin is not None
        child.stdin.write(pickle.dumps((self._settings, self._share)))
        child.stdin.flush()  # stdin stays open: the child's lifeline
        hello = asyncio.ensure_future(socket.recv())
        exited = asyncio.ensure_future(asyncio.to_thread(child.wait))
        done, _ = await asyncio.wait({hello, exited}, return_when=asyncio.FIRST_COMPLETED)
        if hello not in done:
            hello.cancel()
            raise EngineError(f"vLLM's process exited with code {child.returncode} before it was ready (log above)")
        kind, _, detail = pickle.loads(hello.result())
        if kind != "ready":
            await exited
            raise _start_failure(*detail)
        self._tasks = (asyncio.ensure_future(self._receive()), exited)
        exited.add_done_callback(lambda _: self._child_gone())

    async def _receive(self) -> None:
        while True:
            kind, number, detail = pickle.loads(await self._socket.recv())
            if kind in FINAL:
                self._held.discard(number)
            if kind == "error" and detail[0]:  # the child's vLLM is dead
                self._dead = detail[1]
            replies = self._replies.get(number)
            if replies is not None:
                replies.put_nowait((kind, detail))

    def _child_gone(self) -> None:
        """The child exited: every request in flight fails; so does every later one."""
        if self._child is None:  # closed on purpose
            return
        _stop_group(self._child.pid)  # what vLLM started there outlives a child that was killed
        self._dead = f"vLLM's process exited with code {self._child.returncode}; restart the service"
        self._held.clear()
        for replies in self._replies.values():
            replies.put_nowait(("error", (True, self._dead)))

    def _running(self) -> LoopThread:
        if self._loop is None:
            raise EngineError("engine not started; call start() first")
        if self._dead is not None:
            raise EngineDeadError(self._dead)
        return self._loop

    def _open(self, ids: Sequence[int], request: GenerationRequest, stream: bool) -> tuple[int, asyncio.Queue[Any]]:
        """Send one request to the child (on the link's loop); its number and where its replies arrive."""
        if self._dead is not None:
            raise EngineDeadError(self._dead)
        number = next(self._numbers)
        replies: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._replies[number] = replies
        self._held.add(number)
        _send(self._socket, ("go", number, (tuple(ids), portable(request), stream)))
        return number, replies

    def _close(self, number: int, ended: bool) -> None:
        self._replies.pop(number, None)
        if not ended and number in self._held and self._dead is None:
            _send(self._socket, ("stop", number, None))  # the caller went away: abort it in vLLM

    async def generate(self, request: GenerationRequest) -> Generation:
        ids = self.prompt_ids(request.messages)
        generation = await self._running().submit(self._generate(ids, request))
        if not generation.token_ids:
            return generation
        # placed here, not on the loop that feeds vLLM in the child: about 1 ms of decoding an answer
        ends = self.token_ends(generation.token_ids, generation.text)
        return dataclasses.replace(generation, token_ends=ends, token_ids=())

    async def _generate(self, ids: Sequence[int], request: GenerationRequest) -> Generation:
        number, replies = self._open(ids, request, stream=False)
        ended = False
        try:
            kind, detail = await replies.get()
            ended = True
            return _answer(kind, detail)
        finally:
            self._close(number, ended)

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Yield the cumulative text as it grows; closing the iterator aborts the request."""
        ids = self.prompt_ids(request.messages)
        async for text in self._running().stream(lambda: self._texts(ids, request)):
            yield text

    async def _texts(self, ids: Sequence[int], request: GenerationRequest) -> AsyncIterator[str]:
        number, replies = self._open(ids, request, stream=True)
        ended = False
        try:
            while True:
                kind, detail = await replies.get()
                if kind == "text":
                    yield detail
                    continue
                ended = True
                _answer(kind, detail)
                return
        finally:
            self._close(number, ended)

    async def close(self) -> None:
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        """Stop the child (vLLM shuts down there) and the link; idempotent."""
        loop, self._loop = self._loop, None
        if loop is not None:
            with contextlib.suppress(Exception):
                loop.run(_send(self._socket, ("close", 0, None)), timeout=5.0)
            self._teardown(loop)

    def _teardown(self, loop: LoopThread) -> None:
        """Stop the child, then the link's tasks, socket and loop."""
        self._stop_child()
        with contextlib.suppress(Exception):
            loop.run(self._unlink(), timeout=5.0)
        loop.stop()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    async def _unlink(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._socket is not None:
            self._socket.close(linger=0)

    def _stop_child(self) -> None:
        """Close the child's stdin (it shuts vLLM down and exits) and wait for it; kill what hangs."""
        child, self._child = self._child, None
        if child is None:
            return
        with contextlib.suppress(OSError):
            if child.stdin is not None:
                child.stdin.close()
        try:
            child.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("vLLM's process did not stop within %.0f s; killing it", CLOSE_TIMEOUT_S)
        _stop_group(child.pid)
        child.wait()


def _stop_group(leader: int) -> None:
    """Kill what is left of the child's process group (vLLM's engine core and workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)


def vllm_engine(settings: Settings, *, share: int = 1) -> VLLMEngine | ProcessEngine:
    """VLLM on this machine, its front end where ``engine_process`` says (own: on CUDA unless set)."""
    if settings.engine_process == "own" or (settings.engine_process == "auto" and has_cuda()):
        return ProcessEngine(settings, share=share)
    return VLLMEngine(settings, share=share)


def _answer(kind: str, detail: Any) -> Generation:
    """The generation a final reply carries, or the error it names."""
    if kind == "error":
        dead, message = detail
        raise (EngineDeadError if dead else EngineError)(message)
    if kind == "gone":
        raise EngineError("the request was aborted in vLLM's process")
    return detail  # type: ignore[no-any-return]


# --- the child -------------------------------------------------------------------------------


def _main(address: str) -> None:
    """The child: load vLLM (``VLLMEngine``), then answer the parent's requests until told to stop."""
    lifeline.watch()  # dies with the service even when this process is busy or stuck
    settings, share = pickle.load(sys.stdin.buffer)
    engine = VLLMEngine(settings, share=share)
    engine.places_tokens = False  # the parent places the tokens: this loop only feeds vLLM
    try:
        engine.start_sync()
    except Exception as error:  # noqa: BLE001 - handed to the parent, which raises it
        ours = isinstance(error, (EngineError, ConfigError))
        _tell_failure(address, type(error).__name__, str(error) if ours else f"{type(error).__name__}: {error}")
        sys.exit(1)
    serving = engine.schedule(_serve(engine, address))
    serving.add_done_callback(_served)
    # Our stdin is the lifeline: it ends when the parent closes it (after "close") or dies.
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(65536):
            pass
    serving.cancel()
    engine.close_sync()


def _served(serving: Any) -> None:
    """Serving ended: told to close (the parent closes our stdin next), or broken: then exit at once."""
    if serving.cancelled() or serving.exception() is None:
        return
    log.error("vLLM's process stops: its link to the service broke: %r", serving.exception())
    os._exit(1)


# What a start can fail with, raised here as the child raised it (a bad setting is the user's to fix).
START_FAILURES: dict[str, type[Exception]] = {error.__name__: error for error in (ConfigError, ModelNotPreparedError)}


def _start_failure(kind: str, message: str) -> Exception:
    """The error the parent raises for the child's failed start: its own kind where it is one of ours."""
    return START_FAILURES.get(kind, EngineError)(message)


def _tell_failure(address: str, kind: str, message: str) -> None:
    import zmq

    socket: Any = zmq.Context.instance().socket(zmq.PAIR)
    socket.setsockopt(zmq.LINGER, 5000)
    socket.connect(address)
    socket.send(pickle.dumps(("failed", 0, (kind, message))))
    socket.close()


async def _serve(engine: Any, address: str) -> None:
    import zmq
    import zmq.asyncio

    socket: Any = zmq.asyncio.Context.instance().socket(zmq.PAIR)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.connect(address)
    await _send(socket, ("ready", 0, None))
    running: dict[int, asyncio.Task[None]] = {}

    async def answer(number: int, ids: tuple[int, ...], request: GenerationRequest, stream: bool) -> None:
        try:
            if stream:
                async for text in engine.texts_here(ids, request):
                    await _send(socket, ("text", number, text))
                await _send(socket, ("done", number, None))
            else:
                await _send(socket, ("done", number, await engine.generate_here(ids, request)))
        except asyncio.CancelledError:
            await _send(socket, ("gone", number, None))
        except EngineError as error:
            await _send(socket, ("error", number, (isinstance(error, EngineDeadError), str(error))))
        except Exception as error:  # noqa: BLE001 - the parent raises it as the engine's error
            await _send(socket, ("error", number, (False, f"vLLM generation failed: {type(error).__name__}: {error}")))
        finally:
            running.pop(number, None)

    while True:
        kind, number, detail = pickle.loads(await socket.recv())
        if kind == "go":
            running[number] = asyncio.ensure_future(answer(number, *detail))
        elif kind == "stop" and number in running:
            running[number].cancel()
        elif kind == "close":
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
            socket.close(linger=1000)
            return


if __name__ == "__main__":
    _main(sys.argv[1])
