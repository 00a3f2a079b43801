"""kill -9 during the loop's rounds, under the real `dagster-daemon run` (the slow test and `bench/round_kills.py`).

The loop runs in the simulated environment with small rounds (tests/daemon_location.py): held-out plans executed
there, a trainer checkpoint after every step, and an accuracy gate whose margin (1.0) promotes every round so that
each rolls out (its held-out accuracy is measured and recorded as ever). A kill is either of the daemon's whole process group (the daemon,
its code server, the run workers and their training processes: a machine that went down), after which the loop is
started again as a user would (`dagster-daemon run`), or of the round's own training process alone (the OOM killer),
after which the daemon goes on by itself. Kills land at named points (`orchrm_dagster.faults`: the process waits at
the point for its kill) or at random moments. After each kill the invariants are checked (`check_invariants`)."""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from orchrm_dagster.faults import FAULT_DIR_ENV, arm, reached_by
from tests.conftest import gone
from tests.test_daemon_loop import TIMEOUT_S, Daemon, batch, value

DAEMON, TRAINING = "the daemon's process group", "the training process"

# Each point of a round and of its rollout, in the order a round reaches them, with what is killed there
FIXED_KILLS: tuple[tuple[str, str], ...] = (
    ("round.heldout_sampling", TRAINING),
    ("round.heldout_execution", DAEMON),
    ("round.generating", TRAINING),
    ("round.optimizer_step", DAEMON),
    ("round.trainer_checkpoint", TRAINING),
    ("round.policy_save", DAEMON),
    ("publish.policy", TRAINING),
    ("round.promotion", DAEMON),
    ("rollout.executing", DAEMON),
)
# The kills CI's test makes: all but the two of the training process before a round has written anything (held-out
# sampling, generating), whose recovery (the step failed with how it died, the round asked again from its start) the
# kill at publish.policy goes through too; bench/round_kills.py and tests/test_training_process.py kill there
CI_KILLS = tuple(kill for kill in FIXED_KILLS if kill[0] not in ("round.heldout_sampling", "round.generating"))


def loop_environment(faults: Path, rounds: int, attempts: int) -> dict[str, str]:
    """What tests/daemon_location.py reads: the simulated loop, its knobs for these kills, the fault folder."""
    return {"ORCHRM_TEST_ENVIRONMENT": "simulated", "ORCHRM_TEST_ACCURACY_MARGIN": "1.0",
            "ORCHRM_TEST_CHECKPOINT_MINUTES": "0", "ORCHRM_TEST_ROUNDS": str(rounds),
            "ORCHRM_TEST_RETRAIN_MIN_NEW_PAIRS": "1000000",  # the champion stays: the next round starts sooner
            "ORCHRM_TEST_ATTEMPTS": str(attempts), FAULT_DIR_ENV: str(faults)}


@dataclass
class Kill:
    what: str  # a point's name, or "random after N s"
    target: str  # DAEMON or TRAINING
    processes: int  # how many processes it ended
    waited_s: float = 0.0  # from the kill before (or the rounds' start) to this one: recovery and the work between


@dataclass
class RoundKills:
    daemon: Daemon
    faults: Path
    kills: list[Kill] = field(default_factory=list)

    def start_rounds(self, tmp_path: Path) -> None:
        """History landed, a champion crowned, then the rounds switched on (as from the UI)."""
        self.daemon.land(tmp_path, "first.jsonl", batch(160, seed=1, first_problem=80))
        self.wait("a champion", lambda: value(self.daemon.query(
            "select count(*) n from rm_checkpoints where is_champion")) == 1)
        self.daemon.dagster("sensor", "start", "grpo_loop_sensor")

    def kill_at(self, point: str, target: str) -> Kill:
        """Arms `point`, waits for a process to reach it, kills `target` there, and restarts the daemon if it was
        killed; the invariants are checked while nothing runs."""
        arm(self.faults, point)
        waited = self.wait(f"a process at {point}", lambda: reached_by(self.faults, point) is not None)
        kill = self._kill(point, target, reached_by(self.faults, point))
        kill.waited_s = waited
        return kill

    def kill_randomly(self, rng: random.Random, target: str, within_s: tuple[float, float]) -> Kill:
        """Kills `target` a random time into the next round's training process (or the daemon group then)."""
        waited = self.wait("a round's training process", lambda: self.training_process() is not None)
        delay = rng.uniform(*within_s)
        time.sleep(delay)
        training = self.training_process()
        if training is None:  # the round ended first: nothing to kill this time
            self.kills.append(Kill(f"random, {delay:.0f} s into a round (it had ended)", target, 0, waited + delay))
            return self.kills[-1]
        kill = self._kill(f"random, {delay:.0f} s into a round", target, training.pid)
        kill.waited_s = waited + delay
        return kill

    def _kill(self, what: str, target: str, pid: int | None) -> Kill:
        if target == DAEMON:
            family = self._family(self.daemon.process.pid)
            os.killpg(self.daemon.process.pid, signal.SIGKILL)
            self.daemon.process.wait(30)
        else:
            assert pid is not None, f"no training process to kill at {what}"
            family = self._family(pid)
            os.kill(pid, signal.SIGKILL)
        assert_they_die(family, what)
        check_invariants(self.daemon)
        if target == DAEMON:
            self.daemon.restart()  # as a user would: dagster-daemon run again
        kill = Kill(what, target, len(family))
        self.kills.append(kill)
        return kill

    def training_process(self) -> psutil.Process | None:
        """The round's training process (`python -m orchrm_dagster.app.training_process`), once one runs."""
        for process in self._family(self.daemon.process.pid):
            try:
                if "orchrm_dagster.app.training_process" in " ".join(process.cmdline()):
                    return process
            except psutil.NoSuchProcess:
                continue
        return None

    @staticmethod
    def _family(pid: int) -> list[psutil.Process]:
        try:
            parent = psutil.Process(pid)
            return [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def wait(self, what: str, condition) -> float:
        started = time.monotonic()
        timings: dict[str, float] = {}
        self.daemon.wait(what, condition, timings, started)
        return timings[what]


def assert_they_die(processes: list[psutil.Process], what: str, within_s: float = 60) -> None:
    """Every process of the killed one's family ends (the training process dies with its run worker)."""
    deadline = time.monotonic() + within_s
    alive = list(processes)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if not gone(p)]
    assert not alive, f"after the kill at {what}, still running: {[' '.join(p.cmdline()[:4]) for p in alive]}"


def check_invariants(daemon: Daemon) -> None:
    """What must hold after any kill: each round once in grpo_rounds; each checkpoint in policy_checkpoints promoted
    exactly by its own round's recorded verdict; the checkpoint in use exists whole (its folder and manifest); every
    rollout run landed once."""
    from orchrm_dagster.grpo import read_table
    from orchrm_dagster.grpo.checkpoints import policy_store
    from orchrm_dagster.storage import MANIFEST

    root = daemon.root()
    rounds = read_table(root, "grpo_rounds")
    numbers = [r["round"] for r in rounds]
    assert len(numbers) == len(set(numbers)), f"a round appears twice in grpo_rounds: {numbers}"
    verdicts = {r["round"]: r for r in rounds}
    checkpoints = read_table(root, "policy_checkpoints")
    for checkpoint in checkpoints:
        own = verdicts.get(checkpoint["round"])
        assert own is not None, f"{checkpoint['name']} is registered without its round's verdict"
        assert checkpoint["promoted"] == own["promoted"], f"{checkpoint['name']} promoted against its verdict"
    in_use = [c for c in checkpoints if c["in_use"]]
    assert len(in_use) <= 1, in_use
    for checkpoint in in_use:
        folder = policy_store(root).folder(checkpoint["round"])
        assert (folder / MANIFEST).is_file() and any(folder.glob("*.safetensors")), f"{folder} is not whole"
    repeated = daemon.query("select count(*) - count(distinct run_id) n from runs")
    assert value(repeated) in (None, 0), f"a run landed twice: {repeated}"


def wait_for_rounds(kills: RoundKills, rounds: int) -> None:
    """The loop reaches its round count: every round recorded, its checkpoint registered and its run succeeded (the
    round's row is written before its run ends: plots and metadata follow)."""
    import dagster as dg

    def done() -> bool:
        with dg.DagsterInstance.get() as instance:
            succeeded = {run.tags.get("orchrm/step") for run in instance.get_runs(dg.RunsFilter(
                job_name="grpo_round_job", statuses=[dg.DagsterRunStatus.SUCCESS]))}
        return (value(kills.daemon.query("select count(*) n from grpo_rounds")) == rounds
                and value(kills.daemon.query("select count(*) n from policy_checkpoints")) == rounds
                and succeeded >= {f"round:{n}" for n in range(1, rounds + 1)})

    kills.wait(f"{rounds} rounds", done)


def no_process_left(daemon: Daemon) -> list[str]:
    """Processes of killed runs still running: any training process or run worker not under the live daemon."""
    live = {p.pid for p in RoundKills._family(daemon.process.pid)}
    left = []
    for process in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            if process.pid in live or process.pid == os.getpid():
                continue
            env = process.info.get("environ") or {}
            if env.get("DAGSTER_HOME") == str(daemon.home):
                left.append(" ".join(process.info["cmdline"] or [])[:120])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return left


__all__ = ["CI_KILLS", "DAEMON", "FIXED_KILLS", "TIMEOUT_S", "TRAINING", "RoundKills", "check_invariants", "loop_environment",
           "no_process_left", "wait_for_rounds"]
