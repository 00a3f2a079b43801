"""The policy round's training methods (grpo, dpo, rft) on a tiny random Llama against a tiny reward model: each is
one entry of one registry, and each round, whatever its method, is measured, gated, published and recorded alike."""

import dataclasses
from types import SimpleNamespace

import pyarrow as pa
import pytest

from orchrm_dagster.grpo import GRPOSettings, checkpoint_policies, read_table, run_round
from orchrm_dagster.grpo.methods import method_names, registered_methods
from orchrm_dagster.llm import TransformersSpec
from orchrm_dagster.mas.executor import ExecutionResult
from orchrm_dagster.orchestration import PolicySpec

pytestmark = pytest.mark.filterwarnings("ignore")

SETTINGS = GRPOSettings(policy="tiny", steps=2, group_size=2, train_problems=2, heldout_problems=1,
                        heldout_samples=1, heldout_execute=False, device="cpu", checkpoint_minutes=0, policy_margin=1e9,
                        max_completion_tokens=324, policy_gate="reward_only")


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> str:
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


@pytest.fixture
def champion_root(storage_root, tiny_backbone):
    """A champion reward model whose training pairs are in the store (as imported pairs, all on problem "x")."""
    from orchrm_dagster.contract import IMPORTED_PAIRS
    from orchrm_dagster.rm import RMTrainConfig, train_new_version

    from ..rm.toy import toy_pairs

    train = toy_pairs(8, 0)
    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4,
                           min_validation_pairs=1, champion_level=1.0)  # a toy champion: tests/rm test the floor
    train_new_version(storage_root, train, toy_pairs(4, 1), config, ["x"])
    rows = [{"pair_id": pair_id, "problem_id": "x", "question": question, "chosen_plan": chosen,
             "rejected_plan": rejected, "chosen_plan_hash": None, "rejected_plan_hash": None, "source": source,
             "split": "train"}
            for pair_id, question, chosen, rejected, source in zip(*dataclasses.astuple(train))]
    storage_root.write_table(pa.Table.from_pylist(rows, schema=IMPORTED_PAIRS), storage_root.table_file("imported_pairs"))
    return storage_root


def registry(tiny_policy):
    return {"tiny": PolicySpec(name="tiny", kind="specialized", model=tiny_policy)}


def with_method(name: str, **section) -> GRPOSettings:
    sections = SETTINGS.method_settings
    if section:
        sections = dataclasses.replace(sections, **{name: dataclasses.replace(getattr(sections, name), **section)})
    return dataclasses.replace(SETTINGS, method=name, method_settings=sections)


def fake_execution(answers: dict[str, str] | None, monkeypatch) -> list:
    """An environment whose plans answer each question with `answers[question]` (None: a wrong answer), 15 tokens a
    plan: the round's executor (what RFT executes and labels with)."""
    import orchrm_dagster.grpo.round as round_module
    from orchrm_dagster.environments import Executor

    executed = []

    class Scripted(Executor):
        environment, model_id = "agents", "scripted"

        def completed(self, jobs):
            for index, job in enumerate(jobs):
                executed.append(job)
                yield index, ExecutionResult(final_answer=(answers or {}).get(job.question, "certainly wrong"),
                                             outputs={}, calls=[], prompt_tokens=10, completion_tokens=5, error=None,
                                             plan_error=None)

    monkeypatch.setattr(round_module, "executor_for", lambda settings, backend: Scripted())
    return executed


@pytest.mark.slow  # a whole round: sampling held-out plans dominates on a shared CPU
def test_a_dpo_round_trains_on_the_champions_pairs_and_publishes_a_checkpoint_and_its_row(champion_root, tiny_policy):
    outcome = run_round(champion_root, 1, with_method("dpo", pairs_per_round=4, batch_size=2), registry(tiny_policy),
                        TransformersSpec())
    [row] = read_table(champion_root, "grpo_rounds")
    assert row == outcome.row and row["method"] == "dpo" and row["reward_mode"] == "pairs"
    assert row["steps"] == 2  # 4 pairs, 2 a step
    assert row["training_tokens"] > 0 and row["generation_tokens"] == row["rollout_tokens"] == 0
    assert row["reward_tokens"] == 0 and row["promoted"] is True
    [policy] = checkpoint_policies(champion_root)
    assert policy.name == "grpo-r0001" and outcome.path == policy.checkpoint_path
    [checkpoint] = read_table(champion_root, "policy_checkpoints")
    assert checkpoint["reward_mode"] == "pairs" and checkpoint["in_use"] is True


def test_dpo_takes_the_next_slice_of_pairs_each_round_off_the_held_out_problems_and_names_what_is_missing(
        champion_root):
    from orchrm_dagster.grpo.methods.dpo import DPOMethodSettings, round_pairs
    from orchrm_dagster.orchestration import Problem

    def context(round_number, held_out=()):
        return SimpleNamespace(root=champion_root, rm_version=1, round_number=round_number,
                               held_out=[Problem(p, "gsm8k", "q", None, "numeric") for p in held_out])

    config = DPOMethodSettings(pairs_per_round=3)
    ids = [[p["pair_id"] for p in round_pairs(context(n), config)] for n in (1, 2, 3)]
    assert ids[0] == sorted(ids[0]) and not set(ids[0]) & set(ids[1])  # the slice moves on
    assert ids[2][-1] == ids[0][0]  # 8 pairs, 3 a round: round 3 wraps around to the first
    with pytest.raises(ValueError, match="no training pairs of reward model v1.*materialize `pairs`"):
        round_pairs(context(1, held_out=("x",)), config)  # every pair is on a held-out problem


@pytest.mark.slow  # a whole round: sampling held-out plans dominates on a shared CPU
def test_an_rft_round_fine_tunes_on_the_correct_plans_and_counts_every_execution(champion_root, tiny_policy,
                                                                                 monkeypatch):
    from orchrm_dagster.grpo import round_problems

    train, _ = round_problems(champion_root, SETTINGS, 1)
    executed = fake_execution({p.question: p.answer for p in train[:1]}, monkeypatch)  # only the first is solved
    outcome = run_round(champion_root, 1, with_method("rft", samples_per_problem=2), registry(tiny_policy),
                        TransformersSpec())
    row = outcome.row
    assert row["method"] == "rft" and row["reward_mode"] == "trajectory" and len(executed) == 4
    assert row["rollout_tokens"] == 4 * 15 and row["generation_tokens"] > 0 and row["training_tokens"] > 0
    assert row["mean_reward"] == pytest.approx(sum(j.question == train[0].question for j in executed) / 4)
    assert row["steps"] == 1 and row["promoted"] is True  # the 2 correct plans, 2 a step
    assert [p.name for p in checkpoint_policies(champion_root)] == ["grpo-r0001"]


@pytest.mark.slow  # a whole round: sampling held-out plans dominates on a shared CPU
def test_an_rft_round_without_a_correct_plan_is_recorded_not_published_and_the_loop_goes_on(
        champion_root, tiny_policy, monkeypatch):
    from orchrm_dagster.loop import rounds

    fake_execution(None, monkeypatch)
    outcome = run_round(champion_root, 1, with_method("rft", samples_per_problem=1), registry(tiny_policy),
                        TransformersSpec())
    [row] = read_table(champion_root, "grpo_rounds")
    assert row["steps"] == 0 and row["promoted"] is False and "none of the 2 plans" in row["reason"]
    assert row["rollout_tokens"] == 2 * 15 and row["training_tokens"] == 0 and row["policy_checkpoint"] is None
    assert outcome.path is None and row["heldout_reward_after"] == row["heldout_reward_before"]
    assert read_table(champion_root, "policy_checkpoints") == [] and checkpoint_policies(champion_root) == []
    [recorded] = rounds(champion_root)
    assert recorded.round == 1 and recorded.promoted is False  # the loop reads it and starts round 2 next


def test_unknown_methods_are_refused_at_config_time_naming_the_known_ones():
    from assets.config_bridge import dagster_config

    for make in (GRPOSettings, dagster_config(GRPOSettings, "RoundConfig")):
        with pytest.raises(ValueError) as refused:
            make(method="ppo")
        assert all(name in str(refused.value) for name in method_names())


def test_the_registry_is_the_only_list_of_method_names():
    import click

    from orchrm_dagster.app.cli.loop import command as loop_command

    names = method_names()
    assert set(names) >= {"grpo", "dpo", "rft"}
    assert all(GRPOSettings(method=name).method == name for name in names)
    sections = GRPOSettings().method_settings
    assert {name: type(getattr(sections, name)) for name in names} == {
        name: method.config for name, method in registered_methods().items()}
    [option] = [p for p in loop_command.params if p.name == "method"]
    assert tuple(option.type.names()) == names  # read from the registry when used, not at import
    for name in names:
        assert option.type.convert(name, option, None) == name
    with pytest.raises(click.BadParameter, match="unknown .*'ppo'; known: dpo, grpo, rft"):
        option.type.convert("ppo", option, None)
    help_text = option.get_help_record(click.Context(loop_command))[1]
    assert all(method.description in help_text for method in registered_methods().values())


def test_rounds_written_before_methods_read_back_as_grpo(storage_root):
    from orchrm_dagster.contract import GRPO_ROUNDS

    old_schema = pa.schema([f for f in GRPO_ROUNDS if f.name not in ("method", "training_tokens")])
    row = {name: None for name in old_schema.names} | {"round": 1, "policy_checkpoint": "grpo-r0001"}
    storage_root.write_table(pa.Table.from_pylist([row], schema=old_schema), storage_root.table_file("grpo_rounds"))
    [read] = read_table(storage_root, "grpo_rounds")
    assert read["method"] == "grpo" and read["training_tokens"] is None
