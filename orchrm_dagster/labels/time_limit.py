"""A wall-clock limit for sympy work, usable from any thread.

math-verify's own timeouts call signal.alarm(n) around every parse and every
comparison. That raises ValueError outside the main thread, and in the main
thread it silently cancels any timer already armed (pytest-timeout, a job
runner's watchdog). We pass None to math-verify and use this instead:

* main thread: one ITIMER_REAL budget per label, re-arming whatever timer was
  pending before;
* other threads: a watchdog thread that raises LabelTimeout inside the
  labeling thread via PyThreadState_SetAsyncExc (CPython only).

Neither can interrupt a single long C call (e.g. a huge integer power); the
size guard in math_size screens those out before comparison.
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator


class LabelTimeout(BaseException):
    """Raised when the limit expires.

    A BaseException on purpose: math-verify and sympy wrap their internals in
    `except Exception`, which would swallow the interrupt and keep computing.
    """


_PYTHON_API = getattr(ctypes, "pythonapi", None)
# Keep interrupting after the deadline: an exception that lands inside a
# __del__ or weakref callback is printed and dropped, and the work goes on.
_REPEAT_S = 0.25


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    if not seconds:
        yield
    elif threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        with _signal_limit(seconds):
            yield
    elif _PYTHON_API is not None:
        with _watchdog_limit(seconds):
            yield
    else:
        yield


@contextmanager
def _signal_limit(seconds: float) -> Iterator[None]:
    previous_handler = signal.getsignal(signal.SIGALRM)
    outer_remaining, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    active = [True]

    def on_alarm(signum, frame):
        # If the outer timer was due first it is re-armed (almost expired) below.
        if active[0]:
            raise LabelTimeout(f"took longer than {seconds:g}s")

    signal.signal(signal.SIGALRM, on_alarm)
    first = min(seconds, outer_remaining) if outer_remaining else seconds
    signal.setitimer(signal.ITIMER_REAL, first, _REPEAT_S)
    try:
        yield
    finally:
        # Nested so the outer timer is restored even if an alarm lands here.
        try:
            active[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            active[0] = False
            _restore_outer_timer(previous_handler, outer_remaining, outer_interval, started)


def _restore_outer_timer(previous_handler, outer_remaining: float, outer_interval: float, started: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    # getsignal() returns None for a handler installed outside Python.
    signal.signal(signal.SIGALRM, signal.SIG_DFL if previous_handler is None else previous_handler)
    if outer_remaining:
        left = outer_remaining - (time.monotonic() - started)
        signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), outer_interval)


@contextmanager
def _watchdog_limit(seconds: float) -> Iterator[None]:
    thread_id = threading.get_ident()
    lock = threading.Lock()
    done = threading.Event()
    state = {"active": True, "fired": False}

    def interrupt_until_done() -> None:
        pause = seconds
        while not done.wait(pause):
            with lock:
                if not state["active"]:
                    return
                state["fired"] = True
                _raise_in_thread(thread_id, LabelTimeout)
            pause = _REPEAT_S

    watchdog = threading.Thread(target=interrupt_until_done, name="label-time-limit", daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        with lock:
            state["active"] = False
            if state["fired"]:
                _raise_in_thread(thread_id, None)  # withdraw it if not delivered yet
        done.set()


def _raise_in_thread(thread_id: int, exception_type: type[BaseException] | None) -> None:
    target = ctypes.py_object(exception_type) if exception_type is not None else None
    _PYTHON_API.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), target)
