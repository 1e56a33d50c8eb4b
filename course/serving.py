"""A small model server with dynamic batching, and a load generator to measure it.

The pieces, from the model outwards:

* :class:`NextToken` wraps a ``course.llm`` decoder as a *batch function*: a list of prompts
  in, one ``{"token", "logit"}`` answer per prompt out, from one forward pass.
* :class:`Batcher` owns the queue. Each request's coroutine calls :meth:`Batcher.submit`
  and awaits a future; a scheduler task asks a *policy* (:func:`batch_one`, :func:`dynamic`,
  or your own) how many of the oldest waiting requests to run, and runs that batch in a
  single worker thread, so the event loop keeps accepting requests while the model works.
* :func:`make_app` puts a batcher behind HTTP (FastAPI): ``POST /v1/next_token``,
  ``GET /health``, ``GET /stats``.
* :class:`Server` runs the app with uvicorn on loopback in a background thread with its own
  event loop, so a notebook or a test can start it, send it load, and stop it.
* :func:`run_load` plays clients from a separate process (aiohttp): open loop (Poisson
  arrivals at a fixed rate) or closed loop (a fixed number of clients), and returns
  latencies and answers as a :class:`LoadResult`.

FastAPI, uvicorn, aiohttp and torch are imported inside the functions that use them, so the
policies and the batcher import with numpy alone. (No ``from __future__ import annotations``
here: FastAPI reads the endpoints' ``request: Request`` annotations at run time.)
"""
import asyncio
import collections
import json
import multiprocessing
import queue as queue_module
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

Policy = Callable[[Sequence[float], float], int]


# --------------------------------------------------------------------------- policies
def batch_one() -> Policy:
    """Run every request alone, as soon as the model is free: batches of size 1."""

    def policy(waiting: Sequence[float], now: float) -> int:
        return 1 if waiting else 0

    policy.__name__ = policy.__qualname__ = "batch_one()"
    return policy


def dynamic(max_batch: int, max_delay_s: float) -> Policy:
    """Run when ``max_batch`` requests wait, or when the oldest has waited ``max_delay_s``.

    The delay bounds what batching can add to a request's latency while the server is
    quiet; under load the queue fills to ``max_batch`` first and nobody waits for the timer.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    if max_delay_s < 0:
        raise ValueError(f"max_delay_s must be non-negative, got {max_delay_s}")

    def policy(waiting: Sequence[float], now: float) -> int:
        if not waiting:
            return 0
        if len(waiting) >= max_batch or now - waiting[0] >= max_delay_s:
            return min(len(waiting), max_batch)
        return 0

    policy.__name__ = policy.__qualname__ = f"dynamic({max_batch}, {max_delay_s})"
    return policy


# --------------------------------------------------------------------------- batcher
class _Entry:
    __slots__ = ("arrival", "item", "future")

    def __init__(self, arrival: float, item: Any, future: asyncio.Future) -> None:
        self.arrival = arrival
        self.item = item
        self.future = future


class Batcher:
    """Gathers requests into batches and runs them, one batch at a time, in a worker thread
    (the model call blocks; the event loop keeps accepting requests meanwhile).

    Every submitted request ends in exactly one of three counters: ``completed`` (its answer
    was delivered), ``cancelled`` (its awaiting task was cancelled first: dropped from the
    queue if still waiting, its answer discarded if its batch was running) or ``failed``
    (``run_batch`` raised, or the policy did). So after any load, once the queue is empty,
    ``submitted == completed + cancelled + failed``.
    """

    def __init__(self, run_batch: Callable[[list], list], policy: Policy, *,
                 max_batch: int, tick_s: float = 0.0005,
                 size_of: Callable[[Any], int] | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.run_batch = run_batch
        self.policy = policy
        # With size_of (say, len of a prompt), the policy sees (arrival, size) pairs and may
        # answer with the positions of the requests to run, not only "the k oldest".
        self.size_of = size_of
        self.max_batch = int(max_batch)
        self.tick_s = float(tick_s)
        self._waiting: collections.deque[_Entry] = collections.deque()
        self._running = 0
        self._counts = dict(submitted=0, completed=0, cancelled=0, failed=0)
        self._sizes: collections.Counter[int] = collections.Counter()
        # One worker thread: batches run one after another, as on one GPU.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batcher")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Future | None = None

    # The batcher is built outside any event loop (in a notebook or a test) and first used
    # inside the server's loop, so the scheduler task starts on the first submit. A new
    # loop (a server restarted with the same app) gets a new scheduler.
    def _ensure_scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._task is not None and not self._task.done():
            return
        if self._loop is not loop:
            # Entries of a loop that has stopped can never be answered.
            for entry in self._waiting:
                if entry.future.cancel():
                    self._counts["cancelled"] += 1
            self._waiting.clear()
            self._running = 0
        self._loop = loop
        self._wake = None
        self._task = loop.create_task(self._schedule())

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _sleep(self, timeout: float | None) -> None:
        """Sleep until the next arrival, or ``timeout`` seconds (None: until an arrival)."""
        self._wake = self._loop.create_future()
        await asyncio.wait({self._wake}, timeout=timeout)

    async def submit(self, item) -> Any:
        """Queue ``item`` and return its result once its batch has run."""
        self._ensure_scheduler()
        future = self._loop.create_future()
        entry = _Entry(time.perf_counter(), item, future)
        self._waiting.append(entry)
        self._counts["submitted"] += 1
        self._notify()
        try:
            return await future
        except asyncio.CancelledError:
            # Cancelling the awaiting task cancels `future` too, unless the scheduler has
            # already resolved it (then that answer was counted and is merely not read).
            if future.cancelled() or future.cancel():
                self._counts["cancelled"] += 1
                try:
                    self._waiting.remove(entry)  # still queued: it will not run
                except ValueError:
                    pass  # its batch is running: the scheduler skips its answer
            raise

    async def _schedule(self) -> None:
        loop = self._loop
        while True:
            if not self._waiting:
                await self._sleep(None)
                continue
            now = time.perf_counter()
            try:
                if self.size_of is None:
                    view = tuple(e.arrival for e in self._waiting)
                else:
                    view = tuple((e.arrival, self.size_of(e.item)) for e in self._waiting)
                picked = self._positions(self.policy(view, now))
            except Exception as exc:  # a broken policy fails the waiting requests, not the server
                self._fail(list(self._waiting), exc)
                self._waiting.clear()
                continue
            if not picked:
                await self._sleep(self.tick_s)
                continue
            n = len(picked)
            if picked == list(range(n)):
                batch = [self._waiting.popleft() for _ in range(n)]
            else:
                chosen = set(picked)
                batch = [self._waiting[k] for k in picked]
                self._waiting = collections.deque(e for k, e in enumerate(self._waiting) if k not in chosen)
            self._sizes[n] += 1
            self._running = n
            try:
                results = await loop.run_in_executor(
                    self._executor, self.run_batch, [e.item for e in batch])
                results = list(results)
                if len(results) != n:
                    raise RuntimeError(f"run_batch returned {len(results)} results for {n} items")
            except Exception as exc:
                self._fail(batch, exc)
            else:
                for entry, result in zip(batch, results):
                    if not entry.future.done():  # done here means cancelled: discard
                        entry.future.set_result(result)
                        self._counts["completed"] += 1
            finally:
                self._running = 0

    def _positions(self, answer) -> list[int]:
        """The queue positions a policy's answer names: an int k means the k oldest; a list
        names positions. Clipped to the queue and to max_batch, oldest first."""
        if isinstance(answer, (list, tuple, range)):
            wanted = sorted({int(k) for k in answer if 0 <= int(k) < len(self._waiting)})
        else:
            wanted = list(range(max(0, min(int(answer), len(self._waiting)))))
        return wanted[:self.max_batch]

    def _fail(self, entries: list[_Entry], exc: Exception) -> None:
        for entry in entries:
            if not entry.future.done():
                entry.future.set_exception(exc)
                self._counts["failed"] += 1

    def stats(self) -> dict:
        """Counters, batch-size histogram ({size: batches}), and what is queued or running now."""
        # Copy first (one C-level step each): another thread may read while the loop counts.
        counts, sizes = dict(self._counts), dict(self._sizes)
        batches = sum(sizes.values())
        items = sum(size * count for size, count in sizes.items())
        return dict(
            counts,
            batches=batches,
            mean_batch=items / batches if batches else 0.0,
            batch_sizes=dict(sorted(sizes.items())),
            queued=len(self._waiting),
            running=self._running,
        )


# --------------------------------------------------------------------------- model wrapper
class NextToken:
    """run_batch for a course.llm.Decoder: prompts (lists of token ids, lengths may differ)
    -> [{"token": int, "logit": float}] per prompt: one forward over the right-padded batch,
    logits read at each prompt's last position (right padding + causal attention leaves the
    real positions untouched). torch.inference_mode(); synchronizes before returning."""

    def __init__(self, model, device: str) -> None:
        import torch

        self.model = model
        self.device = torch.device(device)

    def __call__(self, prompts: list[list[int]]) -> list[dict]:
        import torch

        lengths = [len(p) for p in prompts]
        width = max(lengths)
        # Pad with token 0 on the right: causal attention never lets a real position see it.
        padded = [list(p) + [0] * (width - len(p)) for p in prompts]
        with torch.inference_mode():
            tokens = torch.tensor(padded, dtype=torch.long, device=self.device)
            last = torch.tensor(lengths, dtype=torch.long, device=self.device) - 1
            logits = self.model(tokens)  # batch, width, vocab
            rows = torch.arange(len(prompts), device=self.device)
            values, ids = logits[rows, last].float().max(dim=-1)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            ids, values = ids.tolist(), values.tolist()
        return [{"token": int(t), "logit": float(v)} for t, v in zip(ids, values)]


# --------------------------------------------------------------------------- HTTP app
def _parse_tokens(body: bytes, vocab: int, max_len: int) -> list[int]:
    """The request's token list, or ValueError with a message a client can act on."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "tokens" not in data:
        raise ValueError('body must be a JSON object {"tokens": [int, ...]}')
    tokens = data["tokens"]
    if not isinstance(tokens, list):
        raise ValueError('"tokens" must be a list of integers')
    if not 1 <= len(tokens) <= max_len:
        raise ValueError(f'"tokens" must hold 1 to {max_len} ids, got {len(tokens)}')
    for i, t in enumerate(tokens):
        # bool is a subclass of int in Python, and 3.0 is not a token id.
        if not isinstance(t, int) or isinstance(t, bool):
            raise ValueError(f'"tokens"[{i}] must be an integer, got {t!r}')
        if not 0 <= t < vocab:
            raise ValueError(f'"tokens"[{i}] = {t} is outside the vocabulary [0, {vocab})')
    return tokens


def make_app(batcher: Batcher, *, vocab: int, max_len: int):
    """A FastAPI app serving ``batcher``.

    ``POST /v1/next_token`` with ``{"tokens": [int, ...]}`` (1 to ``max_len`` ids, each in
    ``[0, vocab)``) answers ``{"token": int, "logit": float}``; bad input gets HTTP 422 with a
    message, a failing model HTTP 500. ``GET /health`` answers ``{"ok": true}``, ``GET /stats``
    the batcher's counters (JSON turns the batch-size keys into strings).
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.requests import ClientDisconnect

    app = FastAPI(title="next-token server")

    async def wait_for_disconnect(request: Request) -> None:
        # Once the body has been read, an ASGI server's receive() blocks until the client
        # goes away and then returns http.disconnect (the ASGI HTTP spec).
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    @app.post("/v1/next_token")
    async def next_token(request: Request):
        try:
            body = await request.body()
        except ClientDisconnect:
            return Response(status_code=499)  # client gone before sending its prompt
        try:
            tokens = _parse_tokens(body, vocab, max_len)
        except ValueError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=422)
        # Race the answer against the client leaving. uvicorn does not cancel a handler whose
        # client disconnects, so without the watcher a request that is still queued would
        # be run for nobody; with it, the batcher drops it from the queue.
        job = asyncio.ensure_future(batcher.submit(tokens))
        watcher = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (job, watcher):
                if not task.done():
                    task.cancel()
            await asyncio.gather(job, watcher, return_exceptions=True)
        if job.cancelled():
            return Response(status_code=499)  # nobody is listening; nginx's code for this
        exc = job.exception()
        if exc is not None:
            return JSONResponse({"detail": f"model failed: {type(exc).__name__}: {exc}"},
                                status_code=500)
        return job.result()

    @app.get("/health")
    async def health():
        return {"ok": True}

    @app.get("/stats")
    async def stats():
        return batcher.stats()

    return app


# --------------------------------------------------------------------------- server
class Server:
    """uvicorn serving `app` on 127.0.0.1 at a free port, in a background thread with its own
    event loop; usable from a notebook (whose own loop is already running) and from pytest."""

    def __init__(self, app, *, port: int = 0) -> None:
        self.app = app
        self.port = port
        self.url = ""
        self._server = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> "Server":
        """Start serving; returns once ``/health`` answers."""
        import uvicorn

        if self._thread is not None:
            raise RuntimeError("server already started")
        # Bind the socket here, so the port is known (port 0: the OS picks a free one) and
        # nobody can take it between choosing and listening.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)

        def serve() -> None:
            try:  # asyncio.run: a fresh event loop, owned by this thread
                asyncio.run(self._server.serve(sockets=[sock]))
            except BaseException as exc:  # uvicorn exits with SystemExit on startup failure
                self._error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=serve, name=f"uvicorn:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30.0
        while True:
            if not self._thread.is_alive():
                raise RuntimeError(f"server failed to start: {self._error!r}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0):
                    return self
            except urllib.error.HTTPError:
                return self  # it answers HTTP, even if this app has no /health
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"server at {self.url} did not answer within 30 s")
                time.sleep(0.02)

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish (up to 5 s), and join the thread."""
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=15.0)
        self._thread = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------- load generator
@dataclass
class LoadResult:
    latencies_s: np.ndarray   # one per answered request
    answers: list             # the JSON answers, in request order (None where failed)
    errors: int               # failed or timed-out requests
    sent: int
    duration_s: float         # first send to last answer

    @property
    def completed(self) -> int:
        return len(self.latencies_s)

    @property
    def throughput(self) -> float:
        """Answered requests per second."""
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def p50_s(self) -> float:
        return float(np.percentile(self.latencies_s, 50)) if self.completed else float("nan")

    @property
    def p99_s(self) -> float:
        return float(np.percentile(self.latencies_s, 99)) if self.completed else float("nan")


async def _load(url: str, prompts: list, rate: float | None, concurrency: int | None,
                timeout_s: float, seed: int) -> dict:
    import aiohttp

    n = len(prompts)
    answers: list = [None] * n
    latencies: list = [None] * n
    finished: list = [None] * n
    started: list = [None] * n
    endpoint = url.rstrip("/") + "/v1/next_token"
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def one(session, i: int, t0: float) -> None:
        started[i] = t0
        try:
            async with session.post(endpoint, json={"tokens": list(prompts[i])}) as resp:
                body = await resp.json(content_type=None)
                if resp.status == 200:
                    answers[i] = body
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            pass
        finished[i] = time.perf_counter()
        if answers[i] is not None:
            latencies[i] = finished[i] - t0

    # Open loop needs as many connections as requests in flight; closed loop needs one per
    # client. aiohttp's default pool of 100 would otherwise queue requests inside the client.
    connector = aiohttp.TCPConnector(limit=0 if rate is not None else concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if rate is not None:
            gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
            gaps[0] = 0.0
            start = time.perf_counter()
            due = start + np.cumsum(gaps)
            tasks = []
            for i in range(n):
                delay = due[i] - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                # Latency counts from the scheduled arrival, so a late client shows up in it.
                tasks.append(asyncio.ensure_future(one(session, i, float(due[i]))))
            await asyncio.gather(*tasks)
        else:
            indices = iter(range(n))

            async def client() -> None:
                for i in indices:  # shared iterator: each client takes the next prompt
                    await one(session, i, time.perf_counter())

            await asyncio.gather(*(client() for _ in range(min(concurrency, n) or 1)))
    sent = [s for s in started if s is not None]
    done = [f for f in finished if f is not None]
    return dict(
        latencies=[x for x in latencies if x is not None],
        answers=answers,
        errors=sum(a is None for a in answers),
        sent=len(sent),
        duration=(max(done) - min(sent)) if sent and done else 0.0,
    )


def _load_process(url, prompts, rate, concurrency, timeout_s, seed, out) -> None:
    """Entry point of the load-generator process: results go back through ``out``."""
    try:
        out.put(("ok", asyncio.run(_load(url, prompts, rate, concurrency, timeout_s, seed))))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def run_load(url: str, prompts: list[list[int]], *, rate: float | None = None,
             concurrency: int | None = None, timeout_s: float = 30.0) -> LoadResult:
    """Send every prompt once to ``url``'s ``/v1/next_token`` and measure.

    Exactly one of ``rate`` (open loop: Poisson arrivals at ``rate`` requests/s, fixed seed)
    or ``concurrency`` (closed loop: that many clients, each sending its next request when
    its last is answered). The clients run in a spawned process, so they do not compete with
    a server in this process for the interpreter lock.
    """
    if (rate is None) == (concurrency is None):
        raise ValueError("give exactly one of rate (open loop) or concurrency (closed loop)")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    prompts = [[int(t) for t in p] for p in prompts]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_load_process, daemon=True,
                       args=(url, prompts, rate, concurrency, timeout_s, 0, out))
    proc.start()
    try:
        # Read before join: a large result blocks the child until the queue is drained.
        while True:
            try:
                status, payload = out.get(timeout=0.5)
                break
            except queue_module.Empty:
                if not proc.is_alive():
                    raise RuntimeError(f"load generator died (exit code {proc.exitcode})")
    finally:
        proc.join(timeout=10.0)
        if proc.is_alive():
            proc.terminate()
    if status != "ok":
        raise RuntimeError(f"load generator failed: {payload}")
    return LoadResult(
        latencies_s=np.asarray(payload["latencies"], dtype=np.float64),
        answers=payload["answers"],
        errors=payload["errors"],
        sent=payload["sent"],
        duration_s=payload["duration"],
    )
