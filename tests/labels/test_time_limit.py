import signal
import threading
import time

import pytest

from orchrm_dagster.labels import label_answer, math_labeler
from orchrm_dagster.labels.time_limit import LabelTimeout, time_limit


@pytest.fixture
def outer_timer():
    """Arm a pending ITIMER_REAL like pytest-timeout or a job watchdog would."""
    saved_handler = signal.getsignal(signal.SIGALRM)
    saved_timer = signal.getitimer(signal.ITIMER_REAL)
    fired = []
    signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    yield fired
    signal.setitimer(signal.ITIMER_REAL, *saved_timer)
    signal.signal(signal.SIGALRM, saved_handler)


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_limit_interrupts_slow_work_in_main_thread():
    started = time.monotonic()
    with pytest.raises(LabelTimeout):
        with time_limit(0.2):
            spin(5)
    assert time.monotonic() - started < 2


def test_labeling_keeps_an_outer_timer_armed(outer_timer):
    handler = signal.getsignal(signal.SIGALRM)
    assert label_answer("math", "\\frac{14}{3}", "14/3").is_correct
    remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    assert 90 < remaining <= 100
    assert signal.getsignal(signal.SIGALRM) is handler
    assert outer_timer == []


def test_outer_timer_that_expires_during_the_limit_still_fires(outer_timer):
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    with pytest.raises(LabelTimeout):
        with time_limit(5):
            spin(1)
    spin(0.05)
    assert outer_timer == [signal.SIGALRM]


def run_in_thread(work):
    outcome = []

    def record():
        try:
            outcome.append(work())
        except LabelTimeout:
            outcome.append("timed out")

    worker = threading.Thread(target=record)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    return outcome[0], time.monotonic() - started


def test_limit_interrupts_slow_work_in_a_worker_thread():
    def slow():
        with time_limit(0.2):
            spin(5)
        return "finished"

    outcome, elapsed = run_in_thread(slow)
    assert outcome == "timed out"
    assert elapsed < 2


def test_fast_work_in_a_worker_thread_is_not_interrupted_later():
    def fast():
        with time_limit(0.1):
            pass
        spin(0.4)  # past the deadline, outside the limit
        return "finished"

    assert run_in_thread(fast)[0] == "finished"


# The interrupt may land in a weakref callback, where Python prints and drops
# it; time_limit re-raises until the work stops, so that is expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_slow_sympy_comparison_in_a_worker_thread_times_out(monkeypatch):
    monkeypatch.setattr(math_labeler, "TIME_LIMIT_S", 1.0)
    verdict, elapsed = run_in_thread(lambda: label_answer("math", "\\frac{1}{2}", "$\\frac{\\binom{1000}{x}}{\\pi}$"))
    assert not verdict.is_correct
    assert verdict.reason == "math-verify error: timed out after 1s"
    assert elapsed < 10
