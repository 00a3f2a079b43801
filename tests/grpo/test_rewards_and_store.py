"""GRPO's pieces without training: rewards (each registered one, and each on its own), the problems a round
trains on, the checkpoint table as policies."""

import pytest

from orchrm_dagster.evaluation import VerifierSettings, VerifierWeights
from orchrm_dagster.grpo import (GRPOSettings, RewardContext, Rollouts, checkpoint_policies, completion_text,
                                 policy_name, read_table, reward_kinds, round_problems)
from orchrm_dagster.grpo.checkpoints import append_row, checkpoint_row, publish_checkpoint
from orchrm_dagster.grpo.rewards.collaborative import CollaborativeReward
from orchrm_dagster.grpo.rewards.orchrm import OrchRMReward
from orchrm_dagster.grpo.rewards.trajectory import TrajectoryReward
from orchrm_dagster.environments import executor_for
from orchrm_dagster.orchestration import ExecutionSettings, PolicySpec

from ..orchestration.test_sampling_and_execution import PLAN, ScriptedBackend

SC_PLAN = PLAN.replace("CoTAgent", "SCAgent")


class LengthScorer:
    """Scores a plan by its SCAgent count (plus an offset); reads 10 tokens per plan."""

    def __init__(self, offset=0.0):
        self.offset = offset

    def score_with_lengths(self, questions, plans):
        return [self.offset + p.count("SCAgent") for p in plans], [10] * len(plans)


def as_chat(text):
    return [{"role": "assistant", "content": text}]


def columns(n, problem="p", answer="18"):
    """The dataset columns TRL passes a reward, one per plan."""
    return {"question": ["q"] * n, "answer": [answer] * n, "answer_type": ["math"] * n, "problem_id": [problem] * n}


def context():
    return RewardContext(LengthScorer(), rollouts_of(ScriptedBackend(), ExecutionSettings(concurrent_plans=2)), "cpu",
                         margin=1.0)


def rollouts_of(backend, execution) -> Rollouts:
    return Rollouts(executor_for(execution, lambda: backend))


@pytest.mark.parametrize("name", list(reward_kinds()))
def test_every_registered_reward_ranks_unparseable_plans_last_in_their_group(name):
    kind = reward_kinds()[name]
    reward = kind.build(kind.config(), context())
    plans = [PLAN, SC_PLAN, "not a plan", "<agent>", "nor this", "<edge>"]
    group = {key: a + b for (key, a), b in zip(columns(4, "p").items(), columns(2, "other").values())}
    values = reward(prompts=[None] * 6, completions=[as_chat(p) for p in plans], **group)
    assert len(values) == 6 and reward.__name__ == name == kind.name
    assert max(values[2:4]) < min(values[:2])
    assert values[4:] == [0.0, 0.0]  # nothing parses in that group: no advantage


@pytest.mark.parametrize("name", list(reward_kinds()))
def test_every_registered_reward_has_a_described_settings_section(name):
    settings = GRPOSettings(rewards=(name,))
    section = getattr(settings.reward_settings, name)
    assert isinstance(section, reward_kinds()[name].config) and settings.reward_label == name
    assert all(info.description for info in type(section).__pydantic_fields__.values())


def test_the_orchrm_reward_scores_plans_whatever_the_champions_offset():
    plans = [as_chat(PLAN), as_chat(SC_PLAN), as_chat("not a plan")]
    logged = {}
    reward = OrchRMReward(LengthScorer(), margin=1.0)
    values = reward(prompts=[None] * 3, completions=plans, log_metric=logged.__setitem__, **columns(3))
    assert values[2] < values[0] < values[1] and sum(values) == pytest.approx(0)
    assert reward.reward_tokens == 20 and reward.rollout_tokens == 0 and reward.__name__ == "orchrm"
    assert logged["raw/orchrm"] == pytest.approx((0 + 1 - 0.5) / 3)  # own scale; unparseable 1 std below 0
    # a fixed penalty of -1 sat above every plan of a champion scoring around -100; the rule does not care
    shifted = OrchRMReward(LengthScorer(offset=-100.0), margin=1.0)
    assert shifted(prompts=[None] * 3, completions=plans, **columns(3)) == pytest.approx(values)


def test_the_trajectory_reward_executes_each_parseable_plan_once_and_ranks_unparseable_below_a_wrong_answer():
    backend = ScriptedBackend()  # every sub-agent answers \\boxed{18}
    rollouts = rollouts_of(backend, ExecutionSettings(concurrent_plans=2))
    reward = TrajectoryReward(rollouts, margin=1.0)
    right = reward(prompts=[None] * 3, completions=[PLAN, PLAN, "<agent>"], **columns(3, answer="18"))
    assert right[0] == right[1] > right[2]
    assert sum(r.grammar is None for r in backend.requests) == 1  # the same plan twice runs once; "<agent>" never
    assert rollouts.tokens > 0 and reward.rollout_tokens == rollouts.tokens
    wrong = reward(prompts=[None] * 2, completions=[PLAN, "<agent>"], **columns(2, answer="7"))
    assert wrong[0] > wrong[1]  # a wrong answer still beats a plan that does not parse
    assert reward.raw_rewards([PLAN], **columns(1, answer="7")) == [0.0]
    assert reward.raw_rewards([PLAN], **columns(1, answer="18")) == [1.0]


def test_the_collaborative_reward_counts_agreement_within_the_group_and_ranks_unparseable_plans_last():
    rollouts = rollouts_of(ScriptedBackend(), ExecutionSettings())
    settings = VerifierSettings(weights=VerifierWeights(similarity=0.0))
    reward = CollaborativeReward(rollouts, settings, margin=1.0)
    together = reward.raw_rewards([PLAN, SC_PLAN], question=["q", "q"], answer_type=["math"] * 2,
                                  problem_id=["p", "p"])
    apart = reward.raw_rewards([PLAN, SC_PLAN], question=["q", "q"], answer_type=["math"] * 2,
                               problem_id=["p", "other"])
    assert together[0] == pytest.approx(apart[0] + settings.weights.agreement)  # both answer 18
    values = reward(prompts=[None] * 3, completions=[PLAN, SC_PLAN, "nope"], **columns(3))
    assert values[2] < min(values[:2])


def test_the_collaborative_reward_takes_its_panel_from_its_settings_section():
    weights = VerifierWeights(agreement=0.9, similarity=0.0)
    settings = GRPOSettings(rewards=("collaborative",),
                            reward_settings={"collaborative": VerifierSettings(weights=weights)})
    kind = reward_kinds()["collaborative"]
    reward = kind.build(settings.reward_settings.collaborative, context())
    assert reward.settings.weights.agreement == 0.9 and reward.embedder is None


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


def test_settings_take_registered_rewards_with_positive_weights_and_label_the_combination():
    settings = GRPOSettings(rewards=("orchrm", "collaborative"), reward_weights=(1.0, 0.5))
    assert settings.reward_label == "orchrm+collaborative" and settings.weights == (1.0, 0.5)
    assert GRPOSettings(rewards=("trajectory", "orchrm")).weights == (1.0, 1.0)
    with pytest.raises(ValueError) as unknown:
        GRPOSettings(rewards=("orchrm", "bogus"))
    assert "'bogus'" in str(unknown.value) and all(name in str(unknown.value) for name in reward_kinds())
    for wrong in ({"rewards": ()}, {"rewards": ("orchrm", "orchrm")}, {"reward_weights": (1.0, 1.0)},
                  {"reward_weights": (0.0,)}, {"unparseable_margin": 0.0}):
        with pytest.raises(ValueError):
            GRPOSettings(**wrong)


def test_the_launchpad_shows_one_settings_section_per_registered_reward():
    from assets.run_configs import GRPORoundConfig

    fields = GRPORoundConfig.to_config_schema().as_field().config_type.fields
    assert set(fields["reward_settings"].config_type.fields) == set(reward_kinds())
    config = GRPORoundConfig(rewards=["orchrm", "collaborative"],
                             reward_settings={"collaborative": {"weights": {"agreement": 0.9}}})
    engine = config.to_engine()
    assert engine.rewards == ("orchrm", "collaborative")
    assert engine.reward_settings.collaborative.weights.agreement == 0.9


def test_the_loop_command_offers_every_registered_reward_and_refuses_others():
    from click.testing import CliRunner

    from orchrm_dagster.app.cli import main

    shown = CliRunner().invoke(main, ["loop", "--help"], terminal_width=400)
    assert shown.exit_code == 0 and all(f"{name}:" in shown.output for name in reward_kinds())
    refused = CliRunner().invoke(main, ["loop", "--rewards", "orchrm,bogus"])
    assert refused.exit_code == 2 and "bogus" in refused.output and "trajectory" in refused.output


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
