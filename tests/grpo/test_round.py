"""A whole GRPO round on a tiny random Llama (SmolLM2's tokenizer) against a tiny reward model: what it publishes,
what a crash leaves behind, and how the next attempt resumes."""

import pytest

from orchrm_dagster.grpo import GRPOSettings, checkpoint_policies, read_table, run_round
from orchrm_dagster.grpo.rewards.orchrm import OrchRMReward
from orchrm_dagster.llm import TransformersSpec
from orchrm_dagster.orchestration import PolicySpec

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> str:
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


@pytest.fixture
def champion_root(storage_root, tiny_backbone):
    from orchrm_dagster.rm import RMTrainConfig, train_new_version

    from ..rm.toy import toy_pairs

    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4,
                           min_validation_pairs=1, champion_level=1.0)  # a toy champion: tests/rm test the floor
    train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(4, 1), config, ["x"])
    return storage_root


# held-out plans are not executed here (the gate on measured accuracy: test_gate.py and the simulated round below), so
# these rounds are gated on the reward alone, as a config must ask for explicitly
SETTINGS = GRPOSettings(policy="tiny", steps=2, group_size=2, train_problems=2, heldout_problems=1,
                        heldout_samples=2, heldout_execute=False, device="cpu", checkpoint_minutes=0, policy_gate="reward_only")


def registry(tiny_policy):
    return {"tiny": PolicySpec(name="tiny", kind="specialized", model=tiny_policy)}


def test_a_round_publishes_a_checkpoint_policy_and_its_row(champion_root, tiny_policy):
    import dataclasses
    import os

    from tests.rm.test_training_logs import event_files

    watched = dataclasses.replace(SETTINGS, report_to="tensorboard")
    outcome = run_round(champion_root, 1, watched, registry(tiny_policy), TransformersSpec())
    # the training's logs travel with the checkpoint, where the grpo_round asset's `training_logs` points
    assert watched.training_logs(outcome.path).folder == f"{outcome.path}/logs"
    assert [os.path.dirname(f) for f in event_files(outcome.path)] == [f"{outcome.path}/logs"]
    [row] = read_table(champion_root, "grpo_rounds")
    assert row == outcome.row and row["round"] == 1 and row["steps"] == 2 and row["rm_version"] == 1
    assert row["generation_tokens"] > 0 and row["reward_tokens"] > 0 and row["rollout_tokens"] == 0
    assert row["kl"] is None  # KL off by default (kl_beta 0): not measured, not recorded as 0
    assert row["heldout_reward_before"] is not None and row["heldout_accuracy"] is None
    assert row["mean_reward"] is not None and row["reward_mode"] == "orchrm"  # the champion's scale, not 0
    [policy] = checkpoint_policies(champion_root)
    assert policy.name == "grpo-r0001" and policy.kind == "checkpoint"
    assert policy.max_new_tokens == SETTINGS.max_completion_tokens and policy.max_agents == SETTINGS.max_agents
    [checkpoint] = read_table(champion_root, "policy_checkpoints")
    assert checkpoint["base_model"] == tiny_policy and checkpoint["reward_mode"] == "orchrm"
    # the next round continues from this checkpoint, and its "before" is this round's "after"
    second = run_round(champion_root, 2, SETTINGS, registry(tiny_policy), TransformersSpec())
    assert second.row["heldout_reward_before"] == row["heldout_reward_after"]
    assert read_table(champion_root, "policy_checkpoints")[1]["base_model"] == policy.checkpoint_path


@pytest.mark.slow  # a whole round: about a minute on 2 cores
def test_a_teams_own_orchestrator_with_a_prompt_file_outside_the_package_trains_through_a_round(
        champion_root, tiny_policy, tmp_path):
    """A policy as a settings file names one: a model folder and a prompt file anywhere; its plans are sampled from
    that prompt, and the checkpoint remembers it (the next round and the rollouts sample with it)."""
    from orchrm_dagster.grpo.heldout import prompt_identity
    from orchrm_dagster.mas import load_prompt

    prompt = tmp_path / "team" / "orchestrator.txt"
    prompt.parent.mkdir()
    prompt.write_text("# ours\nTEAM PROMPT. Plan for: {question} (at most {max_agents} agents)\n")
    team = {"tiny": PolicySpec(name="tiny", kind="specialized", model=tiny_policy, prompt=str(prompt))}
    outcome = run_round(champion_root, 1, SETTINGS, team, TransformersSpec())
    assert outcome.row["round"] == 1 and outcome.row["steps"] == SETTINGS.steps
    [checkpoint] = checkpoint_policies(champion_root)
    assert checkpoint.prompt == str(prompt) and load_prompt(checkpoint.prompt).startswith("TEAM PROMPT.")
    measured_with = prompt_identity(str(prompt))  # held-out measures are keyed by the file's text, not its name
    prompt.write_text("EDITED. {question} {max_agents}\n")
    assert prompt_identity(str(prompt)) != measured_with and prompt_identity("orchestrator") == "orchestrator"


@pytest.mark.slow  # two rounds (or a round and its resumption): 50-100 s on 2 cores
def test_a_crashed_round_publishes_nothing_and_the_next_attempt_resumes_from_its_last_step(
        champion_root, tiny_policy, monkeypatch):
    calls = []
    original = OrchRMReward.__call__

    def crash_on_the_second_step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("killed mid-round")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OrchRMReward, "__call__", crash_on_the_second_step)
    with pytest.raises(RuntimeError, match="killed mid-round"):
        run_round(champion_root, 1, SETTINGS, registry(tiny_policy), TransformersSpec())
    assert read_table(champion_root, "policy_checkpoints") == [] and checkpoint_policies(champion_root) == []
    calls.clear()
    outcome = run_round(champion_root, 1, SETTINGS, registry(tiny_policy), TransformersSpec())
    assert outcome.row["steps"] == 2 and len(calls) == 1  # step 1 came from the saved checkpoint


def test_two_rounds_never_run_at_once(champion_root, tiny_policy):
    from orchrm_dagster.grpo.checkpoints import round_lock
    from orchrm_dagster.storage import StorageRoot

    with round_lock(StorageRoot(champion_root.url)):  # the root's lock, as another host holding the same root
        with pytest.raises(RuntimeError, match="another GRPO round"):
            run_round(champion_root, 1, SETTINGS, registry(tiny_policy), TransformersSpec())


@pytest.mark.slow  # two rounds (or a round and its resumption): 50-100 s on 2 cores
def test_a_round_whose_held_out_reward_falls_is_not_promoted_and_the_next_starts_from_the_last_promoted(
        champion_root, tiny_policy):
    import dataclasses
    from pathlib import Path

    always, never = dataclasses.replace(SETTINGS, policy_margin=1e9), dataclasses.replace(SETTINGS, policy_margin=-1e9)
    first = run_round(champion_root, 1, always, registry(tiny_policy), TransformersSpec())
    assert first.row["promoted"] is True and first.row["start_policy"] == "tiny"
    second = run_round(champion_root, 2, never, registry(tiny_policy), TransformersSpec())
    assert second.row["start_policy"] == "grpo-r0001"
    rounds = {r["round"]: r for r in read_table(champion_root, "grpo_rounds")}
    assert rounds[2]["promoted"] is False and "fell" in rounds[2]["reason"]
    assert Path(second.path, "manifest.json").exists()  # a rejected checkpoint is kept, only not used
    checkpoints = {r["round"]: r for r in read_table(champion_root, "policy_checkpoints")}
    assert checkpoints[2]["promoted"] is False and checkpoints[2]["in_use"] is False
    assert checkpoints[1]["promoted"] is True and checkpoints[1]["in_use"] is True  # still what rolls out

    third = run_round(champion_root, 3, always, registry(tiny_policy), TransformersSpec())
    assert third.row["start_policy"] == "grpo-r0001"  # not the rejected grpo-r0002
    assert third.row["heldout_reward_before"] == first.row["heldout_reward_after"]
    rounds = {r["round"]: r for r in read_table(champion_root, "grpo_rounds")}
    assert rounds[3]["start_policy"] == "grpo-r0001" and rounds[3]["promoted"] is True
    checkpoints = {r["round"]: r for r in read_table(champion_root, "policy_checkpoints")}
    assert checkpoints[3]["base_model"] == checkpoints[1]["path"] == first.path
    assert [r for r, row in checkpoints.items() if row["in_use"]] == [3]
    assert Path(second.path).exists() and checkpoints[2]["promoted"] is False


@pytest.mark.slow  # two rounds (or a round and its resumption): 50-100 s on 2 cores
def test_two_from_scratch_rounds_continue_their_own_lineage_with_a_correct_over_incorrect_reward_model(
        storage_root, tiny_backbone, tiny_policy):
    import dataclasses

    from orchrm_dagster.pairs import CORRECT_OVER_INCORRECT
    from orchrm_dagster.rm import RMTrainConfig, train_new_version

    from ..rm.toy import toy_pairs

    scratch = dataclasses.replace(SETTINGS, start="scratch", scratch_policy="tiny-base", policy_margin=1e9)
    policies = {**registry(tiny_policy), "tiny-base": PolicySpec(name="tiny-base", kind="base", model=tiny_policy)}
    every_pair = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4,
                               min_validation_pairs=1, champion_level=1.0)
    train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(4, 1), every_pair, ["x"])
    with pytest.raises(ValueError, match="correct_over_incorrect pairs only"):
        run_round(storage_root, 1, scratch, policies, TransformersSpec())

    def correct_over_incorrect(pairs):
        return pairs.select([i for i, s in enumerate(pairs.source) if s == CORRECT_OVER_INCORRECT])

    recipe = dataclasses.replace(every_pair, pair_sources=(CORRECT_OVER_INCORRECT,))
    train_new_version(storage_root, correct_over_incorrect(toy_pairs(16, 0)), correct_over_incorrect(toy_pairs(8, 1)),
                      recipe, ["x"])
    first = run_round(storage_root, 1, scratch, policies, TransformersSpec())
    second = run_round(storage_root, 2, scratch, policies, TransformersSpec())
    assert first.row["start_policy"] == "tiny-base" and first.row["promoted"] is True
    assert second.row["start_policy"] == "grpo-r0001"  # not the base again
    assert second.row["heldout_reward_before"] == first.row["heldout_reward_after"]
    assert first.row["rm_version"] == second.row["rm_version"] == 2
    continued = run_round(storage_root, 3, dataclasses.replace(SETTINGS, policy_margin=1e9), policies,
                          TransformersSpec())
    assert continued.row["start_policy"] == "tiny"  # the other recipe's lineage starts from its own policy
