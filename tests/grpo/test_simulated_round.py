"""A whole round in the simulated environment: the held-out plans are executed there, the gate decides on their
measured accuracy, and the `grpo_rounds` row carries both sides with their counts and intervals."""

import dataclasses

import pytest

from orchrm_dagster.grpo import GRPOSettings, read_table, rounds_table, run_round
from orchrm_dagster.grpo.gate import PROMOTED, REJECTED, UNDECIDED
from orchrm_dagster.llm import TransformersSpec
from orchrm_dagster.orchestration import ExecutionSettings

from .test_round import registry, tiny_policy  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore")

SIMULATED = GRPOSettings(policy="tiny", steps=1, group_size=2, train_problems=1, heldout_problems=3,
                         heldout_samples=2, device="cpu", checkpoint_minutes=0, max_completion_tokens=256, max_agents=1,
                         execution=ExecutionSettings().in_environment("simulated"))


@pytest.fixture
def champion_root(storage_root, tiny_backbone):
    """A champion on toy pairs. Its floor is lowered to what four validation pairs can show: these tests are about the
    policy gate, not the reward model's (tests/rm cover that floor)."""
    from orchrm_dagster.rm import RMTrainConfig, train_new_version

    from ..rm.toy import toy_pairs

    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4,
                           min_validation_pairs=1, champion_level=1.0)
    train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(4, 1), config, ["x"])
    return storage_root


def test_a_simulated_round_is_gated_on_its_measured_held_out_accuracy(champion_root, tiny_policy):  # noqa: F811
    outcome = run_round(champion_root, 1, SIMULATED, registry(tiny_policy), TransformersSpec())
    [row] = read_table(champion_root, "grpo_rounds")
    assert row == outcome.row and row["environment"] == "simulated" and row["gate"] == "accuracy"
    assert row["heldout_plans_before"] == row["heldout_plans_after"] == 6
    before, after = row["heldout_correct_before"], row["heldout_correct_after"]
    assert row["heldout_accuracy_before"] == before / 6 and row["heldout_accuracy"] == after / 6
    assert row["accuracy_difference_low"] <= (after - before) / 6 <= row["accuracy_difference_high"]
    assert row["truth"].startswith("plan_success_rate PlanSuccessRateSettings(")  # what drew correctness
    assert row["heldout_accuracy_low_after"] <= row["heldout_accuracy"] <= row["heldout_accuracy_high_after"]
    assert row["accuracy_difference_low"] < row["accuracy_difference_high"] and row["confidence"] == 0.95
    # six plans a side cannot show that accuracy held within 5 points: the verdict says so, and promotes nothing
    assert row["verdict"] in (UNDECIDED, REJECTED) and row["promoted"] is False
    if row["verdict"] == UNDECIDED:
        assert row["reason"].startswith("undecided: 6 + 6 plans, interval [")
    else:  # rejected: reward or accuracy fell past its margin, or the reward rose as accuracy did not
        assert "fell" in row["reason"] or "suspected reward hacking" in row["reason"]
    assert row["rollout_tokens"] == 0  # the orchrm reward executes nothing
    headers, [shown] = rounds_table([row])
    assert dict(zip(headers, shown))["environment"] == "simulated (SIMULATED)"


@pytest.mark.slow  # two whole rounds
def test_a_round_without_measured_accuracy_is_unverified_and_not_promoted(champion_root, tiny_policy):  # noqa: F811
    blind = dataclasses.replace(SIMULATED, heldout_execute=False, policy_margin=1e9)
    outcome = run_round(champion_root, 1, blind, registry(tiny_policy), TransformersSpec())
    assert outcome.row["verdict"] == "unverified" and outcome.row["promoted"] is False
    assert "reward_only" in outcome.row["reason"] and outcome.row["heldout_correct_after"] is None
    trusting = run_round(champion_root, 2, dataclasses.replace(blind, policy_gate="reward_only"),
                         registry(tiny_policy), TransformersSpec())
    assert trusting.row["verdict"] == PROMOTED and trusting.row["gate"] == "reward_only"


def _without_timings(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("seconds", "seconds_by_phase", "attempt")}


def test_a_round_with_a_fixed_seed_records_the_same_row_twice(champion_root, tiny_policy, tmp_path):  # noqa: F811
    import json
    import shutil

    from orchrm_dagster.storage.root import StorageRoot

    twin = StorageRoot(str(shutil.copytree(champion_root.url, tmp_path / "twin")))
    first = run_round(champion_root, 1, SIMULATED, registry(tiny_policy), TransformersSpec()).row
    second = run_round(twin, 1, SIMULATED, registry(tiny_policy), TransformersSpec()).row
    assert _without_timings(first) == _without_timings(second)
    phases = json.loads(first["seconds_by_phase"])  # where the round's seconds went, adding up to its wall time
    assert {"generation", "policy forward", "held-out sampling (policy load included)"} <= set(phases)
    assert sum(phases.values()) == pytest.approx(first["seconds"], rel=0.01)


def test_a_policy_measured_before_one_round_is_not_measured_again_before_the_next(champion_root, tiny_policy,  # noqa: F811
                                                                                   monkeypatch):
    from orchrm_dagster.grpo import heldout as round_module

    sampled = []
    sample_plans = round_module.sample_plans
    monkeypatch.setattr(round_module, "sample_plans", lambda policy, *a, **k: sampled.append(policy.name) or
                        sample_plans(policy, *a, **k))
    unpromoted = dataclasses.replace(SIMULATED, policy_margin=-1e9)  # no round is promoted: each starts from "tiny"
    first = run_round(champion_root, 1, unpromoted, registry(tiny_policy), TransformersSpec()).row
    second = run_round(champion_root, 2, unpromoted, registry(tiny_policy), TransformersSpec()).row
    assert not first["promoted"] and first["start_policy"] == second["start_policy"] == "tiny"
    assert sampled == ["tiny", "grpo-r0001", "grpo-r0002"]  # "tiny" once: round 2's before is round 1's
    for column in ("heldout_correct_before", "heldout_reward_before", "heldout_reward_std_before"):
        assert second[column] == first[column]
