"""Where a round's seconds go: named phases timed where they happen (sampling plans, rewards, the reference model's
and the policy's forward passes, checkpoints, held-out sampling and execution...), each phase's own time (a phase
inside another is taken out of the outer one), so the phases add up to the round's wall time.

The round opens a profile (`profiled`); code anywhere below it times its work with `phase`, which costs nothing
outside a profile. A profile is per thread of control (a context variable): two rounds never share one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class Profile:
    seconds: dict[str, float] = field(default_factory=dict)  # each phase's own seconds
    _open: list[list] = field(default_factory=list)  # [name, started, seconds of the phases inside it]

    def table(self) -> list[tuple[str, float, float]]:
        """(phase, seconds, share of the total), the largest first."""
        total = sum(self.seconds.values()) or 1.0
        return [(name, s, s / total) for name, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])]

    def markdown(self) -> str:
        rows = [f"| {name} | {seconds:.1f} | {share:.0%} |" for name, seconds, share in self.table()]
        return "\n".join(["| phase | seconds | share |", "|---|---|---|", *rows])


_CURRENT: ContextVar[Profile | None] = ContextVar("orchrm_round_profile", default=None)


def current_seconds(total: float, outside: str = "round (other)") -> dict[str, float]:
    """The open profile's phases so far, with what `total` seconds they leave as `outside` (empty without one)."""
    profile = _CURRENT.get()
    if profile is None:
        return {}
    inner = {name: seconds for name, seconds in profile.seconds.items() if name != outside}
    return {**inner, outside: max(0.0, total - sum(inner.values()))}


@contextmanager
def profiled(name: str = "round (other)") -> Iterator[Profile]:
    """A new profile for the work inside; its own time outside every phase is `name`'s."""
    profile = Profile()
    token = _CURRENT.set(profile)
    try:
        with phase(name):
            yield profile
    finally:
        _CURRENT.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Times the work inside as `name` in the current profile (nothing without one)."""
    profile = _CURRENT.get()
    if profile is None:
        yield
        return
    entry = [name, time.perf_counter(), 0.0]
    profile._open.append(entry)
    try:
        yield
    finally:
        profile._open.pop()
        elapsed = time.perf_counter() - entry[1]
        profile.seconds[name] = profile.seconds.get(name, 0.0) + elapsed - entry[2]
        if profile._open:
            profile._open[-1][2] += elapsed
