"""A GRPO round: train the orchestrator policy on plans rewarded without (or with) rollouts, publish the new
policy checkpoint, and measure it on held-out problems. A failed round publishes nothing: the previous policy stays
in use. Two rounds never run at once on a storage root, from any host (`round_lock`).

The round stands above its plugins: it looks its training method up in the registry and calls it; the method and the
rewards build on what lies below them (`problems`, `train`, `rewards.Rollouts`), never on the round."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchrm_dagster.contract import NO_VERDICT_KINDS, RunErrorKind
from orchrm_dagster.engine_config import config_to_json
from orchrm_dagster.environments import Executor, executor_for
from orchrm_dagster.faults import fault_point
from orchrm_dagster.grpo import progress
from orchrm_dagster.grpo.barrier import barrier_columns
from orchrm_dagster.grpo.checkpoints import (TOKEN_COLUMNS, append_row, base_model_dir, checkpoint_policies,
                                             checkpoint_row, policy_manifest, policy_name, policy_store,
                                             publish_checkpoint, read_table, round_lock, round_name)
from orchrm_dagster.grpo.gate import UNTRAINED, Accuracy, GateVerdict, Measured, Reward, policy_gate
from orchrm_dagster.grpo.lineage import latest_of_lineage, recipe_problem
from orchrm_dagster.grpo.method_process import train_in_processes
from orchrm_dagster.grpo.methods import METHODS, MethodContext, method_named
from orchrm_dagster.grpo.profile import current_seconds, phase, profiled
from orchrm_dagster.grpo.progress import Planned, reporting
from orchrm_dagster.grpo.problems import round_problems
from orchrm_dagster.grpo.rewards import Rollouts, held_out_rewards, plan_parses
from orchrm_dagster.grpo.settings import GRPOSettings
from orchrm_dagster.grpo.train import MODEL_SUBDIR, TrainOutcome
from orchrm_dagster.llm import BackendSpec, build_backend, unload_model
from orchrm_dagster.mas import is_prompt_file, load_prompt
from orchrm_dagster.orchestration import PolicySpec, Problem, sample_plans
from orchrm_dagster.rm import Calibration, champion_calibration, champion_scorer, domain_of, trained_on
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


# Why a held-out plan measured nothing: the orchestrator produced no plan, or its execution failed for a reason of the
# environment's, not the plan's (a plan that does not parse is the policy's own doing: measured, as incorrect)
FAILED_KINDS = NO_VERDICT_KINDS  # a held-out plan whose run failed so is no measurement
HELD_OUT_SEED_OFFSET = 10_000  # held-out plans are seeded apart from the training's
HELD_OUT_PLANS_FILE = "heldout_plans.parquet"  # in the round's work folder: each side's plans as measured


@dataclass(frozen=True)
class HeldOut:
    """A policy measured on the held-out problems (one side of the gate), the key of everything that shaped its
    plans (`held_out_key`), and the plans themselves with what became of each (none for a reused measure)."""

    measured: Measured
    key: str
    plans: list[dict] = dataclasses.field(default_factory=list)  # problem_id, plan, parses, score, correct, failure
    calibration: Calibration | None = None  # what predicted its accuracy (`measured.predicted`)
    tokens: int = 0  # what measuring it cost: the plans sampled (prompt and completion), executed and scored

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
        outcome = _run_round(root, round_number, settings, registry, subagents, on_step)
    return dataclasses.replace(outcome, profile=dict(profile.seconds))


def _run_round(root, round_number, settings, registry, subagents, on_step) -> RoundOutcome:
    started = time.perf_counter()
    policy, model_dir = starting_policy(root, settings, round_number, registry)
    policy = _trained_shape(policy, settings)
    domain = domain_of(settings.benchmark)
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
    before = reused_measure(root, key, settings)
    calibration = before.calibration if before else None  # a reused side's prediction came from its calibration
    calibration_tokens = 0
    if calibration is None:
        with phase("calibration (runs the champion never trained on, scored)"):
            calibration, calibration_tokens = champion_calibration(root, rm_version, domain, scorer)
    measure = HeldOutMeasure(held_out, settings, scorer, subagents, executor, rm_version, calibration)
    held_out_plans = Planned("held-out", len(held_out) * settings.heldout_samples)
    progress.plan(([] if before else [held_out_plans])
                  + ([Planned("training", settings.steps)] if settings.method == "grpo" else []) + [held_out_plans])
    work = local_work_dir(root) / "grpo" / round_name(round_number)
    start_file = work.with_name(f"{work.name}-{START_MEASURE_FILE}")
    if before is None:
        before = attempted_start_measure(start_file, key)
        if before is not None:
            on_step(f"round {round_number}: the starting policy's held-out measure is the one an earlier attempt of "
                    f"this round took (killed after it)")
    if before is None:
        before = measure(policy, model_dir)
        keep_start_measure(start_file, before)
    else:
        on_step(f"round {round_number}: the starting policy's held-out measure is reused: an earlier round measured "
                f"it under the same key {before.key}")
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
    if trained.untrained is not None:  # nothing new to measure or publish: the starting policy stays in use
        verdict = GateVerdict(UNTRAINED, trained.untrained, settings.policy_gate)
        after, checkpoint = before, None
    else:
        # sampled as its start was (grammar, top-p, plan budget, agents): only the weights differ
        checkpoint = dataclasses.replace(policy, name=policy_name(round_number), kind="checkpoint", model=None,
                                         checkpoint_path=str(new_policy), step=round_number)
        on_step(f"round {round_number}: held-out plans of the new policy")
        after = measure(checkpoint, str(new_policy))
        verdict = policy_gate(before.measured, after.measured, settings.gate_rule)
    said = verdict.reason if verdict.reason.startswith(verdict.verdict) else f"{verdict.verdict}: {verdict.reason}"
    on_step(f"round {round_number}: {said}")
    keep_held_out_plans(work, before, after)
    row = _round_row(round_number, settings, rm_version, trained, before, after, time.perf_counter() - started,
                     policy.name, verdict, published=checkpoint is not None, executor=executor,
                     calibration=calibration, heldout_tokens=calibration_tokens + before.tokens
                     + (after.tokens if after is not before else 0)) | started_on
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
    start_file.unlink(missing_ok=True)
    return RoundOutcome(round_number, row["policy_checkpoint"], path, row, trained.log_history,
                        trained.generation_seconds)


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


START_MEASURE_FILE = "start_measure.json"  # beside the round's work folder (which a training may start over)


def keep_start_measure(path, held: HeldOut) -> None:
    """The starting policy's held-out measure, kept for the round's next attempt should this one be killed: with
    real sub-agents it can take longer than the training. Written whole (a rename) or not at all."""
    data = dataclasses.asdict(held) | {"calibration": held.calibration.to_json() if held.calibration else None}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data))
    partial.replace(path)


def attempted_start_measure(path, key: str) -> HeldOut | None:
    """The measure an earlier, killed attempt of the round took of its start, if it was taken under the same key
    (`held_out_key`: the same policy, problems, seeds, champion and environment) and no plan of it failed."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("key") != key or data["measured"]["failed"]:
        return None
    measured = data["measured"]
    accuracy = Accuracy(**measured["accuracy"]) if measured["accuracy"] else None
    calibration = Calibration.from_json(data["calibration"]) if data["calibration"] else None
    return HeldOut(Measured(Reward(**measured["reward"]), accuracy, measured["failed"], measured["failure"],
                            measured["predicted"]), key, data["plans"], calibration, data["tokens"])


def _trained_shape(policy: PolicySpec, settings: GRPOSettings) -> PolicySpec:
    """The policy as the round samples it: the round's plan budget and agent limit (the grammar fits them)."""
    return dataclasses.replace(policy, max_new_tokens=settings.max_completion_tokens, max_agents=settings.max_agents,
                               grammar=settings.grammar, backend_kind=None)  # a model folder: see backend_spec


@dataclass(frozen=True)
class HeldOutMeasure:
    """How a round measures a policy on its held-out problems: `heldout_samples` plans per problem sampled with fixed
    seeds, executed (with `heldout_execute`) in the round's environment and scored by the champion; each side of
    the gate is one call."""

    problems: list[Problem]
    settings: GRPOSettings
    scorer: object
    subagents: BackendSpec
    executor: Executor
    rm_version: int
    calibration: Calibration | None = None

    def key(self, policy: PolicySpec) -> str:
        return held_out_key(policy, self.problems, self.settings, self.rm_version, self.executor, self.subagents)

    def __call__(self, policy: PolicySpec, model_dir: str) -> HeldOut:
        settings = self.settings
        backend = build_backend(_held_out_batches(
            dataclasses.replace(policy, checkpoint_path=model_dir).backend_spec(self.subagents),
            settings.heldout_batch_size))
        sampled = dataclasses.replace(policy, temperature=settings.heldout_temperature)
        with phase("held-out sampling (policy load included)"):
            samples = self._sample(sampled, backend)
        unload_model(model_dir)  # neither it nor its decoding caches stay in memory through training
        plans = [{"problem_id": s.problem_id, "sample_index": s.sample_index, "plan": s.plan,
                  "parses": plan_parses(s.plan), "score": None, "correct": None,
                  "failure": s.plan_error if s.plan_error_kind == RunErrorKind.GENERATION_FAILED.value else None}
                 for s in samples]
        tokens = sum(s.orchestrator_prompt_tokens + s.orchestrator_completion_tokens for s in samples)
        if settings.heldout_execute:
            tokens += self._execute(samples, plans)
        with phase("held-out scoring"):
            tokens += self._score(samples, plans)
        return HeldOut(measured_side(plans, settings.unparseable_margin, settings.heldout_execute, self.calibration),
                       self.key(policy), plans, self.calibration, tokens)

    def _sample(self, policy: PolicySpec, backend) -> list:
        """The held-out plans, a decoding batch of problems at a time (each plan's seed is its own: the chunks
        change nothing of what is sampled), its progress said as it goes."""
        settings = self.settings
        per_call = max(1, settings.heldout_batch_size // settings.heldout_samples)
        progress.begin(f"held-out plans of {policy.name}", "held-out",
                       len(self.problems) * settings.heldout_samples, "plans sampled")
        samples = []
        fault_point("round.heldout_sampling")
        for start in range(0, len(self.problems), per_call):
            samples += sample_plans(policy, backend, self.problems[start:start + per_call], settings.heldout_samples,
                                    seed=settings.seed + HELD_OUT_SEED_OFFSET)
            progress.advance(to=len(samples))
        return samples

    def _execute(self, samples: list, plans: list[dict]) -> int:
        """Each plan executed and labeled (or its failure kept); the sub-agent tokens it cost."""
        todo = [i for i, plan in enumerate(plans) if plan["failure"] is None]
        rollouts = Rollouts(self.executor)
        with phase("held-out execution"):
            fault_point("round.heldout_execution")
            labeled = rollouts.run_samples([samples[i] for i in todo])
        for i, item in zip(todo, labeled):
            if item.result.error_kind in FAILED_KINDS:
                plans[i]["failure"] = f"execution failed ({item.result.error_kind.value}): {item.result.error}"
            else:
                plans[i]["correct"] = item.correct
        return rollouts.tokens

    def _score(self, samples: list, plans: list[dict]) -> int:
        """Each parseable plan's champion score (or its failure kept); the tokens the champion read."""
        todo = [i for i, plan in enumerate(plans) if plan["failure"] is None and plan["parses"]]
        if not todo:
            return 0
        cause, lengths = None, []
        try:
            scores, lengths = self.scorer.score_with_lengths([samples[i].question for i in todo],
                                                             [samples[i].plan for i in todo])
        except Exception as error:  # a scorer that raised measured nothing of these plans
            scores = [None] * len(todo)
            cause = f"scoring failed: {type(error).__name__}: {error}"
        for i, score in zip(todo, scores):
            if score is None or not math.isfinite(score):
                plans[i]["failure"] = cause if score is None else f"the champion scored the plan {score}"
            else:
                plans[i]["score"] = float(score)
        return sum(lengths)


def measured_side(plans: list[dict], margin: float, executed: bool, calibration: Calibration | None) -> Measured:
    """One side of the gate from its plans: the failed ones set apart (counted, the first cause kept), the rest
    rewarded by the rule (`placed_rewards`), counted correct where executed, and predicted by the calibration (a plan
    that does not parse answers nothing). No failed plan and no non-finite number reaches the gate."""
    failed = [p for p in plans if p["failure"] is not None]
    kept = [p for p in plans if p["failure"] is None]
    rewards = placed_rewards([p["score"] for p in kept], [p["problem_id"] for p in kept], margin)
    reward = Reward.of(rewards) if rewards else Reward.unparseable(len(kept))
    accuracy = Accuracy(sum(bool(p["correct"]) for p in kept), len(kept)) if executed and kept else None
    predicted = None
    if calibration is not None and kept:
        predicted = math.fsum(calibration.probability(p["score"]) if p["score"] is not None else 0.0
                              for p in kept) / len(kept)
    return Measured(reward, accuracy, len(failed), failed[0]["failure"] if failed else None, predicted)


def held_out_key(policy: PolicySpec, problems: list[Problem], settings: GRPOSettings, rm_version: int,
                 executor: Executor, subagents: BackendSpec) -> str:
    """Everything that decides a policy's held-out plans and how they are measured, hashed: the policy (its name,
    model or model folder, prompt, kind and top-p), the problems, their samples, seeds and temperature, the plan's
    agents, tokens and grammar, the champion that scores them, how (`scoring`) and how unparseable plans are placed,
    the environment and its truth, the execution's settings and the sub-agents' backend (which also decodes the
    policy). One measure stands in for another only under the same key (`reused_measure`), and each
    round records its sides' keys."""
    shaped = {"policy": [policy.name, policy.model, policy.checkpoint_path if policy.kind != "checkpoint" else None,
                         prompt_identity(policy.prompt), policy.kind, policy.top_p],
              "benchmark": settings.benchmark, "problems": [p.problem_id for p in problems],
              "samples": settings.heldout_samples, "seed": settings.seed + HELD_OUT_SEED_OFFSET,
              "temperature": settings.heldout_temperature, "max_agents": settings.max_agents,
              "max_tokens": settings.max_completion_tokens, "grammar": settings.grammar,
              "rm_version": rm_version, "unparseable_margin": settings.unparseable_margin,
              "executed": settings.heldout_execute, "environment": executor.environment, "truth": executor.truth,
              "execution": config_to_json(settings.execution), "scoring": config_to_json(settings.scoring),
              "subagents": config_to_json(subagents)}
    return hashlib.sha256(json.dumps(shaped, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prompt_identity(prompt: str) -> str:
    """A shipped prompt by its name; a team's prompt file by its text, so that editing the file is a new measure."""
    return load_prompt(prompt) if is_prompt_file(prompt) else prompt


def _held_out_batches(spec, batch_size: int):
    """The policy's backend decoding `batch_size` held-out plans together, where the backend batches in-process."""
    return dataclasses.replace(spec, max_batch_size=batch_size) if hasattr(spec, "max_batch_size") else spec


def placed_rewards(scores: list[float | None], problem_ids: list[str], margin: float) -> list[float] | None:
    """The held-out reward of each plan: its champion score, or, for a plan that does not parse (None), the training
    rule's place, `margin` below the lowest parseable plan of its problem on the champion's raw scale (so before and
    after are measured alike, whatever the champion's offset); where none of a problem's plans parses, below the
    lowest plan of the whole measurement. None where no plan parses at all: there is no reward to speak of."""
    if not any(score is not None for score in scores):
        return None
    by_problem = held_out_rewards(scores, problem_ids, margin)
    return held_out_rewards(by_problem, [None] * len(scores), margin)


def held_out_plan_rewards(samples: list, scorer, margin: float) -> list[float] | None:
    """`placed_rewards` of samples (question, plan, problem_id) scored by `scorer`."""
    parses = [plan_parses(s.plan) for s in samples]
    valid = [s for s, parsed in zip(samples, parses) if parsed]
    scores = iter(scorer.score([s.question for s in valid], [s.plan for s in valid]) if valid else [])
    return placed_rewards([next(scores) if parsed else None for parsed in parses], [s.problem_id for s in samples],
                          margin)


def keep_held_out_plans(work, before: HeldOut, after: HeldOut) -> None:
    """Each side's held-out plans, as measured, in the round's work folder (heldout_plans.parquet): what the gate
    decided on, to read back (a reused side has none)."""
    import polars as pl

    sides = [("before", before)] + ([("after", after)] if after is not before else [])
    rows = [{"side": side, **plan} for side, held in sides for plan in held.plans]
    if rows:
        work.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(rows, infer_schema_length=None).write_parquet(work / HELD_OUT_PLANS_FILE)


def reused_measure(root: StorageRoot, key: str, settings: GRPOSettings) -> HeldOut | None:
    """An earlier held-out measure taken under the same key stands for this one: a checkpoint's own, taken after its
    round, or one an earlier round took of the same policy before it trained (a loop whose rounds are not promoted
    starts each from the same policy: it is measured once). Never a side that had a failed plan, and, with
    heldout_execute, only one with an accuracy."""
    for row in reversed(read_table(root, "grpo_rounds")):
        for side in ("after", "before"):
            if (row[f"heldout_key_{side}"] == key and not row[f"heldout_failed_{side}"]
                    and not (settings.heldout_execute and row[f"heldout_correct_{side}"] is None)):
                return _held_out_of(row, side, key)
    return None


def _held_out_of(row: dict, side: str, key: str) -> HeldOut:
    plans = row[f"heldout_plans_{side}"]
    correct = row[f"heldout_correct_{side}"]
    mean = row[f"heldout_reward_{side}"]
    reward = Reward(mean, row[f"heldout_reward_std_{side}"] or 0.0, plans)
    accuracy = Accuracy(correct, plans) if correct is not None else None
    calibration = Calibration.from_json(row["calibration"]) if row["calibration"] else None
    return HeldOut(Measured(reward, accuracy, 0, None, row[f"heldout_predicted_accuracy_{side}"]), key, [],
                   calibration)


def _round_row(round_number, settings, rm_version, trained: TrainOutcome, before: HeldOut, after: HeldOut,
               seconds: float, start_policy: str, verdict: GateVerdict, published: bool, executor: Executor,
               calibration: Calibration | None, heldout_tokens: int) -> dict:
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
            **_side_columns("before", before, confidence), **_side_columns("after", after, confidence),
            "accuracy_difference_low": verdict.difference[0] if verdict.difference else None,
            "accuracy_difference_high": verdict.difference[1] if verdict.difference else None,
            "seconds_by_phase": json.dumps({k: round(v, 2) for k, v in current_seconds(seconds).items()}),
            "calibration": calibration.to_json() if calibration else None, "heldout_tokens": heldout_tokens}


def _side_columns(side: str, held_out: HeldOut, confidence: float) -> dict:
    """The counts and intervals of one side of the gate (`grpo_rounds`' *_before / *_after columns)."""
    measured = held_out.measured
    accuracy = measured.accuracy
    low, high = accuracy.interval(confidence) if accuracy else (None, None)
    reward_low, reward_high = measured.reward.interval(confidence)
    return {f"heldout_plans_{side}": measured.reward.plans,
            f"heldout_correct_{side}": accuracy.correct if accuracy else None,
            f"heldout_accuracy_low_{side}": low, f"heldout_accuracy_high_{side}": high,
            f"heldout_reward_std_{side}": measured.reward.std,
            f"heldout_reward_low_{side}": reward_low, f"heldout_reward_high_{side}": reward_high,
            f"heldout_key_{side}": held_out.key, f"heldout_failed_{side}": measured.failed,
            f"heldout_failure_{side}": measured.failure,
            f"heldout_predicted_accuracy_{side}": measured.predicted}
