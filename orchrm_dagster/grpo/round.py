"""A GRPO round: train the orchestrator policy on plans rewarded without (or with) rollouts, publish the new
policy checkpoint, and measure it on held-out problems. A failed round publishes nothing: the previous policy stays
in use. Two rounds never run at once on a storage root, from any host (`round_lock`).

The round stands above its plugins: it looks its training method up in the registry and calls it; the method and the
rewards build on what lies below them (`problems`, `train`, `rewards.Rollouts`), never on the round."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchrm_dagster.environments import Executor, executor_for
from orchrm_dagster.grpo.checkpoints import (TOKEN_COLUMNS, append_row, base_model_dir, checkpoint_policies,
                                             checkpoint_row, policy_name, publish_checkpoint, read_table, round_lock,
                                             round_name)
from orchrm_dagster.grpo.gate import UNTRAINED, Accuracy, GateVerdict, Reward, policy_gate
from orchrm_dagster.grpo.lineage import latest_of_lineage, recipe_problem
from orchrm_dagster.grpo.method_process import train_in_processes
from orchrm_dagster.grpo.methods import METHODS, MethodContext, method_named
from orchrm_dagster.grpo.profile import current_seconds, phase, profiled
from orchrm_dagster.grpo.problems import round_problems
from orchrm_dagster.grpo.rewards import Rollouts, held_out_rewards, plan_parses
from orchrm_dagster.grpo.settings import GRPOSettings
from orchrm_dagster.grpo.train import MODEL_SUBDIR, TrainOutcome
from orchrm_dagster.llm import BackendSpec, build_backend
from orchrm_dagster.orchestration import PolicySpec, Problem, sample_plans
from orchrm_dagster.rm import champion_scorer, domain_of, trained_on
from orchrm_dagster.storage import StorageRoot, local_work_dir


@dataclass(frozen=True)
class RoundOutcome:
    round: int
    policy: str | None  # None (and path None): the round trained nothing and published no checkpoint
    path: str | None
    row: dict  # the `grpo_rounds` row
    log_history: list[dict]
    generation_seconds: float = 0.0
    profile: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds by phase (grpo.profile)

    def to_json(self) -> dict:
        """JSON-able data (what `from_json` reads back): how a training process reports its round."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RoundOutcome:
        return cls(**data)


@dataclass(frozen=True)
class HeldOut:
    """A policy measured on the held-out problems: the champion's rewards of its plans and, where they were executed,
    how many answered correctly (in the round's environment)."""

    reward: Reward
    plans: list  # the samples
    accuracy: Accuracy | None = None


def starting_policy(root: StorageRoot, settings: GRPOSettings, round_number: int,
                    registry: dict[str, PolicySpec]) -> tuple[PolicySpec, str]:
    """The policy a round continues from and its model folder: the last promoted checkpoint of the round's lineage
    (`policy` for continue, `scratch_policy` for scratch), else that registry policy itself."""
    origin = settings.policy if settings.start == "continue" else settings.scratch_policy
    previous = latest_of_lineage(read_table(root, "policy_checkpoints"), read_table(root, "grpo_rounds"),
                                 round_number, origin, unknown_counts=settings.start == "continue")
    if previous is not None:
        policy = next(p for p in checkpoint_policies(root) if p.name == previous["name"])
        return policy, policy.checkpoint_path
    if origin not in registry:
        raise KeyError(f"GRPO starts from policy {origin!r}, which is not in the policy registry "
                       f"(known: {', '.join(registry)})")
    policy = registry[origin]
    return policy, base_model_dir(root, policy.checkpoint_path or policy.model)


def run_round(root: StorageRoot, round_number: int, settings: GRPOSettings, registry: dict[str, PolicySpec],
              subagents: BackendSpec, on_step: Callable[[str], None] = lambda text: None) -> RoundOutcome:
    with round_lock(root), profiled() as profile:  # another round holds the lock: fail now rather than queue
        outcome = _run_round(root, round_number, settings, registry, subagents, on_step)
    return dataclasses.replace(outcome, profile=dict(profile.seconds))


def _run_round(root, round_number, settings, registry, subagents, on_step) -> RoundOutcome:
    started = time.perf_counter()
    policy, model_dir = starting_policy(root, settings, round_number, registry)
    policy = _trained_shape(policy, settings)
    with phase("reward model load"):
        rm_version, scorer = champion_scorer(root, settings.scoring, domain_of(settings.benchmark))
    problem = recipe_problem(settings.start, trained_on(root, rm_version))
    if problem is not None:
        raise ValueError(problem)
    train, held_out = round_problems(root, settings, round_number)
    executor = executor_for(settings.execution, lambda: build_backend(subagents))
    on_step(f"round {round_number}: held-out plans of the starting policy ({policy.name}), executed in the "
            f"{executor.environment} environment")
    before = _start_checkpoint_after(root, policy, rm_version, settings, executor, len(held_out)) or measure_held_out(
        policy, model_dir, held_out, settings, scorer, subagents, executor, execute=settings.heldout_execute)
    work = local_work_dir(root) / "grpo" / round_name(round_number)
    new_policy = work / MODEL_SUBDIR  # where the method saves the policy it trains
    method = method_named(settings.method)
    context = MethodContext(root, round_number, model_dir, policy, train, held_out, settings, scorer, rm_version,
                            subagents, executor, str(work), on_step)
    if settings.processes > 1:
        with phase("training in data-parallel processes"):
            trained = train_in_processes(context)
    else:
        trained = method.train(METHODS.settings_of(settings.method_settings, method), context)
    if trained.untrained is not None:  # nothing new to measure or publish: the starting policy stays in use
        verdict = GateVerdict(UNTRAINED, trained.untrained, settings.policy_gate)
        after, checkpoint = before, None
    else:
        checkpoint = PolicySpec(name=policy_name(round_number), kind="checkpoint",
                                checkpoint_path=str(new_policy), step=round_number, prompt=policy.prompt,
                                max_agents=policy.max_agents, max_new_tokens=policy.max_new_tokens)
        on_step(f"round {round_number}: held-out plans of the new policy")
        after = measure_held_out(checkpoint, str(new_policy), held_out, settings, scorer, subagents, executor,
                                 execute=settings.heldout_execute)
        verdict = policy_gate(before.reward, after.reward, before.accuracy, after.accuracy, settings.gate_rule)
    on_step(f"round {round_number}: {verdict.verdict}: {verdict.reason}")
    row = _round_row(round_number, settings, rm_version, trained, before, after, time.perf_counter() - started,
                     policy.name, verdict, published=checkpoint is not None, executor=executor)
    path = None
    if checkpoint is not None:
        manifest = {"round": round_number, "benchmark": settings.benchmark, "scratch_policy": settings.scratch_policy,
                    "base_model": model_dir, "method": settings.method, "reward_mode": settings.reward_mode,
                    "rm_version": rm_version, "settings": repr(settings), "environment": executor.environment,
                    "truth": executor.truth,
                    "verdict": verdict.verdict, "gate": verdict.gate,
                    "train_problems": [p.problem_id for p in train],
                    "heldout_problems": [p.problem_id for p in held_out], **{k: row[k] for k in TOKEN_COLUMNS}}
        with phase("checkpoint publish"):
            path = str(publish_checkpoint(root, round_number, new_policy, manifest))
        append_row(root, "policy_checkpoints", checkpoint_row(round_number, path, model_dir, settings.reward_mode,
                                                              rm_version, checkpoint, verdict.promoted))
    append_row(root, "grpo_rounds", row)
    return RoundOutcome(round_number, row["policy_checkpoint"], path, row, trained.log_history,
                        trained.generation_seconds)


def _trained_shape(policy: PolicySpec, settings: GRPOSettings) -> PolicySpec:
    """The policy as the round samples it: the round's plan budget and agent limit (the grammar fits them)."""
    return dataclasses.replace(policy, max_new_tokens=settings.max_completion_tokens, max_agents=settings.max_agents,
                               grammar=settings.grammar, backend_kind=None)  # a model folder: see backend_spec


def measure_held_out(policy: PolicySpec, model_dir: str, problems: list[Problem], settings: GRPOSettings, scorer,
                     subagents: BackendSpec, executor, execute: bool) -> HeldOut:
    """The champion's rewards of `heldout_samples` plans per held-out problem sampled with fixed seeds (and, with
    `execute`, how many of them answer correctly when executed by `executor`, in the round's environment)."""
    backend = build_backend(_held_out_batches(
        dataclasses.replace(policy, checkpoint_path=model_dir).backend_spec(subagents), settings.heldout_batch_size))
    policy = dataclasses.replace(policy, temperature=settings.heldout_temperature)
    with phase("held-out sampling (policy load included)"):
        samples = sample_plans(policy, backend, problems, settings.heldout_samples, seed=settings.seed + 10_000)
    accuracy = None
    if execute:
        with phase("held-out execution"):
            labeled = Rollouts(executor).run_samples(samples)
        accuracy = Accuracy(sum(item.correct for item in labeled), len(samples))
    with phase("held-out scoring"):
        rewards = held_out_plan_rewards(samples, scorer, settings.unparseable_margin)
    return HeldOut(Reward.of(rewards), samples, accuracy)


def _held_out_batches(spec, batch_size: int):
    """The policy's backend decoding `batch_size` held-out plans together, where the backend batches in-process."""
    return dataclasses.replace(spec, max_batch_size=batch_size) if hasattr(spec, "max_batch_size") else spec


def held_out_plan_rewards(samples: list, scorer, margin: float) -> list[float]:
    """The champion's score of each sample. A plan that does not parse counts as the training rule places it,
    `margin` below the lowest parseable plan of its problem on the champion's raw scale (so before and after are
    measured alike, whatever the champion's offset); where none of a problem's plans parses, below the lowest plan
    of the whole measurement; where none parses at all, -inf each: no checkpoint measures lower."""
    parses = [plan_parses(s.plan) for s in samples]
    valid = [s for s, parsed in zip(samples, parses) if parsed]
    scores = iter(scorer.score([s.question for s in valid], [s.plan for s in valid]) if valid else [])
    raw = [next(scores) if parsed else None for parsed in parses]
    by_problem = held_out_rewards(raw, [s.problem_id for s in samples], margin)
    rewards = held_out_rewards(by_problem, [None] * len(samples), margin)
    return rewards if rewards[0] is not None else [float("-inf")] * len(samples)


def _start_checkpoint_after(root: StorageRoot, policy: PolicySpec, rm_version: int, settings: GRPOSettings,
                            executor: Executor, held_out_problems: int) -> HeldOut | None:
    """An earlier held-out measure of the policy a round starts from stands for this round's before: the checkpoint's
    own, taken after its round, or one an earlier round took of the same policy before it trained (a loop whose
    rounds are not promoted starts each from the same policy: it is measured once). Only when the champion, the
    environment (a simulated one's truth and parameters included) and the number of held-out plans are the same (and,
    with heldout_execute, when that measure has an accuracy). The held-out problems and seeds come from the round
    config: a loop that changes them mid-way compares apart."""
    plans = held_out_problems * settings.heldout_samples
    for side, named in (("after", "policy_checkpoint"), ("before", "start_policy")):
        rows = [r for r in read_table(root, "grpo_rounds")
                if r[named] == policy.name and r["rm_version"] == rm_version
                and r["environment"] == executor.environment and r["truth"] == executor.truth
                and r[f"heldout_plans_{side}"] == plans]
        if rows and not (settings.heldout_execute and rows[0][f"heldout_correct_{side}"] is None):
            return _held_out_of(rows[0], side, plans)
    return None


def _held_out_of(row: dict, side: str, plans: int) -> HeldOut:
    correct = row[f"heldout_correct_{side}"]
    accuracy = Accuracy(correct, plans) if correct is not None else None
    return HeldOut(Reward(row[f"heldout_reward_{side}"], row[f"heldout_reward_std_{side}"] or 0.0, plans), [],
                   accuracy)


def _round_row(round_number, settings, rm_version, trained: TrainOutcome, before: HeldOut, after: HeldOut,
               seconds: float, start_policy: str, verdict: GateVerdict, published: bool, executor: Executor) -> dict:
    confidence = settings.gate_confidence
    return {"round": round_number, "policy_checkpoint": policy_name(round_number) if published else None,
            "reward_mode": settings.reward_mode, "rm_version": rm_version, "steps": trained.steps,
            "mean_reward": trained.mean_reward, "kl": trained.kl, "generation_tokens": trained.generation_tokens,
            "reward_tokens": trained.reward_tokens, "rollout_tokens": trained.rollout_tokens,
            "heldout_reward_before": before.reward.mean, "heldout_reward_after": after.reward.mean,
            "heldout_accuracy": after.accuracy.value if after.accuracy else None, "seconds": seconds,
            "start_policy": start_policy,
            "heldout_accuracy_before": before.accuracy.value if before.accuracy else None,
            "promoted": verdict.promoted, "reason": verdict.reason,
            "method": settings.method, "training_tokens": trained.training_tokens,
            "environment": executor.environment, "truth": executor.truth, "gate": verdict.gate, "verdict": verdict.verdict,
            "reward_hacking": verdict.reward_hacking, "confidence": confidence,
            **_side_columns("before", before, confidence), **_side_columns("after", after, confidence),
            "accuracy_difference_low": verdict.difference[0] if verdict.difference else None,
            "accuracy_difference_high": verdict.difference[1] if verdict.difference else None,
            "seconds_by_phase": json.dumps({k: round(v, 2) for k, v in current_seconds(seconds).items()})}


def _side_columns(side: str, held_out: HeldOut, confidence: float) -> dict:
    """The counts and intervals of one side of the gate (`grpo_rounds`' *_before / *_after columns)."""
    accuracy = held_out.accuracy
    low, high = accuracy.interval(confidence) if accuracy else (None, None)
    reward_low, reward_high = held_out.reward.interval(confidence)
    return {f"heldout_plans_{side}": held_out.reward.plans,
            f"heldout_correct_{side}": accuracy.correct if accuracy else None,
            f"heldout_accuracy_low_{side}": low, f"heldout_accuracy_high_{side}": high,
            f"heldout_reward_std_{side}": held_out.reward.std,
            f"heldout_reward_low_{side}": reward_low, f"heldout_reward_high_{side}": reward_high}
