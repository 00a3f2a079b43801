"""kill -9 at each named point of a GRPO round and of its rollout (the daemon's process group, or the round's own
training process), then at a random moment of the next round, under the real `dagster-daemon run` restarted as a
user would: each round is in grpo_rounds once, a checkpoint is promoted only whole and by its own verdict, the
checkpoint in use exists, rollouts land each run once, no process of a killed run is left, and the loop reaches
its round count (tests/round_kills.py)."""

from __future__ import annotations

import random

import dagster as dg
import pytest

from assets.loop import run_failure_cause

from tests.round_kills import (CI_KILLS, DAEMON, TRAINING, RoundKills, check_invariants, loop_environment,
                               no_process_left, wait_for_rounds)
from tests.test_daemon_loop import Daemon, tiny, value  # noqa: F401 (tiny: a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def test_kill_9_at_every_point_of_a_round_and_its_rollout_then_at_random(tmp_path, tiny, monkeypatch):  # noqa: F811
    for name, setting in loop_environment(tmp_path / "faults", rounds=2, attempts=20).items():
        monkeypatch.setenv(name, setting)
    daemon = Daemon(tmp_path, tiny, attempts=20)
    kills = RoundKills(daemon, tmp_path / "faults")
    try:
        kills.start_rounds(tmp_path)
        for point, target in CI_KILLS:  # in the order a round reaches them (each needs the progress before it)
            kills.kill_at(point, target)
        rng = random.Random(45)
        kills.kill_randomly(rng, rng.choice((DAEMON, TRAINING)), (3.0, 30.0))
        wait_for_rounds(kills, 2)
        check_invariants(daemon)
        rounds = daemon.query("select * from grpo_rounds order by round")
        assert [r["round"] for r in rounds] == [1, 2] and all(r["promoted"] for r in rounds)
        assert rounds[1]["start_policy"] == "grpo-r0001"  # round 2 continued from round 1's checkpoint
        for row in rounds:  # each gated on its held-out plans' accuracy, measured in the simulated environment
            assert row["environment"] == "simulated" and row["truth"].startswith("plan_success_rate ")
            assert row["gate"] == "accuracy" and row["confidence"] == 0.95 and row["verdict"] == "promoted"
            assert row["heldout_plans_before"] == row["heldout_plans_after"] == 8  # 4 problems x 2 plans
            before, after = row["heldout_correct_before"], row["heldout_correct_after"]
            assert row["heldout_accuracy_before"] == before / 8 and row["heldout_accuracy"] == after / 8
            assert row["accuracy_difference_low"] <= (after - before) / 8 <= row["accuracy_difference_high"]
        assert daemon.query("select name from policy_checkpoints where in_use") == [{"name": "grpo-r0002"}]
        rollout = daemon.query("select count(*) n, count(distinct run_id) d from runs where policy_name = 'grpo-r0001'")
        assert rollout[0]["n"] == rollout[0]["d"] > 0
        with dg.DagsterInstance.get() as instance:
            runs = instance.get_runs(dg.RunsFilter(job_name="grpo_round_job"))
            succeeded = sorted(r.tags["orchrm/step"] for r in runs if r.status == dg.DagsterRunStatus.SUCCESS)
            assert succeeded == ["round:1", "round:2"], succeeded  # each round succeeded once, however often killed
            assert not [r.run_id for r in runs if r.status == dg.DagsterRunStatus.STARTED]
            killed = [r for r in runs if r.status == dg.DagsterRunStatus.FAILURE]
            assert len(killed) >= len(CI_KILLS) - 1  # the round's kills (the rollout's is an orchestrate run)
            for run in killed:  # each says how it ended: its worker gone, or its training process killed
                cause = run_failure_cause(instance, run.run_id)
                assert "is gone" in cause or "signal 9" in cause or "was killed" in cause, cause
            assert not set(r.run_id for r in runs) & set(instance.event_log_storage.get_concurrency_run_ids())
        assert no_process_left(daemon) == []
    finally:
        daemon.stop()
    print("kills:", *[f"{k.what}: {k.target}, {k.processes} processes ended, reached {k.waited_s:.0f} s after the "
                      f"kill before" for k in kills.kills], sep="\n  ")
