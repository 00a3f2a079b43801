"""A policy measured on the round's held-out problems: one side of the policy gate.

`heldout_samples` plans per held-out problem, sampled with fixed seeds, executed in the round's environment (with
`heldout_execute`) and scored by the champion; each problem's counts are kept, so the gate pairs the two sides problem
by problem (`grpo.gate.paired_difference`). Two keys say what a measure stands for:

- `held_out_key`: everything that shaped the plans and their scores (the policy, the champion and how it scores, the
  problems' content, seeds, samples, the environment and execution, device and dtype as they resolved). A measure is
  reused, by a later round or a retried attempt, only under the same key.
- `accuracy_key`: what the accuracy itself depends on besides the policy (the problems' content, seeds, samples,
  temperature, plan shape, environment and execution): every policy measured under one accuracy key is comparable,
  which is how a round is held against the best promoted accuracy (`best_promoted`), not only its start."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from orchrm_dagster.contract import NO_VERDICT_KINDS, RunErrorKind
from orchrm_dagster.engine_config import config_to_json
from orchrm_dagster.environments import Executor
from orchrm_dagster.faults import fault_point
from orchrm_dagster.grpo import progress
from orchrm_dagster.grpo.checkpoints import read_table
from orchrm_dagster.grpo.gate import Accuracy, Measured, Reward
from orchrm_dagster.grpo.profile import phase
from orchrm_dagster.grpo.rewards import Rollouts, held_out_rewards, plan_parses
from orchrm_dagster.grpo.settings import GRPOSettings
from orchrm_dagster.llm import BackendSpec, build_backend, unload_model
from orchrm_dagster.mas import is_prompt_file, load_prompt
from orchrm_dagster.orchestration import PolicySpec, Problem, sample_plans
from orchrm_dagster.rm import Calibration
from orchrm_dagster.storage import StorageRoot

# Why a held-out plan measured nothing: the orchestrator produced no plan, or its execution failed for a reason of the
# environment's, not the plan's (a plan that does not parse, or that ran past its time budget, is the policy's own
# doing: measured, as incorrect)
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
    accuracy = None
    if measured["accuracy"]:
        kept = measured["accuracy"]
        accuracy = Accuracy(kept["correct"], kept["plans"], tuple(tuple(c) for c in kept.get("by_problem") or ()))
    calibration = Calibration.from_json(data["calibration"]) if data["calibration"] else None
    rewards = tuple((p, r) for p, r in measured.get("reward_by_problem") or ())
    return HeldOut(Measured(Reward(**measured["reward"]), accuracy, measured["failed"], measured["failure"],
                            measured["predicted"], rewards, measured.get("unpredicted")), key, data["plans"],
                   calibration, data["tokens"])


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
    spend: Callable[[str, int], None] = lambda kind, tokens: None  # each phase's tokens, as soon as they are spent

    def key(self, policy: PolicySpec) -> str:
        return held_out_key(policy, self.problems, self.settings, self.rm_version, self.executor, self.subagents)

    @property
    def accuracy_key(self) -> str:
        return accuracy_key(self.problems, self.settings, self.executor, self.subagents)

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
        self.spend("heldout", tokens)
        if settings.heldout_execute:
            executed = self._execute(samples, plans)
            self.spend("heldout", executed)
            tokens += executed
        with phase("held-out scoring"):
            scored = self._score(samples, plans)
        self.spend("heldout", scored)
        tokens += scored
        return HeldOut(measured_side(plans, settings.unparseable_margin, settings.heldout_execute, self.calibration,
                                     scored=self.scorer is not None),
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
        """Each parseable plan's champion score (or its failure kept); the tokens the champion read. Without a
        reward model (an execution-only round) nothing is scored."""
        todo = [i for i, plan in enumerate(plans) if plan["failure"] is None and plan["parses"]]
        if not todo or self.scorer is None:
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


def measured_side(plans: list[dict], margin: float, executed: bool, calibration: Calibration | None,
                  scored: bool = True) -> Measured:
    """One side of the gate from its plans: the failed ones set apart (counted, the first cause kept), the rest
    rewarded by the rule (`placed_rewards`), counted correct where executed, problem by problem, and predicted by the
    calibration (a plan that does not parse answers nothing). No failed plan and no non-finite number reaches the
    gate."""
    failed = [p for p in plans if p["failure"] is not None]
    kept = [p for p in plans if p["failure"] is None]
    rewards = placed_rewards([p["score"] for p in kept], [p["problem_id"] for p in kept], margin)
    reward = Reward.of(rewards) if rewards else Reward.unparseable(len(kept)) if scored else Reward.unscored(len(kept))
    accuracy = Accuracy.of_problems(problem_counts(kept)) if executed and kept else None
    predicted = None
    unpredicted = unpredicted_reason(calibration) if scored else "no reward model (an execution-only round)"
    if unpredicted is None and kept:
        predicted = math.fsum(calibration.probability(p["score"]) if p["score"] is not None else 0.0
                              for p in kept) / len(kept)
    return Measured(reward, accuracy, len(failed), failed[0]["failure"] if failed else None, predicted,
                    problem_means([p["problem_id"] for p in kept], rewards or []), unpredicted)


def unpredicted_reason(calibration: Calibration | None) -> str | None:
    """Why the champion's calibration cannot predict a side's accuracy (None: it can)."""
    if calibration is None:
        return ("the champion has no calibration (too few correct or incorrect labeled runs it never trained on, "
                "or none kept its pairs)")
    return calibration.untrusted_reason()


def problem_counts(plans: list[dict]) -> tuple[tuple[str, int, int], ...]:
    """(problem_id, correct, plans) of each problem among `plans`."""
    counts: dict[str, list[int]] = {}
    for plan in plans:
        tally = counts.setdefault(plan["problem_id"], [0, 0])
        tally[0] += bool(plan["correct"])
        tally[1] += 1
    return tuple((problem, c, n) for problem, (c, n) in sorted(counts.items()))


def problem_means(problem_ids: list[str], values: list[float]) -> tuple[tuple[str, float], ...]:
    """The mean of `values` of each problem (empty when there are none)."""
    by_problem: dict[str, list[float]] = {}
    for problem, value in zip(problem_ids, values):
        by_problem.setdefault(problem, []).append(value)
    return tuple((problem, math.fsum(v) / len(v)) for problem, v in sorted(by_problem.items()))


def accuracy_key(problems: list[Problem], settings: GRPOSettings, executor: Executor, subagents: BackendSpec) -> str:
    """What a held-out accuracy depends on besides the policy: the problems (by id and content: a corrected
    question or answer under the same id is another problem), their samples, seeds and temperature, the plan's
    agents, tokens and grammar, whether plans execute, the environment and its truth, the execution's settings and
    the sub-agents' backend, device and dtype as they resolve on this machine. Every policy measured under one key is
    measured alike: their accuracies compare."""
    return _digest(_accuracy_shape(problems, settings, executor, subagents))


def held_out_key(policy: PolicySpec, problems: list[Problem], settings: GRPOSettings, rm_version: int,
                 executor: Executor, subagents: BackendSpec) -> str:
    """Everything that decides a policy's held-out plans and how they are measured, hashed: what `accuracy_key`
    hashes, the policy (its name, model or model folder, prompt, kind and top-p), the champion that scores the plans,
    how (`scoring`, its device and dtype resolved) and how unparseable plans are placed. One measure stands in for
    another only under the same key (`reused_measure`), and each round records its sides' keys."""
    shaped = _accuracy_shape(problems, settings, executor, subagents) | {
        "policy": [policy.name, policy.model, policy.checkpoint_path if policy.kind != "checkpoint" else None,
                   prompt_identity(policy.prompt), policy.kind, policy.top_p],
        "rm_version": rm_version, "unparseable_margin": settings.unparseable_margin,
        "scoring": resolved(config_to_json(settings.scoring))}
    return _digest(shaped)


def _accuracy_shape(problems, settings, executor, subagents) -> dict:
    return {"benchmark": settings.benchmark,
            "problems": [[p.problem_id, _content(p)] for p in problems],
            "samples": settings.heldout_samples, "seed": settings.seed + HELD_OUT_SEED_OFFSET,
            "temperature": settings.heldout_temperature, "max_agents": settings.max_agents,
            "max_tokens": settings.max_completion_tokens, "grammar": settings.grammar,
            "executed": settings.heldout_execute, "environment": executor.environment, "truth": executor.truth,
            "execution": config_to_json(settings.execution), "subagents": resolved(config_to_json(subagents))}


def _content(problem: Problem) -> str:
    text = json.dumps([problem.question, problem.answer, problem.answer_type, problem.choices])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _digest(shaped: dict) -> str:
    return hashlib.sha256(json.dumps(shaped, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resolved(config):
    """A config's JSON with every `device` and `dtype` as it resolves here: "auto" is hashed as what it becomes (a
    CPU's fp32 measure is not a GPU's bf16 one)."""
    if isinstance(config, list):
        return [resolved(item) for item in config]
    if not isinstance(config, dict):
        return config
    out = {key: resolved(value) for key, value in config.items()}
    if out.get("device") == "auto":
        from orchrm_dagster.devices import resolve_device

        out["device"] = resolve_device("auto")
    if out.get("dtype") == "auto":
        from orchrm_dagster.rm import resolve_dtype

        out["dtype"] = resolve_dtype("auto", out.get("device", "cpu"))
    return out


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
    heldout_execute, only one whose accuracy kept its problems' counts (the gate pairs them)."""
    for row in reversed(read_table(root, "grpo_rounds")):
        for side in ("after", "before"):
            if (row[f"heldout_key_{side}"] == key and not row[f"heldout_failed_{side}"]
                    and not (settings.heldout_execute and not row.get(f"heldout_by_problem_{side}"))):
                return held_out_of(row, side)
    return None


def best_promoted(root: StorageRoot, key: str, start_policy: str,
                  start: Accuracy | None) -> tuple[str, Accuracy] | None:
    """The best accuracy measured under the accuracy key `key` of a policy other than the start that was ever in use
    (a round's start, or a promoted checkpoint), with its name, where it is above the start's own (`start`, as
    measured now); None otherwise (the start is the other side of the gate already).
    A round is held against it as well as against its start, so that rounds each within the margin of their start
    cannot walk accuracy down round by round."""
    best: tuple[str, Accuracy] | None = None
    for row in read_table(root, "grpo_rounds"):
        if row.get("heldout_accuracy_key") != key:
            continue
        sides = [("before", row["start_policy"])] + ([("after", row["policy_checkpoint"])] if row["promoted"] else [])
        for side, name in sides:
            measured = held_out_of(row, side).measured.accuracy
            if name == start_policy or row[f"heldout_failed_{side}"] or measured is None or not measured.by_problem:
                continue
            if best is None or measured.value > best[1].value:
                best = (name, measured)
    return best if best is not None and (start is None or best[1].value > start.value) else None


def held_out_of(row: dict, side: str) -> HeldOut:
    """One side of a recorded round, as the gate reads it (no plans: they stay in the round's work folder)."""
    plans = row[f"heldout_plans_{side}"]
    correct = row[f"heldout_correct_{side}"]
    mean = row[f"heldout_reward_{side}"]
    reward = Reward(mean, row[f"heldout_reward_std_{side}"] or 0.0, plans)
    by_problem = json.loads(row.get(f"heldout_by_problem_{side}") or "{}")
    accuracy = None
    if correct is not None:
        accuracy = (Accuracy.of_problems([(p, c, n) for p, (c, n, _) in by_problem.items()]) if by_problem
                    else Accuracy(correct, plans))
    rewards = tuple((p, r) for p, (_, _, r) in by_problem.items() if r is not None)
    calibration = Calibration.from_json(row["calibration"]) if row["calibration"] else None
    return HeldOut(Measured(reward, accuracy, 0, None, row[f"heldout_predicted_accuracy_{side}"], rewards),
                   row[f"heldout_key_{side}"], [], calibration)


def side_columns(side: str, held_out: HeldOut, confidence: float) -> dict:
    """The counts and intervals of one side of the gate (`grpo_rounds`' *_before / *_after columns)."""
    measured = held_out.measured
    accuracy = measured.accuracy
    low, high = accuracy.interval(confidence) if accuracy else (None, None)
    reward_low, reward_high = measured.reward.interval(confidence)
    rewards = dict(measured.reward_by_problem)
    counts = {p: [c, n, rewards.get(p)] for p, c, n in (accuracy.by_problem if accuracy else ())}
    return {f"heldout_plans_{side}": measured.reward.plans,
            f"heldout_correct_{side}": accuracy.correct if accuracy else None,
            f"heldout_accuracy_low_{side}": low, f"heldout_accuracy_high_{side}": high,
            f"heldout_reward_std_{side}": measured.reward.std,
            f"heldout_reward_low_{side}": reward_low, f"heldout_reward_high_{side}": reward_high,
            f"heldout_key_{side}": held_out.key, f"heldout_failed_{side}": measured.failed,
            f"heldout_failure_{side}": measured.failure,
            f"heldout_predicted_accuracy_{side}": measured.predicted,
            f"heldout_by_problem_{side}": json.dumps(counts) if counts else None}
