"""Micro-batching: requests that arrive together are scored in one call of the reward model.

The first request of a batch waits up to `max_wait_s` for others; a batch closes earlier when the next request
would take it past `max_batch_items` inputs (a request larger than that is scored alone). Scoring runs on one worker
thread, so the event loop keeps accepting requests, which queue up and form the next batch while a batch scores.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    @property
    def size(self) -> int: ...


Job = TypeVar("Job", bound=Sized)
Result = TypeVar("Result")


@dataclass
class BatchStats:
    requests: int = 0
    batches: int = 0
    items: int = 0
    largest_batch_requests: int = 0


class Batcher(Generic[Job, Result]):
    """`await submit(job)` returns `score_batch(jobs)[i]` for the job, `score_batch` being called with every job of
    its batch; an exception `score_batch` raises (or returns in a job's place) reaches the jobs it concerns."""

    def __init__(self, score_batch: Callable[[Sequence[Job]], Sequence[Result | BaseException]],
                 max_batch_items: int, max_wait_s: float):
        self.score_batch = score_batch
        self.max_batch_items = max_batch_items
        self.max_wait_s = max_wait_s
        self.stats = BatchStats()
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scoring")
        self._carried: tuple | None = None  # a request that did not fit the last batch: first of the next

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def submit(self, job: Job) -> Result:
        future = asyncio.get_running_loop().create_future()
        self.stats.requests += 1
        await self._queue.put((job, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect(loop)
            live = [(job, future) for job, future in batch if not future.done()]  # a client that left is skipped
            if not live:
                continue
            self.stats.batches += 1
            self.stats.items += sum(job.size for job, _ in live)
            self.stats.largest_batch_requests = max(self.stats.largest_batch_requests, len(live))
            try:
                results = await loop.run_in_executor(self._executor, self.score_batch, [job for job, _ in live])
            except Exception as error:
                results = [error] * len(live)
            for (_, future), result in zip(live, results):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    async def _collect(self, loop) -> list[tuple]:
        first, self._carried = self._carried or await self._queue.get(), None
        batch, items = [first], first[0].size
        deadline = loop.time() + self.max_wait_s
        while items < self.max_batch_items:
            try:
                remaining = deadline - loop.time()
                entry = (self._queue.get_nowait() if remaining <= 0
                         else await asyncio.wait_for(self._queue.get(), remaining))
            except (asyncio.QueueEmpty, TimeoutError):
                break
            if items + entry[0].size > self.max_batch_items:
                self._carried = entry
                break
            batch.append(entry)
            items += entry[0].size
        return batch
