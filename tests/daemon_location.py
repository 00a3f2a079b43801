"""The code location the daemon test serves: the project's own Definitions, with tiny models and small settings
(paths from the test's environment), and sensors that tick every 5 seconds."""

import dataclasses
import os

from assets.config_bridge import from_engine
from assets.resources import LLMBackendResource, LoopResource, PolicyConfig, PolicyRegistry
from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.grpo import GRPOSettings
from orchrm_dagster.llm import TransformersSpec
from orchrm_dagster.loop import BatchingSettings, LoopSettings
from orchrm_dagster.orchestration import ExecutionSettings
from orchrm_dagster.rm import RMTrainConfig, ScoringSettings

POLICY, BACKBONE = os.environ["ORCHRM_TEST_TINY_POLICY"], os.environ["ORCHRM_TEST_TINY_BACKBONE"]

LOOP = LoopSettings(
    # the chain's plumbing under the count rule, every promoted round rolling out (the stale rule and auto rollouts:
    # tests/loop/test_staleness.py)
    retrain_on="new_pairs", rollouts="always",
    rounds=2, retrain_min_new_pairs=10, rollout_samples=2, max_attempts=int(os.environ.get("ORCHRM_TEST_ATTEMPTS", "2")),
    rollout_execution=ExecutionSettings(subagent_max_new_tokens=8, plan_timeout_s=120.0, concurrent_plans=4,
                                        agents={"sc_samples": 2, "debate_rounds": 1, "reflexion_rounds": 1}),
    reward_model=RMTrainConfig(backbone=BACKBONE, max_length=64, epochs=1, batch_size=8,
                               device="cpu", min_validation_pairs=1, champion_level=1.0),  # a tiny model's floor off
    round=GRPOSettings(policy="tiny-fewshot", scratch_policy="tiny-base", steps=2, group_size=2, micro_batch_size=2,
                       train_problems=2, heldout_problems=1, heldout_samples=2, heldout_execute=False,
                       max_completion_tokens=384, device="cpu", policy_margin=1e9, policy_gate="reward_only",
                       scoring=ScoringSettings(device="cpu", max_length=64)))
if os.environ.get("ORCHRM_TEST_ENVIRONMENT"):  # the loop with its held-out plans executed there, gated on accuracy
    LOOP = LOOP.in_environment(os.environ["ORCHRM_TEST_ENVIRONMENT"])
    LOOP = dataclasses.replace(LOOP, rounds=1, round=dataclasses.replace(
        LOOP.round, heldout_execute=True, heldout_problems=4, heldout_samples=2, policy_gate="accuracy"))
if os.environ.get("ORCHRM_TEST_ACCURACY_MARGIN"):  # tests/round_kills.py: 1.0 promotes every round (each rolls out)
    LOOP = dataclasses.replace(LOOP, round=dataclasses.replace(
        LOOP.round, accuracy_margin=float(os.environ["ORCHRM_TEST_ACCURACY_MARGIN"])))
if os.environ.get("ORCHRM_TEST_CHECKPOINT_MINUTES"):  # tests/round_kills.py: a trainer checkpoint after each step
    LOOP = dataclasses.replace(LOOP, round=dataclasses.replace(
        LOOP.round, checkpoint_minutes=float(os.environ["ORCHRM_TEST_CHECKPOINT_MINUTES"])))
if os.environ.get("ORCHRM_TEST_RETRAIN_MIN_NEW_PAIRS"):  # tests/round_kills.py: no retraining between rounds
    LOOP = dataclasses.replace(LOOP, retrain_min_new_pairs=int(os.environ["ORCHRM_TEST_RETRAIN_MIN_NEW_PAIRS"]))
if os.environ.get("ORCHRM_TEST_ROUNDS"):  # bench/soak.py: rounds that keep coming
    LOOP = dataclasses.replace(LOOP, rounds=int(os.environ["ORCHRM_TEST_ROUNDS"]))
if os.environ.get("ORCHRM_TEST_BATCH_INTERVAL_S"):  # bench/soak.py: a batch of small files every interval
    LOOP = dataclasses.replace(LOOP, batching=BatchingSettings(
        interval_s=float(os.environ["ORCHRM_TEST_BATCH_INTERVAL_S"])))

defs = build_definitions(
    llm=LLMBackendResource(backend=TransformersSpec(model=POLICY, device="cpu")),
    policy_registry=PolicyRegistry(policies=[
        PolicyConfig(name="tiny-base", kind="base", model=POLICY, max_new_tokens=384, max_agents=2),
        PolicyConfig(name="tiny-fewshot", kind="specialized", model=POLICY, max_new_tokens=384, max_agents=2,
                     prompt="orchestrator_fewshot")]),
    loop=from_engine(LoopResource, LOOP),
    sensor_interval_s=5,
)
