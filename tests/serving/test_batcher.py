"""The micro-batcher on its own: which requests share a batch, and where each answer and error goes."""

import asyncio
from dataclasses import dataclass

from orchrm_dagster.serving.batcher import Batcher


@dataclass(frozen=True)
class Job:
    name: str
    size: int


def run_batcher(jobs: list[Job], max_items: int, fail: str | None = None):
    """Submit `jobs` at once; returns (each job's result or exception, the batches scored: job names)."""
    batches = []

    def score(batch):
        batches.append([job.name for job in batch])
        return [ValueError(job.name) if job.name == fail else job.name.upper() for job in batch]

    async def main():
        batcher = Batcher(score, max_batch_items=max_items, max_wait_s=0.05)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit(job) for job in jobs), return_exceptions=True), batcher
        finally:
            await batcher.stop()

    results, batcher = asyncio.run(main())
    return results, batches, batcher.stats


def test_requests_arriving_together_share_batches_up_to_the_limit_in_order():
    jobs = [Job(name, size) for name, size in [("a", 3), ("b", 3), ("c", 3), ("d", 1)]]
    results, batches, stats = run_batcher(jobs, max_items=6)
    assert results == ["A", "B", "C", "D"]
    assert batches == [["a", "b"], ["c", "d"]]  # c would take the first batch to 9 inputs: it opens the next
    assert (stats.requests, stats.batches, stats.items, stats.largest_batch_requests) == (4, 2, 10, 2)


def test_a_request_larger_than_a_batch_is_scored_alone():
    results, batches, _ = run_batcher([Job("small", 1), Job("huge", 10), Job("tail", 1)], max_items=4)
    assert results == ["SMALL", "HUGE", "TAIL"]
    assert batches == [["small"], ["huge"], ["tail"]]


def test_an_error_reaches_only_its_own_request():
    results, batches, _ = run_batcher([Job("a", 1), Job("b", 1)], max_items=8, fail="b")
    assert results[0] == "A" and isinstance(results[1], ValueError) and batches == [["a", "b"]]


def test_a_failing_batch_fails_each_of_its_requests():
    def score(batch):
        raise RuntimeError("model gone")

    async def main():
        batcher = Batcher(score, max_batch_items=8, max_wait_s=0.01)
        batcher.start()
        try:
            return await asyncio.gather(batcher.submit(Job("a", 1)), batcher.submit(Job("b", 1)),
                                        return_exceptions=True)
        finally:
            await batcher.stop()

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and str(r) == "model gone" for r in results) and len(results) == 2
