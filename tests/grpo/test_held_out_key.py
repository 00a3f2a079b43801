"""A held-out measure stands for another only when everything that shaped it is the same: one key (`held_out_key`)
over the policy, the problems, their samples, seeds and temperature, the plan's agents, tokens and grammar, the
champion, the environment and its truth; what does not shape the held-out plans (how the round trains) leaves it."""

from __future__ import annotations

import dataclasses

import pytest

from orchrm_dagster.environments import executor_for
from orchrm_dagster.grpo import GRPOSettings, held_out_key, run_round
from orchrm_dagster.llm import TransformersSpec, build_backend
from orchrm_dagster.orchestration import ExecutionSettings, PolicySpec, Problem
from orchrm_dagster.rm import ScoringSettings

from .test_held_out_failures import sampled_policies
from .test_round import registry, tiny_policy  # noqa: F401 (fixtures)
from .test_simulated_round import SIMULATED, champion_root  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore")

POLICY = PolicySpec(name="tiny", kind="specialized", model="/models/tiny")
PROBLEMS = [Problem(f"gsm8k/{i}", "gsm8k", f"What is {i} + {i}?", str(2 * i), "math") for i in range(3)]
SETTINGS = GRPOSettings(execution=ExecutionSettings().in_environment("simulated"))


def key(settings: GRPOSettings = SETTINGS, policy: PolicySpec = POLICY, problems=PROBLEMS, rm_version: int = 1) -> str:
    subagents = lambda: build_backend(TransformersSpec())  # noqa: E731 (real agents: a model loaded only when used)
    return held_out_key(policy, problems, settings, rm_version, executor_for(settings.execution, subagents),
                        TransformersSpec())


@pytest.mark.parametrize("change", [
    {"heldout_temperature": 0.7}, {"seed": 1}, {"max_agents": 2}, {"max_completion_tokens": 324},
    {"benchmark": "math500"}, {"heldout_samples": 8}, {"grammar": False}, {"unparseable_margin": 2.0},
    {"heldout_execute": False},
    {"execution": ExecutionSettings().in_environment("simulated", "debate_sink")},
    {"execution": ExecutionSettings()},  # real agents
    {"scoring": ScoringSettings(max_length=128)},  # the champion reads the plans otherwise
])
def test_each_setting_that_shapes_the_held_out_plans_changes_the_key(change):
    assert key(dataclasses.replace(SETTINGS, **change)) != key()


def test_the_policy_the_problems_and_the_champion_change_the_key_and_training_settings_do_not():
    assert key(policy=dataclasses.replace(POLICY, prompt="orchestrator_fewshot")) != key()
    assert key(policy=dataclasses.replace(POLICY, name="grpo-r0001", kind="checkpoint")) != key()
    assert key(problems=PROBLEMS[:2]) != key() and key(rm_version=2) != key()
    assert key(policy=dataclasses.replace(POLICY, top_p=0.9)) != key()
    assert key(policy=dataclasses.replace(POLICY, checkpoint_path="/models/tiny-finetuned")) != key()
    how_it_trains = dataclasses.replace(SETTINGS, learning_rate=0.5, steps=3, kl_beta=0.1, heldout_batch_size=4)
    assert key(how_it_trains) == key() and key() == key()


def test_a_round_whose_held_out_temperature_changed_measures_its_start_afresh(champion_root, tiny_policy,  # noqa: F811
                                                                            monkeypatch):
    sampled = sampled_policies(monkeypatch)
    unpromoted = dataclasses.replace(SIMULATED, policy_margin=-1e9)  # each round starts from "tiny"
    first = run_round(champion_root, 1, unpromoted, registry(tiny_policy), TransformersSpec()).row
    warmer = dataclasses.replace(unpromoted, heldout_temperature=0.9)
    second = run_round(champion_root, 2, warmer, registry(tiny_policy), TransformersSpec()).row
    assert sampled == ["tiny", "grpo-r0001", "tiny", "grpo-r0002"]  # round 1's before was another experiment
    assert second["heldout_key_before"] != first["heldout_key_before"]
    third = run_round(champion_root, 3, warmer, registry(tiny_policy), TransformersSpec()).row
    assert sampled[4:] == ["grpo-r0003"] and third["heldout_key_before"] == second["heldout_key_before"]


def test_a_corrected_question_or_answer_under_the_same_id_is_another_measure():
    corrected = [dataclasses.replace(PROBLEMS[0], answer="3")] + PROBLEMS[1:]
    reworded = [dataclasses.replace(PROBLEMS[0], question="What is 0 + 0? Answer in words.")] + PROBLEMS[1:]
    assert key(problems=corrected) != key() and key(problems=reworded) != key()


def test_device_and_dtype_are_keyed_as_they_resolve_not_as_auto():
    from orchrm_dagster.grpo.heldout import resolved

    assert resolved({"device": "auto", "dtype": "auto"}) == {"device": "cpu", "dtype": "fp32"}  # this machine
    on_cpu = dataclasses.replace(SETTINGS, scoring=ScoringSettings(device="cpu", dtype="fp32"))
    assert key(on_cpu) == key()  # "auto" here is the CPU in fp32: the same measure
    assert key(dataclasses.replace(SETTINGS, scoring=ScoringSettings(device="cpu", dtype="bf16"))) != key()


def test_the_accuracy_key_leaves_out_the_policy_and_the_champion():
    from orchrm_dagster.grpo import accuracy_key

    executor = executor_for(SETTINGS.execution, lambda: build_backend(TransformersSpec()))
    same = accuracy_key(PROBLEMS, SETTINGS, executor, TransformersSpec())
    assert same == accuracy_key(PROBLEMS, dataclasses.replace(SETTINGS, scoring=ScoringSettings(max_length=128)),
                                executor, TransformersSpec())
    assert same != accuracy_key(PROBLEMS[:2], SETTINGS, executor, TransformersSpec())
    assert same != accuracy_key(PROBLEMS, dataclasses.replace(SETTINGS, heldout_samples=5), executor,
                                TransformersSpec())
