"""Where a round is: its phase, how far into it (step k of N, held-out plans k of M) and an estimate of what remains,
said when a phase starts and at least every `every_s` seconds while it runs (the round's log: the CLI's line and the
UI's run log through Dagster Pipes).

The round opens a progress (`reporting`); code anywhere below it says what it starts (`begin`) and how far it got
(`advance`), which costs nothing outside one. A phase's rate (seconds per unit) is kept by its kind, so a later phase
of the same kind (the new policy's held-out plans after the starting policy's) is estimated before it starts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from orchrm_dagster.faults import fault_point
from orchrm_dagster.reporting import duration


@dataclass(frozen=True)
class Planned:
    """A phase the round still has ahead: its kind (rates are kept by kind) and its size."""

    kind: str
    total: int


class RoundProgress:
    def __init__(self, say: Callable[[str], None], label: str, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.say, self.label, self.every_s, self.clock = say, label, every_s, clock
        self.lock = threading.Lock()
        self.ahead: list[Planned] = []
        self.rates: dict[str, float] = {}  # kind -> seconds per unit, measured
        self.phase: str | None = None
        self.kind, self.unit, self.total, self.done, self.started = "", "", 0, 0, 0.0
        self.said = self.clock()

    def plan(self, phases: Sequence[Planned]) -> None:
        """The phases the round will go through, in order (each `begin` takes the first of its kind off)."""
        with self.lock:
            self.ahead = list(phases)

    def begin(self, phase: str, kind: str, total: int, unit: str) -> None:
        with self.lock:
            self._end_phase()
            index = next((i for i, p in enumerate(self.ahead) if p.kind == kind), None)
            if index is not None:
                del self.ahead[index]
            self.phase, self.kind, self.unit, self.total, self.done = phase, kind, unit, total, 0
            self.started = self.clock()
            self._say()

    def advance(self, done: int = 1, to: int | None = None) -> None:
        with self.lock:
            self.done = min(self.total, to if to is not None else self.done + done)
            if self.done == self.total or self.clock() - self.said >= self.every_s:
                self._say()

    def heartbeat(self) -> None:
        """Says where the round is if nothing was said for `every_s` seconds."""
        with self.lock:
            if self.phase is not None and self.clock() - self.said >= self.every_s:
                self._say()

    def line(self) -> str:
        with self.lock:
            return self._line()

    def _end_phase(self) -> None:
        if self.phase is not None and self.done:
            self.rates[self.kind] = (self.clock() - self.started) / self.done

    def _say(self) -> None:
        self.said = self.clock()
        self.say(self._line())

    def _line(self) -> str:
        elapsed = self.clock() - self.started
        text = f"{self.label}: {self.phase}: {self.done} of {self.total} {self.unit} ({duration(elapsed)}"
        rate = elapsed / self.done if self.done else self.rates.get(self.kind)
        if rate is None:
            return text + ")"
        here = rate * (self.total - self.done)
        ahead = [self.rates.get(p.kind, rate if p.kind == self.kind else None) for p in self.ahead]
        known = sum(r * p.total for r, p in zip(ahead, self.ahead) if r is not None)
        whole = ("" if None in ahead else f", about {duration(here + known)} left in the round") if self.ahead else ""
        return text + f", about {duration(here)} left in it{whole})"


_CURRENT: ContextVar[RoundProgress | None] = ContextVar("orchrm_round_progress", default=None)


@contextmanager
def reporting(say: Callable[[str], None], label: str, every_s: float = 30.0) -> Iterator[RoundProgress]:
    """A progress for the work inside, with a thread that says where it is at least every `every_s` seconds."""
    progress = RoundProgress(say, label, every_s)
    token = _CURRENT.set(progress)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(min(5.0, every_s / 2)):
            progress.heartbeat()

    thread = threading.Thread(target=beat, name="round-progress", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()
        _CURRENT.reset(token)


def begin(phase: str, kind: str, total: int, unit: str) -> None:
    """A phase starts in the current progress (nothing without one)."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.begin(phase, kind, total, unit)


def advance(done: int = 1, to: int | None = None) -> None:
    """`done` more units of the current phase are done (or `to` of them, in all)."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.advance(done, to)


def plan(phases: Sequence[Planned]) -> None:
    progress = _CURRENT.get()
    if progress is not None:
        progress.plan(phases)


def step_callback():
    """A transformers TrainerCallback that reports the trainer's optimizer steps as the current phase: `training`,
    step k of max_steps (a resumed training starts at its checkpoint's step)."""
    from transformers import TrainerCallback

    class ReportSteps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            begin("training", "training", state.max_steps, "optimizer steps")
            if state.global_step:
                advance(to=state.global_step)

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            fault_point("round.optimizer_step")

        def on_step_end(self, args, state, control, **kwargs):
            advance(to=state.global_step)

    return ReportSteps()
