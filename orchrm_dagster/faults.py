"""Named points of the long steps where a fault test kills a process at a known moment (`kill -9`, from outside).

A test arms a point by creating `armed/<point>` under the folder named by `ORCHRM_FAULT_DIR` in the environment of
the processes it starts. The first process to reach an armed point takes it (a rename: one process of many), writes
its pid into `reached/<point>` and waits there to be killed; the test reads the pid and kills it, or the daemon's
whole process group. A point fires once. Without `ORCHRM_FAULT_DIR` (as everywhere but in these tests) a point costs
one lookup of the environment and does nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FAULT_DIR_ENV = "ORCHRM_FAULT_DIR"
WAIT_S = 600.0  # a point waits this long for its kill, then goes on (the test that armed it has failed by then)

# Every point, where it is and what a kill there interrupts
POINTS = {
    "run.worker_starting": "a run's worker loads the code location: the run is launched (STARTING), not yet STARTED",
    "round.heldout_sampling": "a round samples a policy's held-out plans",
    "round.heldout_execution": "a round executes its held-out plans in its environment",
    "round.generating": "a GRPO step samples its group's plans",
    "round.optimizer_step": "a GRPO step's optimizer step is about to change the weights",
    "round.trainer_checkpoint": "a trainer checkpoint is half written (the weights, not yet the trainer's state)",
    "round.policy_save": "the trained policy is half saved (the weights, not yet its tokenizer)",
    "publish.policy": "a round's checkpoint folder, manifest written, is about to be moved into the store",
    "round.promotion": "the round's verdict is in grpo_rounds, its checkpoint not yet in policy_checkpoints",
    "rollout.executing": "a rollout has executed and written one run of its plans",
}


def fault_point(point: str) -> None:
    """Waits here to be killed when a test armed `point` (see the module's doc); else returns at once."""
    folder = os.environ.get(FAULT_DIR_ENV)
    if not folder:
        return
    armed, reached = Path(folder, "armed", point), Path(folder, "reached", point)
    reached.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(armed, reached)
    except FileNotFoundError:  # not armed, or another process took it
        return
    reached.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.1)


def arm(folder: str | os.PathLike, point: str) -> None:
    """Arms `point` for the processes whose `ORCHRM_FAULT_DIR` is `folder`."""
    if point not in POINTS:
        raise KeyError(f"unknown fault point {point!r} (known: {', '.join(POINTS)})")
    armed = Path(folder, "armed", point)
    armed.parent.mkdir(parents=True, exist_ok=True)
    armed.touch()


def reached_by(folder: str | os.PathLike, point: str) -> int | None:
    """The pid of the process waiting at `point`, once one reached it; else None."""
    try:
        return int(Path(folder, "reached", point).read_text())
    except (FileNotFoundError, ValueError):  # not reached, or its pid not yet written
        return None
