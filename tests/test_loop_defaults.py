"""`orchrm loop --rounds 1 --environment simulated` as a user runs it, on a root with a champion: the round its
defaults run trains every training problem it takes, counts its failed held-out plans, says where it is while it runs,
and spends what `orchrm status` counts. (Its verdict is the bench's to show: bench/simulated_loop.py, docs/learning.md;
the held-out measure is shrunk here with its own flags, the round's training is the defaults'.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400), pytest.mark.filterwarnings("ignore")]


def orchrm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("orchrm")), *args], capture_output=True, text=True,
                          timeout=2000)


@pytest.fixture
def champion_root(isolated_env):
    """A generated SIMULATED history (the main job's: plans decide correctness), its pairs, a champion and scores."""
    from orchrm_dagster.app.commands import ingest_files
    from orchrm_dagster.app.main_job import materialize_or_fail
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    defs = build_definitions()
    history = isolated_env / "history.jsonl"
    write_jsonl(generate_runs(1200, seed=1, plans_decide=True, first_problem=3, environment="simulated"), history)
    materialize_or_fail(defs, 'key:"problems"')
    ingest_files(defs, [history])
    materialize_or_fail(defs, 'key:"pairs"')
    materialize_or_fail(defs, 'key:"reward_model"', {"ops": {"reward_model": {"config": {"max_train_pairs": 128}}}})
    materialize_or_fail(defs, 'key:"rm_scores"')
    return defs.resources["storage"].storage_root()


def test_the_loops_own_defaults_train_every_problem_and_count_failed_plans(champion_root):
    from orchrm_dagster.grpo import GRPOSettings, policy_manifest, read_table

    done = orchrm("loop", "--rounds", "1", "--environment", "simulated", "--heldout-problems", "2",
                  "--heldout-samples", "4")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [row] = read_table(champion_root, "grpo_rounds")
    defaults = GRPOSettings()
    assert row["steps"] == defaults.steps == 6 and row["environment"] == "simulated"
    manifest = policy_manifest(champion_root, 1)
    assert len(set(manifest["train_problems"])) == defaults.steps  # one problem a step
    assert manifest["trained_problems"] == manifest["train_problems"]  # each problem it took, trained on, in turn
    assert row["heldout_failed_before"] == row["heldout_failed_after"] == 0  # counted, not missing
    assert row["heldout_plans_before"] == row["heldout_plans_after"] == 8
    assert row["heldout_key_before"] and row["heldout_key_after"] and row["calibration"]
    assert row["heldout_predicted_accuracy_before"] is not None
    # where the round was, said while it ran: its phases, steps and held-out plans
    assert "held-out plans of smollm2-fewshot: 8 of 8 plans sampled" in done.stdout
    assert "round 1: training: 6 of 6 optimizer steps" in done.stdout
    status = json.loads(orchrm("status", "--format", "json").stdout)
    assert status["loop"]["tokens"]["spent_rounds"] >= row["generation_tokens"] + row["training_tokens"]
