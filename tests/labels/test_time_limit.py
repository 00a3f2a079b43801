import signal
import threading
import time

import pytest

from orchrm_dagster.labels import label_answer
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


def test_no_limit_and_no_error_off_the_main_thread():
    outcome = []

    def work():
        with time_limit(0.05):
            spin(0.2)
        outcome.append("finished")

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert outcome == ["finished"]
