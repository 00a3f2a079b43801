"""GRPO's pieces without training: rewards, the problems a round trains on, the checkpoint table as policies."""

import pytest

from orchrm_dagster.grpo import (CollaborativeReward, GRPOSettings, OrchRMReward, Rollouts, TrajectoryReward,
                                 checkpoint_policies, completion_text, policy_name, read_table, round_problems)
from orchrm_dagster.grpo.checkpoints import append_row, checkpoint_row, publish_checkpoint
from orchrm_dagster.evaluation import VerifierSettings, VerifierWeights
from orchrm_dagster.orchestration import ExecutionSettings, PolicySpec

from ..orchestration.test_sampling_and_execution import PLAN, ScriptedBackend

SC_PLAN = PLAN.replace("CoTAgent", "SCAgent")


class LengthScorer:
    """Scores a plan by its SCAgent count; reads 10 tokens per plan."""

    def score_with_lengths(self, questions, plans):
        return [float(p.count("SCAgent")) for p in plans], [10] * len(plans)


def as_chat(text):
    return [{"role": "assistant", "content": text}]


def test_the_orchrm_reward_scores_plans_and_penalises_what_does_not_parse():
    reward = OrchRMReward(LengthScorer(), format_penalty=-1.0)
    values = reward(prompts=[None] * 3, completions=[as_chat(PLAN), as_chat(SC_PLAN), as_chat("not a plan")],
                    question=["q"] * 3)
    assert values == [0.0, 1.0, -1.0]
    assert reward.reward_tokens == 20 and reward.rollout_tokens == 0 and reward.__name__ == "orchrm"


def test_the_trajectory_reward_executes_each_plan_once_and_rewards_correct_answers():
    backend = ScriptedBackend()  # every sub-agent answers \\boxed{18}
    rollouts = Rollouts(backend, ExecutionSettings(concurrent_plans=2))
    reward = TrajectoryReward(rollouts, format_penalty=-1.0)
    values = reward(prompts=[None] * 3, completions=[PLAN, PLAN, "<agent>"], question=["q"] * 3,
                    answer=["18", "18", "18"], answer_type=["math"] * 3)
    assert values == [1.0, 1.0, -1.0]
    assert sum(r.grammar is None for r in backend.requests) == 1  # the same plan twice runs once
    assert rollouts.tokens > 0 and reward.rollout_tokens == rollouts.tokens
    wrong = reward(prompts=[None], completions=[PLAN], question=["q"], answer=["7"], answer_type=["math"])
    assert wrong == [0.0]


def test_the_collaborative_reward_counts_agreement_within_the_group():
    rollouts = Rollouts(ScriptedBackend(), ExecutionSettings())
    settings = VerifierSettings(weights=VerifierWeights(similarity=0.0))
    reward = CollaborativeReward(rollouts, settings, format_penalty=-1.0)
    values = reward(prompts=[None] * 2, completions=[PLAN, SC_PLAN], question=["q", "q"], answer_type=["math"] * 2)
    assert all(v >= settings.weights.agreement for v in values)  # both answer 18: full agreement
    alone = reward(prompts=[None], completions=[PLAN], question=["other"], answer_type=["math"])
    assert alone[0] == pytest.approx(values[0] - settings.weights.agreement)


def test_completion_text_reads_chat_and_plain_completions():
    assert completion_text(as_chat("a") + as_chat("b")) == "ab" and completion_text("c") == "c"


def test_rounds_take_the_next_problems_and_never_the_held_out_ones(storage_root):
    settings = GRPOSettings(train_problems=5, heldout_problems=3)
    first, held_out = round_problems(storage_root, settings, 1)
    second, held_out_again = round_problems(storage_root, settings, 2)
    assert held_out == held_out_again and [p.problem_id for p in held_out][-1] == "gsm8k-test-1318"
    assert not {p.problem_id for p in first + second} & {p.problem_id for p in held_out}
    assert [p.problem_id for p in first] == [f"gsm8k-test-{i:04d}" for i in range(5)]
    assert [p.problem_id for p in second] == [f"gsm8k-test-{i:04d}" for i in range(5, 10)]


def test_settings_refuse_a_group_of_one():
    with pytest.raises(ValueError, match="group_size"):
        GRPOSettings(group_size=1)


def test_a_published_checkpoint_is_a_policy_because_it_is_in_the_table(storage_root, tmp_path):
    staged = tmp_path / "model"
    staged.mkdir()
    (staged / "config.json").write_text("{}")
    path = publish_checkpoint(storage_root, 1, staged, {"round": 1, "benchmark": "gsm8k"})
    assert checkpoint_policies(storage_root) == []  # published files alone are not a policy
    template = PolicySpec(name="x", prompt="orchestrator_fewshot", max_agents=2, max_new_tokens=384)
    append_row(storage_root, "policy_checkpoints", checkpoint_row(1, str(path), "base", "orchrm", 3, template, True))
    [policy] = checkpoint_policies(storage_root)
    assert (policy.name, policy.kind, policy.step, policy.prompt) == (policy_name(1), "checkpoint", 1,
                                                                       "orchestrator_fewshot")
    assert policy.checkpoint_path == str(path) and (path / "manifest.json").exists()
    append_row(storage_root, "policy_checkpoints", checkpoint_row(1, str(path), "base", "orchrm", 4, template, True))
    assert [r["rm_version"] for r in read_table(storage_root, "policy_checkpoints")] == [4]  # replaced, not doubled
