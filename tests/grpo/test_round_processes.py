"""A policy round in several data-parallel processes (`processes: 2`, `accelerate launch`, gloo on the CPU), through
TRL's own multi-process support: DPO at the same global batch loses as one process does; GRPO splits each group over
the processes without repeating its seeds, and the round is measured, gated, published and recorded as any other."""

import dataclasses
import math
import shutil

import pytest

from orchrm_dagster.grpo import checkpoint_policies, read_table, run_round
from orchrm_dagster.grpo.train import PlanSampler
from orchrm_dagster.llm import TransformersSpec
from tests.grpo.test_methods import SETTINGS, champion_root, registry, tiny_policy, with_method  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore")


def losses(outcome) -> list[float]:
    return [entry["loss"] for entry in outcome.log_history if "loss" in entry]


def test_a_dpo_round_in_two_processes_loses_as_one_at_the_same_global_batch(champion_root, tiny_policy, tmp_path):
    from orchrm_dagster.storage import StorageRoot

    # the same round on the same pairs: round 1 of two copies of the root, one trained by each
    twin = StorageRoot(str(shutil.copytree(champion_root.url, tmp_path / "twin")))
    # every weight trained (on the CPU a round trains LoRA by default): six steps at 1e-3 move the loss off ln 2
    settings = dataclasses.replace(with_method("dpo", pairs_per_round=4, batch_size=2, epochs=3), learning_rate=1e-3,
                                   lora=False)
    one = run_round(champion_root, 1, settings, registry(tiny_policy), TransformersSpec())
    two = run_round(twin, 1, dataclasses.replace(settings, processes=2), registry(tiny_policy), TransformersSpec())
    assert one.row["steps"] == two.row["steps"] == 6  # 4 pairs, 2 a step, 3 epochs: one pair in each process
    assert abs(losses(one)[-1] - math.log(2)) > 0.01  # it learned: the loss left DPO's starting ln 2
    assert losses(two) == pytest.approx(losses(one), rel=0.02, abs=1e-3)
    # every process's tokens, counted once (TRL counts a batch's tokens after padding: one pair a batch pads less)
    assert two.row["training_tokens"] == pytest.approx(one.row["training_tokens"], rel=0.01)
    assert [p.name for p in checkpoint_policies(twin)] == ["grpo-r0001"]


@pytest.mark.slow
def test_a_grpo_round_in_two_processes_is_recorded_as_any_round(champion_root, tiny_policy):
    settings = dataclasses.replace(SETTINGS, group_size=4, micro_batch_size=1, processes=2)
    outcome = run_round(champion_root, 1, settings, registry(tiny_policy), TransformersSpec())
    [row] = read_table(champion_root, "grpo_rounds")
    assert row == outcome.row and row["steps"] == 2 and row["method"] == "grpo"
    assert row["generation_tokens"] > 0 and row["reward_tokens"] > 0  # the reward model read both processes' plans
    assert row["heldout_reward_after"] is not None and outcome.path is not None


def test_each_process_seeds_its_share_of_a_group_apart(monkeypatch):
    sampler = PlanSampler.__new__(PlanSampler)
    monkeypatch.delenv("RANK", raising=False)
    alone = sampler._step_key(3)
    monkeypatch.setenv("RANK", "0")
    first = sampler._step_key(3)
    monkeypatch.setenv("RANK", "1")
    second = sampler._step_key(3)
    assert alone == first == "grpo-step-3" and second != first  # one process seeds as before


def test_rft_refuses_several_processes():
    with pytest.raises(ValueError, match="rft samples and executes its plans before it trains"):
        dataclasses.replace(with_method("rft"), processes=2)


def test_processes_must_split_a_group_evenly():
    with pytest.raises(ValueError, match=r"micro_batch_size x processes \(2 x 3\) must divide group_size 8"):
        dataclasses.replace(SETTINGS, group_size=8, micro_batch_size=2, processes=3)
