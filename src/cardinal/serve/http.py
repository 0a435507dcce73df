"""``cardinal serve DIR``: predictions over HTTP with JSON, concurrent requests batched.

    POST /predict   {"rows": [TSV line, ...]}, {"labelled_rows": [...]} or {"examples": [{"I1": 3}, ...]}
                    -> {"probabilities": [0.031, ...], "step": 1200}     (``requests.py`` for the rules)
    GET  /healthz   200 while the process serves          GET /readyz   200 once a model is loaded
    GET  /metrics   Prometheus text: requests by status, latency and batch-size histograms,
                    predictions, ids looked up and ids never trained, the model's step, rows and
                    bytes, reloads

Requests are read within limits, parsed on the event loop in slices (``body.py``) and queued; one
model call at a time takes everything queued (up to ``max_batch`` examples) as one batch, on a
thread of its own (a batch of a few examples on the loop: the hand-off would cost what the call
does), while the next requests queue behind it: a lone request waits for nobody, and under load
the batches grow by themselves. A bad request is a 4xx naming what to change (413 past ``max_batch``
examples or ``max_body_mb``, 408 past ``body_timeout_s``); an error inside the server is a 500 for
the requests of that batch only. Connections are capped and their heads timed (``guard.py``), and
the process's warnings and errors rate-limited (``netguard.py``). With ``follow``, a thread polls
the training run and swaps in each newer model (``follow.py``; ``cardinal serve`` has it read in a
child process, ``follow_process.py``); a batch reads the model reference once, so it is all old or all new.
"""

import asyncio
import collections
import ctypes
import gc
import logging
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

from cardinal.netguard import ConnectionCap, rate_limit_logs
from cardinal.serve.body import read_rows
from cardinal.serve.guard import ServeLimits, busy_while_answered, listen
from cardinal.serve.export import LAYOUTS
from cardinal.serve.model import ServingModel
from cardinal.serve.requests import BadRequest, batch_rows

log = logging.getLogger("cardinal.serve")
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
BATCHER = web.AppKey("batcher", asyncio.Task)
INLINE = 32  # batches of at most this many examples run on the event loop itself
LINGER_S = 2.0  # after an answer that left a body unread, read and drop it this long before closing
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """The server's own registry (not the process-global one: tests run several servers)."""

    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("cardinal_serve_requests", "prediction requests answered, by HTTP status",
                                ["status"], registry=r)
        self.latency = Histogram("cardinal_serve_request_seconds", "time from a request's arrival to its answer",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.batch = Histogram("cardinal_serve_batch_examples", "examples in one model call",
                               buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384), registry=r)
        self.predictions = Counter("cardinal_serve_predictions", "examples predicted", registry=r)
        self.lookups = Counter("cardinal_serve_lookups", "ids looked up in the tables", registry=r)
        self.unknown = Counter("cardinal_serve_unknown_ids", "ids never trained (read as zeros)", registry=r)
        self.step = Gauge("cardinal_serve_model_step", "the training step of the served model", registry=r)
        self.rows = Gauge("cardinal_serve_table_rows", "rows of the served tables", registry=r)
        self.bytes = Gauge("cardinal_serve_table_bytes", "bytes of the served tables (ids and rows)", registry=r)
        self.reloads = Counter("cardinal_serve_reloads", "models swapped in from training, by result",
                               ["result"], registry=r)


class PredictionServer:
    def __init__(self, model: ServingModel, max_batch: int = 4096, follower=None, poll_s: float = 1.0,
                 limits: ServeLimits = ServeLimits()):
        if model.manifest["data_format"] not in LAYOUTS:
            raise ValueError(f"this export was trained on {model.manifest['data_format']!r} data; serving parses "
                             f"requests in the Criteo layout ({', '.join(LAYOUTS)} runs) only")
        if max_batch < 1:
            raise ValueError(f"--max-batch must be >= 1, got {max_batch}")
        if not poll_s > 0:
            raise ValueError(f"--poll must be > 0 seconds, got {poll_s}")
        if follower is not None and any(t.form == "saec" for t in model.tables.values()):
            raise ValueError("--follow: a saec export's clusters are fixed at export; follow training with an fp32, "
                             "fp16 or int8 export")
        self.model, self.max_batch, self.limits = model, max_batch, limits
        self.cap = ConnectionCap(limits.max_connections)
        self.follower, self.poll_s = follower, poll_s
        self.metrics = Metrics()
        self._describe(model)
        self._queue: collections.deque = collections.deque()  # (rows, future) of requests not yet in a batch
        self._queued: asyncio.Event | None = None
        self._calls = ThreadPoolExecutor(1, thread_name_prefix="predict")  # one model call at a time
        self._stop = threading.Event()
        self._ready = threading.Event()  # set once a model is served (and, following a run, the reload path warm)
        self._follow_thread: threading.Thread | None = None

    # --- the app -------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body, middlewares=[busy_while_answered(self.cap)])
        app.add_routes([web.post("/predict", self.predict), web.get("/healthz", self.healthz),
                        web.get("/readyz", self.readyz), web.get("/metrics", self.scrape)])
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _start(self, app) -> None:
        self._queued = asyncio.Event()
        app[BATCHER] = asyncio.get_running_loop().create_task(self._batches())
        if self.follower is None:
            self._ready.set()
        else:
            self._follow_thread = threading.Thread(target=self._follow, name="follow", daemon=True)
            self._follow_thread.start()

    async def _cleanup(self, app) -> None:
        self._stop.set()
        app[BATCHER].cancel()
        self._calls.shutdown(wait=True)
        if self._follow_thread is not None:  # a reload under way stops at its next link; a daemon, it ends with us
            self.follower.stop.set()
            self._follow_thread.join(timeout=1)

    async def healthz(self, request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(self, request) -> web.Response:
        ready = self._ready.is_set()
        return web.json_response({"ready": ready, "step": self.model.step}, status=200 if ready else 503)

    async def scrape(self, request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def predict(self, request) -> web.Response:
        start = time.perf_counter()
        try:
            rows = await read_rows(request, self.limits, self.max_batch)
            done = asyncio.get_running_loop().create_future()
            self._queue.append((rows, done))
            self._queued.set()
            probabilities, step = await done
            response = web.json_response({"probabilities": probabilities.tolist(), "step": step})
        except BadRequest as e:
            response = web.json_response({"error": str(e)}, status=e.status)
        except web.HTTPException as e:  # the body past client_max_size: aiohttp's 413
            response = web.json_response({"error": e.text}, status=e.status)
        except Exception as e:  # a bug or a failing model call: this request fails, the server goes on
            log.exception("prediction failed")
            response = web.json_response({"error": f"internal error: {type(e).__name__}: {e}"}, status=500)
        self.metrics.requests.labels(str(response.status)).inc()
        self.metrics.latency.observe(time.perf_counter() - start)
        return response

    # --- batching ------------------------------------------------------------------------

    async def _batches(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._queued.clear()
                await self._queued.wait()
            waiting = [self._queue.popleft()]
            n = len(waiting[0][0])
            while self._queue and n + len(self._queue[0][0]) <= self.max_batch:
                waiting.append(self._queue.popleft())
                n += len(waiting[-1][0])
            try:
                parts = [w[0] for w in waiting]
                if n <= INLINE:  # a few examples take ~0.2 ms: two thread hand-offs would cost as much
                    probabilities, step = self._call(parts)
                else:
                    probabilities, step = await loop.run_in_executor(self._calls, self._call, parts)
            except Exception as e:
                for _, done in waiting:
                    if not done.done():
                        done.set_exception(e)
                continue
            for (_, done), p in zip(waiting, np.split(probabilities, np.cumsum([len(w[0]) for w in waiting])[:-1])):
                if not done.done():  # a client gone meanwhile
                    done.set_result((p, step))

    def _call(self, parts) -> tuple[np.ndarray, int]:
        model = self.model  # read once: the whole batch sees one model
        before = (model.lookups, model.unknown)
        probabilities = model.predict(batch_rows(parts).to_batch())
        m = self.metrics
        m.batch.observe(len(probabilities))
        m.predictions.inc(len(probabilities))
        m.lookups.inc(model.lookups - before[0])
        m.unknown.inc(model.unknown - before[1])
        return probabilities, model.step

    def _describe(self, model: ServingModel) -> None:
        self.metrics.step.set(model.step)
        self.metrics.rows.set(sum(len(t) for t in model.tables.values()))
        self.metrics.bytes.set(sum(t.nbytes for t in model.tables.values()))

    # --- following training --------------------------------------------------------------

    def _follow(self) -> None:
        try:
            self.follower.warm(self.model)  # on this thread: its allocator arena is made now, not at the first reload
        except Exception as e:  # the served checkpoint gone since the export...: serve, and follow what comes
            log.warning("could not warm the reload path on the served checkpoint: %s", e)
        gc.collect()
        gc.freeze()  # what warming imported (onnx) stays out of the collector's passes too
        self._ready.set()
        while not self._stop.wait(self.poll_s):
            self.reload()

    def reload(self) -> bool:
        """Swap in the run's newest model if there is one; False (and the old model kept) otherwise."""
        try:
            new = self.follower.next_model(self.model)
        except Exception as e:  # a checkpoint deleted while read, a torn one...: keep serving, try again
            log.warning("reload failed, the served model stays at step %d: %s", self.model.step, e)
            self.metrics.reloads.labels("failed").inc()
            return False
        if new is None:
            return False
        old, self.model = self.model, new
        del old  # freed now, or by the last batch that still reads it
        self._describe(new)
        self.metrics.reloads.labels("ok").inc()
        log.info("serving the model of step %d", new.step)
        gc.collect()  # a reload read here leaves reference cycles (a store's tables); with the rest frozen, ~1 ms
        _libc_call("malloc_trim", 0)  # freed heap pages back to the system: memory flat across reloads
        return True


def _libc_call(name: str, *args) -> None:
    """A glibc memory call where there is one (Linux); elsewhere nothing."""
    try:
        getattr(ctypes.CDLL("libc.so.6"), name)(*args)
    except (OSError, AttributeError):
        pass


def serve(server: PredictionServer, host: str = "127.0.0.1", port: int = 8000) -> int:
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be in [0, 65535] (0: a free one), got {port}")
    """Run until SIGINT or SIGTERM; prints ``serving on http://HOST:PORT`` once it listens (port 0:
    a free one, the printed one)."""

    # A reload's thread holds the GIL in slices of this length between requests (default 5 ms)
    sys.setswitchinterval(0.0005)
    # Table-sized arrays are mapped, not carved from the heap, so each reload's old tables go back to
    # the system when freed (glibc otherwise raises this threshold after the first free of one)
    _libc_call("mallopt", M_MMAP_THRESHOLD, 1 << 20)
    # What is loaded now lives as long as the process: kept out of the cyclic collector's full passes,
    # which otherwise walk every torch and onnx object now and then and stall requests for tens of ms
    gc.freeze()

    rate_limit_logs()  # a flood of bad requests or connections writes a bounded log

    async def main():
        runner = web.AppRunner(server.app(), handle_signals=False, access_log=None, lingering_time=LINGER_S,
                               keepalive_timeout=server.limits.header_timeout_s)  # a whole head within it
        await runner.setup()
        listening = await listen(runner, host, port, server.cap)
        bound = listening.sockets[0].getsockname()[1]
        print(f"serving on http://{host}:{bound} (model of step {server.model.step})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        listening.close()
        await runner.cleanup()

    asyncio.run(main())
    return 0
