"""A GRPO round: train the orchestrator policy on plans rewarded without (or with) rollouts, publish the new
policy checkpoint, and measure it on held-out problems. A failed round publishes nothing: the previous policy stays
in use. Two rounds never run at once on a storage root, from any host (`round_lock`).

The round stands above its plugins: it looks its training method up in the registry and calls it; the method and the
rewards build on what lies below them (`problems`, `train`, `rewards.Rollouts`), never on the round."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from orchrm_dagster.environments import Executor, executor_for
from orchrm_dagster.faults import fault_point
from orchrm_dagster.grpo import progress
from orchrm_dagster.grpo.barrier import barrier_columns
from orchrm_dagster.grpo.checkpoints import (TOKEN_COLUMNS, append_row, base_model_dir, checkpoint_policies,
                                             checkpoint_row, policy_manifest, policy_name, policy_store,
                                             publish_checkpoint, read_table, round_lock, round_name)
from orchrm_dagster.grpo.gate import UNTRAINED, GateVerdict, Reference, difference_method, policy_gate
from orchrm_dagster.grpo.heldout import (START_MEASURE_FILE, HeldOut, HeldOutMeasure,
                                        attempted_start_measure, best_promoted, held_out_key, keep_held_out_plans,
                                        keep_start_measure, reused_measure, side_columns)
from orchrm_dagster.grpo.lineage import latest_of_lineage, recipe_problem
from orchrm_dagster.grpo.method_process import train_in_processes
from orchrm_dagster.grpo.methods import METHODS, MethodContext, method_named
from orchrm_dagster.grpo.profile import current_seconds, phase, profiled
from orchrm_dagster.grpo.progress import Planned, reporting
from orchrm_dagster.grpo.problems import round_problems
from orchrm_dagster.grpo.settings import GRPOSettings
from orchrm_dagster.grpo.train import MODEL_SUBDIR, TrainOutcome
from orchrm_dagster.llm import BackendSpec, build_backend
from orchrm_dagster.orchestration import PolicySpec
from orchrm_dagster.rm import Calibration, champion_calibration, champion_scorer, domain_of, trained_on
from orchrm_dagster.rm import LiveAccuracy, plan_pairs, record_live_accuracy
from orchrm_dagster.rm import validation_accuracy
from orchrm_dagster.spending import journal, spend, top_up
from orchrm_dagster.storage import StorageRoot, local_work_dir, writing


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
    # another round holds the lock: fail now rather than queue
    with round_lock(root), profiled() as profile, reporting(on_step, f"round {round_number}"):
        committed = committed_round(root, round_number)
        if committed is not None:
            return finish_committed_round(root, committed, on_step)
        attempt = uuid.uuid4().hex[:12]
        with journal(root, round_name(round_number), attempt):  # its tokens counted even if it is killed
            outcome = _run_round(root, round_number, settings, registry, subagents, on_step, attempt)
    return dataclasses.replace(outcome, profile=dict(profile.seconds))


def _run_round(root, round_number, settings, registry, subagents, on_step, attempt: str) -> RoundOutcome:
    started = time.perf_counter()
    policy, model_dir = starting_policy(root, settings, round_number, registry)
    policy = _trained_shape(policy, settings)
    domain = domain_of(settings.benchmark)
    rm_version, scorer = None, None  # an execution-only round loads no reward model
    if settings.reward_model == "champion":
        with phase("reward model load"):
            rm_version, scorer = champion_scorer(root, settings.scoring, domain)
        problem = recipe_problem(settings.start, trained_on(root, rm_version))
        if problem is not None:
            raise ValueError(problem)
    started_on = barrier_columns(root, round_number, rm_version)  # what the champion read; the rollouts before it
    train, held_out = round_problems(root, settings, round_number)
    executor = executor_for(settings.execution, lambda: build_backend(subagents))
    on_step(f"round {round_number}: held-out plans of the starting policy ({policy.name}), executed in the "
            f"{executor.environment} environment")
    key = held_out_key(policy, held_out, settings, rm_version, executor, subagents)
    work = local_work_dir(root) / "grpo" / round_name(round_number)
    start_file = work.with_name(f"{work.name}-{START_MEASURE_FILE}")
    before, said = _kept_start(root, start_file, key, settings)  # read before anything is fitted
    if said:
        on_step(f"round {round_number}: {said}")
    # a kept side's prediction came from its calibration: the other side is predicted by the same one
    calibration, calibration_tokens = (before.calibration if before else None), 0
    if calibration is None and scorer is not None:
        with phase("calibration (runs the champion never trained on, scored)"):
            calibration, calibration_tokens = champion_calibration(root, rm_version, domain, scorer)
        spend("calibration", calibration_tokens)
    measure = HeldOutMeasure(held_out, settings, scorer, subagents, executor, rm_version, calibration, spend)
    held_out_plans = Planned("held-out", len(held_out) * settings.heldout_samples)
    progress.plan(([] if before else [held_out_plans])
                  + ([Planned("training", settings.steps)] if settings.method == "grpo" else []) + [held_out_plans])
    if before is None:
        before = measure(policy, model_dir)
        keep_start_measure(start_file, before)
    elif before.calibration is None:  # a side measured before its champion had a calibration predicts nothing
        before = dataclasses.replace(before, measured=dataclasses.replace(
            before.measured, unpredicted="the start's kept measure has no calibration to predict its accuracy"))
    best = best_promoted(root, measure.accuracy_key, policy.name, before.measured.accuracy)
    new_policy = work / MODEL_SUBDIR  # where the method saves the policy it trains
    method = method_named(settings.method)
    context = MethodContext(root, round_number, model_dir, policy, train, held_out, settings, scorer, rm_version,
                            subagents, executor, str(work), on_step)
    with writing(f"policy checkpoint {round_name(round_number)}", work):  # its trainer checkpoints and model
        if settings.processes > 1:
            with phase("training in data-parallel processes"):
                trained = train_in_processes(context)
        else:
            trained = method.train(METHODS.settings_of(settings.method_settings, method), context)
    for kind in ("generation", "reward", "rollout", "training"):  # what the journal was not told of as it went
        top_up(kind, getattr(trained, f"{kind}_tokens"))
    if trained.untrained is not None:  # nothing new to measure or publish: the starting policy stays in use
        verdict = GateVerdict(UNTRAINED, trained.untrained, settings.policy_gate)
        after, checkpoint = before, None
    else:
        # sampled as its start was (grammar, top-p, plan budget, agents): only the weights differ
        checkpoint = dataclasses.replace(policy, name=policy_name(round_number), kind="checkpoint", model=None,
                                         checkpoint_path=str(new_policy), step=round_number)
        on_step(f"round {round_number}: held-out plans of the new policy")
        after = measure(checkpoint, str(new_policy))
        verdict = policy_gate(before.measured, after.measured, settings.gate_rule,
                              Reference(*best) if best else None)
    said = verdict.reason if verdict.reason.startswith(verdict.verdict) else f"{verdict.verdict}: {verdict.reason}"
    on_step(f"round {round_number}: {said}")
    keep_held_out_plans(work, before, after)
    row = _round_row(round_number, settings, rm_version, trained, before, after, time.perf_counter() - started,
                     policy.name, verdict, published=checkpoint is not None, executor=executor,
                     calibration=calibration, heldout_tokens=calibration_tokens + before.tokens
                     + (after.tokens if after is not before else 0), accuracy_key=measure.accuracy_key) | started_on | {
                         "attempt": attempt}
    path = None
    if checkpoint is not None:
        registered = checkpoint_row(round_number, str(policy_store(root).folder(round_number)), model_dir,
                                    settings.reward_mode, rm_version, checkpoint, verdict.promoted)
        manifest = {"round": round_number, "benchmark": settings.benchmark, "scratch_policy": settings.scratch_policy,
                    "base_model": model_dir, "method": settings.method, "reward_mode": settings.reward_mode,
                    "rm_version": rm_version, "settings": repr(settings), "environment": executor.environment,
                    "truth": executor.truth,
                    "verdict": verdict.verdict, "gate": verdict.gate,
                    "train_problems": [p.problem_id for p in train],
                    "trained_problems": list(trained.trained_problems),
                    "heldout_problems": [p.problem_id for p in held_out], **{k: row[k] for k in TOKEN_COLUMNS},
                    CHECKPOINT_ROW: registered}
        with phase("checkpoint publish"):
            path = str(publish_checkpoint(root, round_number, new_policy, manifest))
    commit_round(root, row)
    if rm_version is not None:
        record_live_accuracy(root, [held_out_live(root, round_number, domain, rm_version, before, after)])
    start_file.unlink(missing_ok=True)
    return RoundOutcome(round_number, row["policy_checkpoint"], path, row, trained.log_history,
                        trained.generation_seconds)


def held_out_live(root: StorageRoot, round_number: int, domain: str, rm_version: int, before: HeldOut,
                  after: HeldOut) -> LiveAccuracy:
    """The champion's live accuracy on the round's held-out plans (executed for the gate, scored by it anyway): each
    correct plan over each incorrect one of its problem. Measured, never trained on."""
    plans = before.plans + (after.plans if after is not before else [])
    return LiveAccuracy(domain, rm_version, f"held-out plans of round {round_number}", plan_pairs(plans),
                        validation_accuracy(root, rm_version, domain))


CHECKPOINT_ROW = "policy_checkpoints_row"  # in a published checkpoint's manifest: its row, written once committed


def commit_round(root: StorageRoot, row: dict) -> None:
    """The round's verdict recorded (its `grpo_rounds` row: the commit), then its published checkpoint registered in
    `policy_checkpoints` (promoted there, and in use, by that verdict alone). A kill between the two leaves a
    committed round whose checkpoint is not yet a policy: the round's next attempt only registers it
    (`finish_committed_round`); the loop asks for that attempt (`loop.read.rounds`)."""
    append_row(root, "grpo_rounds", row)
    if row["policy_checkpoint"] is not None:
        fault_point("round.promotion")
        register_checkpoint(root, row["round"])


def register_checkpoint(root: StorageRoot, round_number: int) -> None:
    """The round's published checkpoint in `policy_checkpoints`, from the row its manifest holds."""
    append_row(root, "policy_checkpoints", policy_manifest(root, round_number)[CHECKPOINT_ROW])


def committed_round(root: StorageRoot, round_number: int) -> dict | None:
    """The round's `grpo_rounds` row, when an earlier attempt recorded its verdict."""
    return next((row for row in read_table(root, "grpo_rounds") if row["round"] == round_number), None)


def finish_committed_round(root: StorageRoot, row: dict, on_step: Callable[[str], None]) -> RoundOutcome:
    """A round whose verdict an earlier attempt recorded is not run again: its checkpoint is registered if the
    attempt was killed before it was, and the recorded outcome returned."""
    registered = {r["name"] for r in read_table(root, "policy_checkpoints")}
    path = None
    if row["policy_checkpoint"] is not None:
        path = str(policy_store(root).folder(row["round"]))
        if row["policy_checkpoint"] not in registered:
            on_step(f"round {row['round']}: its verdict was recorded by an earlier attempt; its checkpoint is "
                    f"registered now")
            register_checkpoint(root, row["round"])  # the verdict row is there already: not written again
    else:
        on_step(f"round {row['round']}: recorded by an earlier attempt ({row['verdict']}); nothing to run")
    return RoundOutcome(row["round"], row["policy_checkpoint"], path, row, [])


def _kept_start(root: StorageRoot, start_file, key: str, settings: GRPOSettings) -> tuple[HeldOut | None, str]:
    """The start's held-out measure where one is kept under `key`: an earlier, killed attempt of this round took it,
    or an earlier round measured the same policy alike; what to say of it."""
    kept = attempted_start_measure(start_file, key)
    if kept is not None:  # its tokens are that attempt's, counted in its journal
        return (dataclasses.replace(kept, tokens=0),
                "the starting policy's held-out measure is the one an earlier attempt of this round took")
    kept = reused_measure(root, key, settings)
    if kept is not None:
        return kept, f"the starting policy's held-out measure is reused: an earlier round measured it under the " \
                     f"same key {key}"
    return None, ""


def _trained_shape(policy: PolicySpec, settings: GRPOSettings) -> PolicySpec:
    """The policy as the round samples it: the round's plan budget and agent limit (the grammar fits them)."""
    return dataclasses.replace(policy, max_new_tokens=settings.max_completion_tokens, max_agents=settings.max_agents,
                               grammar=settings.grammar, backend_kind=None)  # a model folder: see backend_spec


def _round_row(round_number, settings, rm_version, trained: TrainOutcome, before: HeldOut, after: HeldOut,
               seconds: float, start_policy: str, verdict: GateVerdict, published: bool, executor: Executor,
               calibration: Calibration | None, heldout_tokens: int, accuracy_key: str) -> dict:
    confidence = settings.gate_confidence
    return {"round": round_number, "policy_checkpoint": policy_name(round_number) if published else None,
            "reward_mode": settings.reward_mode, "rm_version": rm_version, "steps": trained.steps,
            "mean_reward": trained.mean_reward, "kl": trained.kl, "generation_tokens": trained.generation_tokens,
            "reward_tokens": trained.reward_tokens, "rollout_tokens": trained.rollout_tokens,
            "heldout_reward_before": before.measured.reward.mean, "heldout_reward_after": after.measured.reward.mean,
            "heldout_accuracy": after.measured.accuracy.value if after.measured.accuracy else None,
            "seconds": seconds, "start_policy": start_policy,
            "heldout_accuracy_before": before.measured.accuracy.value if before.measured.accuracy else None,
            "promoted": verdict.promoted, "reason": verdict.reason,
            "method": settings.method, "training_tokens": trained.training_tokens,
            "environment": executor.environment, "truth": executor.truth, "gate": verdict.gate, "verdict": verdict.verdict,
            "reward_hacking": verdict.reward_hacking, "confidence": confidence,
            **side_columns("before", before, confidence), **side_columns("after", after, confidence),
            "accuracy_difference_low": verdict.difference[0] if verdict.difference else None,
            "accuracy_difference_high": verdict.difference[1] if verdict.difference else None,
            "difference_method": (difference_method(after.measured.accuracy, before.measured.accuracy)
                                  if verdict.difference else None),
            "heldout_accuracy_key": accuracy_key, "hacking_flag": verdict.hacking_flag,
            "best_policy": verdict.best.policy if verdict.best else None,
            "best_accuracy": verdict.best.accuracy.value if verdict.best else None,
            "best_difference_low": verdict.best_difference[0] if verdict.best_difference else None,
            "best_difference_high": verdict.best_difference[1] if verdict.best_difference else None,
            "seconds_by_phase": json.dumps({k: round(v, 2) for k, v in current_seconds(seconds).items()}),
            "calibration": calibration.to_json() if calibration else None, "heldout_tokens": heldout_tokens}

