"""The opt-in dynamic batcher of one served model (``--max-batch N --max-queue-delay-ms T``).

Requests (already validated rows) queue; one worker thread takes the first waiting request, then
keeps adding waiting requests while the batch stays within ``max_batch`` rows and the first
request has waited less than ``max_queue_delay_ms``; it runs the batch in one runtime call and
hands each request its own rows of the result. A request larger than ``max_batch`` runs alone
(it is never split). Every row's result depends on that row only, so for files whose arithmetic
is exact (``exact`` in the metadata) batched results are identical to unbatched ones
(``tests/serve/test_batching.py``); a float file may differ in the last bit where the runtime
picks another kernel for another batch size.

``close()`` drains: the worker finishes every queued request before it stops; a request
submitted after ``close`` (one that fetched this model just before a reload swapped it) runs
directly on the caller's thread instead of failing.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from bnc_deploy.serve import metrics


class Batcher:
    """Queue + one worker thread; ``submit(rows) -> Future[(scores, labels)]``.

    ``run(rows) -> (scores (n, C), labels (n,))`` is the model's runtime call (it is called from
    the worker thread only, so a runtime that is not thread-safe needs no lock of its own here).
    """

    def __init__(
        self,
        run: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
        *,
        max_batch: int,
        max_queue_delay_ms: float,
        name: str = "model",
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._run, self.max_batch, self.name = run, int(max_batch), name
        self.delay = max(0.0, float(max_queue_delay_ms)) / 1000.0
        self._delay_ns = int(self.delay * 1e9)
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._metrics = metrics.ModelMetrics(name)
        self._thread = threading.Thread(target=self._worker, name=f"batcher-{name}", daemon=True)
        self._thread.start()

    def submit(self, rows: np.ndarray, record=None) -> Future:
        """Queue ``rows``; ``record`` (a :class:`~bnc_deploy.serve.statistics.InferRecord` or None)
        gets the request's queue and compute times, and its span their spans."""
        fut: Future = Future()
        with self._cond:
            if not self._closed:
                self._queue.append((rows, fut, time.perf_counter_ns(), record))
                self._cond.notify()
                return fut
        self._execute([(rows, fut, time.perf_counter_ns(), record)])  # closed: run on the caller's thread
        return fut

    def close(self, timeout: float | None = None) -> None:
        """Stop taking requests into the queue, finish the queued ones, stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _take(self) -> list | None:
        """The next batch (None when closed and drained)."""
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            batch = [self._queue.popleft()]
            rows = len(batch[0][0])
            deadline = batch[0][2] + self._delay_ns
            while rows < self.max_batch:
                if self._queue:
                    if rows + len(self._queue[0][0]) > self.max_batch:
                        break
                    item = self._queue.popleft()
                    batch.append(item)
                    rows += len(item[0])
                    continue
                left = deadline - time.perf_counter_ns()
                if left <= 0 or self._closed:
                    break
                self._cond.wait(left / 1e9)
            return batch

    def _worker(self) -> None:
        while (batch := self._take()) is not None:
            self._execute(batch)

    def _execute(self, batch: list) -> None:
        start = time.perf_counter_ns()
        for _, _, queued, _ in batch[1:]:
            self._metrics.queue.observe((start - queued) / 1e9)
        try:
            x = batch[0][0] if len(batch) == 1 else np.concatenate([b[0] for b in batch])
            scores, labels = self._run(x)
        except BaseException as exc:  # noqa: BLE001 - every waiting request gets the error
            for _, fut, _, _ in batch:
                fut.set_exception(exc)
            return
        end = time.perf_counter_ns()
        self._metrics.observe_run((start - batch[0][2]) / 1e9, (end - start) / 1e9, len(x))
        counted = False  # the batch's one runtime call goes to the first request with a record
        pos = 0
        for rows, fut, queued, record in batch:
            n = len(rows)
            if record is not None:
                record.ran(queued, start, end, len(x), 0 if counted else 1)
                counted = True
            fut.set_result((scores[pos : pos + n], labels[pos : pos + n]))
            pos += n
