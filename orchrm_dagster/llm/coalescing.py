"""One batch out of many threads: ``generate`` calls made at the same time by concurrent plan executions are
merged into one call of a backend that batches in-process (transformers, vLLM's engine).

A plan's sub-agents run one after another, so a single plan keeps the model at batch size 1 (or k, for SCAgent).
Executing several plans in threads and coalescing their calls fills the batch: on the 2-core CPU machine a batch
of 8 generates about 2x the tokens/s of one request at a time (``bench/llm_backends.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from orchrm_dagster.llm.base import ChatRequest, Completion, LLMBackend


@dataclass(eq=False)
class _Job:
    requests: list[ChatRequest]
    queued_at: float = field(default_factory=time.monotonic)
    completions: list[Completion] | None = None
    failure: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.completions is not None or self.failure is not None


class CoalescingBackend:
    """An :class:`LLMBackend` that merges concurrent ``generate`` calls into one call of ``inner``.

    Threads that take part register with :meth:`worker`. A batch starts as soon as every registered worker is
    waiting for one, or when the oldest waiting call has waited ``max_wait_s`` (a worker may be busy with
    something else, such as retrieval). One batch runs at a time, in the thread of one of its callers.
    """

    def __init__(self, inner: LLMBackend, max_wait_s: float = 0.1):
        self.inner = inner
        self.name = inner.name
        self.model_id = inner.model_id
        self.batches_in_process = False  # calls are merged here already: coalescing again gains nothing
        self.max_wait_s = max_wait_s
        self.batch_sizes: list[int] = []  # requests per call of inner.generate, for reports and tests
        self._cond = threading.Condition()
        self._pending: list[_Job] = []
        self._workers = 0
        self._busy = False

    @contextmanager
    def worker(self) -> Iterator[None]:
        with self._cond:
            self._workers += 1
        try:
            yield
        finally:
            with self._cond:
                self._workers -= 1
                self._cond.notify_all()

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        job = _Job(list(requests))
        with self._cond:
            self._pending.append(job)
            self._cond.notify_all()
            while not job.done:
                if not self._busy and self._ready():
                    batch, self._pending, self._busy = self._pending, [], True
                    break
                self._cond.wait(self._wait_left())
        if not job.done:
            self._run(batch)
        if job.failure is not None:
            raise job.failure
        return job.completions

    def _ready(self) -> bool:
        waited = time.monotonic() - self._pending[0].queued_at
        return len(self._pending) >= self._workers or waited >= self.max_wait_s

    def _wait_left(self) -> float | None:
        if self._busy or not self._pending:
            return None  # woken by the batch that runs now finishing, or by a new call
        return max(0.0, self.max_wait_s - (time.monotonic() - self._pending[0].queued_at))

    def _run(self, batch: list[_Job]) -> None:
        flat = [request for job in batch for request in job.requests]
        try:
            completions = self.inner.generate(flat)
            if len(completions) != len(flat):
                raise RuntimeError(f"{self.inner.name} returned {len(completions)} completions for {len(flat)} requests")
        except BaseException as exc:  # every caller of the batch hears of it, not only this thread
            for job in batch:
                job.failure = exc
        else:
            start = 0
            for job in batch:
                job.completions = completions[start:start + len(job.requests)]
                start += len(job.requests)
        with self._cond:
            self.batch_sizes.append(len(flat))
            self._busy = False
            self._cond.notify_all()
