"""An execution-only loop: rounds rewarded by executed trajectories that neither wait for nor load a reward model
(`round.reward_model: none`), for a team without one, and the loop around them that trains none and rolls nothing
out."""

import dataclasses

import pytest

from orchrm_dagster.grpo import GRPOSettings, read_table, run_round
from orchrm_dagster.grpo.gate import PROMOTED
from orchrm_dagster.llm import TransformersSpec
from orchrm_dagster.loop import LoopSettings, LoopState, Round, decide, describe

from .test_round import registry, tiny_policy  # noqa: F401 (fixtures)
from .test_simulated_round import SIMULATED

pytestmark = pytest.mark.filterwarnings("ignore")

EXECUTION_ONLY = dataclasses.replace(SIMULATED, reward_model="none", rewards=("trajectory",), accuracy_margin=1.0)


def test_an_execution_only_round_runs_on_a_root_with_no_champion(storage_root, tiny_policy):  # noqa: F811
    outcome = run_round(storage_root, 1, EXECUTION_ONLY, registry(tiny_policy), TransformersSpec())
    [row] = read_table(storage_root, "grpo_rounds")
    assert row == outcome.row and row["rm_version"] is None and row["reward_mode"] == "trajectory"
    assert row["heldout_plans_before"] == row["heldout_plans_after"] == 6  # executed: the gate's accuracy
    assert row["heldout_reward_before"] is None and row["heldout_reward_after"] is None  # nothing scored them
    assert row["verdict"] == PROMOTED and row["gate"] == "accuracy"  # a margin of 1 holds any accuracy
    assert row["hacking_flag"].startswith("off: no reward model")
    assert row["rollout_tokens"] > 0  # the trajectory reward executes the group's plans


def test_an_execution_only_round_must_reward_by_execution_and_measure_accuracy():
    for wrong in ({"rewards": ("orchrm",)}, {"heldout_execute": False}, {"method": "dpo"}):
        with pytest.raises(ValueError, match="reward_model none"):
            dataclasses.replace(EXECUTION_ONLY, **wrong)


LOOP = LoopSettings(rounds=3, round=GRPOSettings(reward_model="none", rewards=("trajectory",)))


def test_the_execution_only_loop_waits_for_no_champion_trains_none_and_rolls_nothing_out():
    no_champion = LoopState(ingested_batches=1, inputs="i1", pairs_inputs="i1", pairs=100, new_pairs=None,
                            no_champion={"math": "no reward model trained yet"})
    first = decide(no_champion, LOOP)
    assert first.blocked is None and [s.key for s in first.steps] == ["round:1"]  # no reward_model step either
    promoted = Round(1, "grpo-r0001", True, 1000, "gsm8k", "smollm2-base", ("p1",))
    second = decide(dataclasses.replace(no_champion, rounds=(promoted,)), LOOP)
    assert [s.key for s in second.steps] == ["round:2"]
    assert "an execution-only loop" in describe(second)
    assert decide(no_champion, dataclasses.replace(LOOP, round=GRPOSettings())).blocked  # the default waits
