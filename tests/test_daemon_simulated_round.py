"""One round of the unattended loop in the simulated environment, through the real `dagster-daemon run`: its held-out
plans executed there, the gate deciding on their measured accuracy, and the `grpo_rounds` row saying all of it."""

from __future__ import annotations

import time

import pytest

from tests.test_daemon_loop import Daemon, batch, tiny, value  # noqa: F401 (tiny: a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_the_daemon_runs_a_simulated_round_gated_on_measured_held_out_accuracy(tmp_path, tiny, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ORCHRM_TEST_ENVIRONMENT", "simulated")  # tests/daemon_location.py: the loop in it
    daemon = Daemon(tmp_path, tiny)
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        daemon.land(tmp_path, "first.jsonl", batch(160, seed=1, first_problem=80))
        daemon.wait("a reward model", lambda: value(daemon.query(
            "select count(*) n from rm_checkpoints where is_champion")) == 1, timings, started)
        daemon.dagster("sensor", "start", "grpo_loop_sensor")
        daemon.wait("round 1", lambda: value(daemon.query("select count(*) n from grpo_rounds")) == 1, timings,
                    started)
        time.sleep(10)  # the loop has run its one round: nothing more starts
        [row] = daemon.query("select * from grpo_rounds")
        assert row["environment"] == "simulated" and row["gate"] == "accuracy" and row["confidence"] == 0.95
        assert row["heldout_plans_before"] == row["heldout_plans_after"] == 8  # 4 problems x 2 plans
        assert row["truth"].startswith("plan_success_rate ")  # the truth and its parameters, as the round ran them
        before, after = row["heldout_correct_before"], row["heldout_correct_after"]
        assert row["heldout_accuracy_before"] == before / 8 and row["heldout_accuracy"] == after / 8
        assert row["accuracy_difference_low"] <= (after - before) / 8 <= row["accuracy_difference_high"]
        assert row["verdict"] in ("promoted", "rejected", "undecided") and row["promoted"] == (
            row["verdict"] == "promoted")
        assert row["reason"] and (row["verdict"] != "undecided" or row["reason"].startswith("undecided: 8 + 8 plans"))
        if row["promoted"]:  # the checkpoint rolls out, in the same environment
            daemon.wait("the rollout ingested", lambda: (value(daemon.query(
                "select count(*) n from runs where policy_name = 'grpo-r0001'")) or 0) > 0, timings, started)
            assert daemon.query("select distinct environment from runs where policy_name = 'grpo-r0001'") == [
                {"environment": "simulated"}]
        assert value(daemon.query("select count(*) n from grpo_rounds")) == 1
    finally:
        daemon.stop()
    print("timings (s):", timings)
