"""CoalescingBackend: concurrent generate calls merged into one batch, results back to the right caller."""

import threading
import time

import pytest

from orchrm_dagster.llm.base import ChatRequest, Completion
from orchrm_dagster.llm.coalescing import CoalescingBackend


def ask(text: str) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": text},))


class EchoBackend:
    """Answers each request with its own text; records the size of every batch it is given."""

    name = "echo"
    model_id = "echo-model"

    def __init__(self, delay_s: float = 0.0, fail_on: str | None = None):
        self.delay_s = delay_s
        self.fail_on = fail_on
        self.batches: list[list[str]] = []
        self.active = 0
        self.most_active = 0

    def generate(self, requests):
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        texts = [r.messages[-1]["content"] for r in requests]
        self.batches.append(texts)
        time.sleep(self.delay_s)
        self.active -= 1
        if self.fail_on in texts:
            raise RuntimeError("model crashed")
        return [Completion(f"echo {t}", 1, 1) for t in texts]


def run_workers(backend: CoalescingBackend, work, n: int) -> list:
    results: list = [None] * n
    barrier = threading.Barrier(n)

    def worker(i):
        with backend.worker():
            barrier.wait()
            try:
                results[i] = work(i)
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return results


def test_calls_from_all_waiting_workers_become_one_batch_and_answers_go_back_to_their_callers():
    inner = EchoBackend()
    backend = CoalescingBackend(inner, max_wait_s=5.0)  # the batch must start because all 4 wait, not on a timer
    started = time.monotonic()
    results = run_workers(backend, lambda i: backend.generate([ask(f"q{i}a"), ask(f"q{i}b")]), 4)
    assert time.monotonic() - started < 2.0
    assert [[c.text for c in r] for r in results] == [[f"echo q{i}a", f"echo q{i}b"] for i in range(4)]
    assert len(inner.batches) == 1 and sorted(inner.batches[0]) == sorted(f"q{i}{s}" for i in range(4) for s in "ab")


def test_one_batch_at_a_time_and_later_calls_wait_for_the_next_batch():
    inner = EchoBackend(delay_s=0.05)
    backend = CoalescingBackend(inner, max_wait_s=0.5)

    def three_calls(i):
        return [backend.generate([ask(f"w{i}-{step}")])[0].text for step in range(3)]

    results = run_workers(backend, three_calls, 3)
    assert results == [[f"echo w{i}-{step}" for step in range(3)] for i in range(3)]
    assert inner.most_active == 1
    assert sum(len(b) for b in inner.batches) == 9 and max(len(b) for b in inner.batches) > 1


def test_a_worker_busy_elsewhere_delays_a_batch_by_at_most_max_wait():
    inner = EchoBackend()
    backend = CoalescingBackend(inner, max_wait_s=0.2)

    def timed_call():
        started = time.monotonic()
        return backend.generate([ask("x")]), time.monotonic() - started

    results = run_workers(backend, lambda i: timed_call() if i == 0 else time.sleep(2.0), 2)
    completions, waited = results[0]
    assert completions[0].text == "echo x" and inner.batches == [["x"]]
    assert 0.2 <= waited < 1.0  # the timer started the batch, not the other worker leaving after 2 s


def test_outside_a_worker_a_call_goes_straight_through():
    inner = EchoBackend()
    backend = CoalescingBackend(inner, max_wait_s=10.0)
    assert [c.text for c in backend.generate([ask("solo")])] == ["echo solo"]
    assert backend.generate([]) == [] and backend.batch_sizes == [1]


def test_a_failing_batch_raises_in_every_caller_and_the_next_batch_still_runs():
    inner = EchoBackend(fail_on="bad")
    backend = CoalescingBackend(inner, max_wait_s=5.0)
    results = run_workers(backend, lambda i: backend.generate([ask("bad" if i == 0 else f"ok{i}")]), 3)
    assert all(isinstance(r, RuntimeError) and "model crashed" in str(r) for r in results)
    assert [c.text for c in backend.generate([ask("after")])] == ["echo after"]


def test_a_backend_that_loses_completions_is_an_error_not_a_misrouted_answer():
    class Lossy(EchoBackend):
        def generate(self, requests):
            return super().generate(requests)[:-1]

    with pytest.raises(RuntimeError, match="returned 1 completions for 2 requests"):
        CoalescingBackend(Lossy()).generate([ask("a"), ask("b")])
