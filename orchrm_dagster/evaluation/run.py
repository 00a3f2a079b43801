"""The `evaluation` step: on held-out problems, how accurate is each way of choosing among N runs, and what does
each cost in verification and execution tokens. Appends one evaluation to the evaluation tables."""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import EVALUATION, EVALUATION_PROBLEMS, JUDGE_CACHE, VERIFIER_SCORES
from orchrm_dagster.evaluation.costs import verification_ratios
from orchrm_dagster.evaluation.judges import CandidateSet, JudgedSets, Verdict, judge_sets
from orchrm_dagster.evaluation.methods import (EvaluationMethod, MethodKind, Preparation, method_named, prepare_pool,
                                               timed_into)
from orchrm_dagster.evaluation.methods.common import (candidate_set_members, judged, one_sample, sampling_costs,
                                                      token_means)
from orchrm_dagster.evaluation.plots import accuracy_vs_n, accuracy_vs_tokens
from orchrm_dagster.evaluation.pools import GROUP, candidate_pool, run_texts
from orchrm_dagster.evaluation.settings import EvaluationSettings
from orchrm_dagster.llm import LLMBackend
from orchrm_dagster.rm import champion_refusals, current_champions, domain_of, newest_champion, pair_problems
from orchrm_dagster.storage import StorageRoot, scan_table

NORMAL_LIMIT = 5000  # above this many problems the bootstrap's normal limit gives the interval
SET_ROWS = 4_000_000  # candidate-set rows held at once (about 300 MB)


@dataclass
class EvaluationOutcome:
    evaluation_id: str
    rm_version: int | None  # the newest champion (each row names the champion of its benchmark's domain)
    rows: list[dict]
    problems: int = 0
    held_out_excluded: int = 0  # problems left out because the reward model saw them in a pair
    runs_without_score: int = 0
    judge_calls: int = 0
    judge_cached: int = 0
    judge_unparsed: int = 0
    plots: dict[str, bytes] = field(default_factory=dict)
    plot_paths: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    method_reports: dict[str, dict] = field(default_factory=dict)  # figures a method's `prepare` reported, by method
    seconds: float = 0.0
    method_seconds: dict[str, float] = field(default_factory=dict)  # each method's wall time: prepare, choose, judge
    new_verdicts: list[Verdict] = field(default_factory=list, repr=False)  # judged now, appended to judge_cache

    @property
    def verification_ratios(self) -> list[dict]:
        """Per (benchmark, policy, N): verification tokens of the trajectory judge (full, and truncated where
        evaluated) over orchrm_bon's (see `costs.verification_ratios`)."""
        return verification_ratios(self.rows)


def evaluate(root: StorageRoot, settings: EvaluationSettings, judge_backend: LLMBackend | None = None,
             now: datetime | None = None) -> EvaluationOutcome:
    started = time.perf_counter()
    now = now or datetime.now(timezone.utc)
    chosen = [method_named(name) for name in settings.methods]
    left_out = {method.name: method.left_out(settings) for method in chosen if method.left_out}
    chosen = [method for method in chosen if not left_out.get(method.name)]
    champions, seen = _reward_model(root)
    rm_version = newest_champion(champions)  # names the champions in the id; each row names its domain's
    evaluation_id = f"{now:%Y%m%dT%H%M%S}-v{rm_version or 0}-{_digest(settings, now)}"
    outcome = EvaluationOutcome(evaluation_id, rm_version, [], notes=[note for note in left_out.values() if note])
    unrecorded = sorted({champions[domain] for domain, problems in seen.items() if problems is None})
    if unrecorded:
        paired = frozenset(scan_table(root, "pairs").select("problem_id").unique().collect()["problem_id"].to_list())
        seen = {domain: paired if problems is None else problems for domain, problems in seen.items()}
        outcome.notes.append(f"reward model {', '.join(f'v{v}' for v in unrecorded)} did not record its pairs' "
                             f"problems: the problems of the current pairs table are held out instead")
    pool = candidate_pool(root, settings, champions, seen)
    outcome.held_out_excluded = len(frozenset().union(*seen.values()))
    outcome.runs_without_score = pool.filter(pl.col("score").is_null()).height
    refused = _refused_benchmarks(root, pool, champions) if any(m.needs_reward_model for m in chosen) else {}
    outcome.notes += [f"{method.name} on {benchmark}: not evaluated, {reason}" for method in chosen
                      if method.needs_reward_model for benchmark, reason in sorted(refused.items())]
    judges = [method.name for method in chosen if method.needs_llm]
    if judges and settings.judge.ns:
        outcome.notes.append(f"{', '.join(judges)}: evaluated at N = {', '.join(map(str, settings.judge.ns))} only "
                             f"(judge.ns); a benchmark and policy with fewer runs per problem has no rows of them")
    preparation = Preparation(root, pool, settings, evaluation_id, champions, seen, seconds=outcome.method_seconds)
    prepared = prepare_pool(preparation, chosen)
    pool, verifier_rows = prepared.pool, prepared.tables.get("verifier_scores")
    outcome.notes += prepared.notes
    outcome.method_reports = prepared.reports
    per_problem = _per_problem_results(root, pool, chosen, settings, judge_backend, outcome, frozenset(refused))
    outcome.rows = _rows(per_problem, settings, evaluation_id, champions, now)
    outcome.problems = per_problem.select(GROUP).unique().height if per_problem.height else 0
    _write(root, outcome, per_problem, verifier_rows)
    outcome.seconds = time.perf_counter() - started
    return outcome


def _reward_model(root: StorageRoot) -> tuple[dict[str, int], dict[str, frozenset[str] | None]]:
    """Each domain's champion, and the problems of the pairs it saw (None: it did not record them): a problem is
    held out when the champion of its domain never saw it."""
    champions = current_champions(root)
    seen = {version: pair_problems(root, version) for version in set(champions.values())}
    return champions, {domain: seen[version] for domain, version in champions.items()}


def _refused_benchmarks(root: StorageRoot, pool: pl.DataFrame, champions: dict[str, int]) -> dict[str, str]:
    """Benchmark -> why a method that ranks by the champion's scores refuses it: its domain has no champion."""
    domains = {b: domain_of(b) for b in (pool["benchmark"].unique().sort().to_list() if pool.height else [])}
    refusals = champion_refusals(root, set(domains.values()), champions)
    return {b: refusals[domain] for b, domain in domains.items() if domain in refusals}


def _digest(settings: EvaluationSettings, now: datetime) -> str:
    return hashlib.sha256(f"{settings}{now.isoformat()}".encode()).hexdigest()[:8]


# ---------------------------------------------------------------- methods


def _per_problem_results(root, pool: pl.DataFrame, chosen: list[EvaluationMethod], settings: EvaluationSettings,
                         judge_backend, outcome: EvaluationOutcome, refused: frozenset[str] = frozenset()
                         ) -> pl.DataFrame:
    """`refused`: benchmarks whose domain has no champion, which the methods that rank by its scores leave out."""
    results = []
    baseline = one_sample(pool)
    means = token_means(pool)
    keys = pool.select("pkey", *GROUP).unique()  # names the set-based methods' per-pkey rows
    scorable = ~pl.col("benchmark").is_in(sorted(refused))

    def rows_of(method: EvaluationMethod, frame: pl.DataFrame) -> pl.DataFrame:
        return frame.filter(scorable) if method.needs_reward_model and refused else frame

    for n in sorted(set(settings.ns)):
        if n == 1:  # one candidate: every method evaluated at N=1 takes it, and there is nothing to verify
            results += [_tag(rows_of(method, baseline), method, 1, means) for method in chosen
                        if _evaluated_at(method, 1, settings)]
            continue
        at_n = [method for method in chosen if _evaluated_at(method, n, settings)]
        for method in at_n:
            if method.kind is MethodKind.RANKED:
                with timed_into(outcome.method_seconds, method.name):
                    results.append(_tag(method.choose(rows_of(method, pool), n, settings), method, n, means))
        set_based = [method for method in at_n if method.kind is not MethodKind.RANKED]
        for part in _slices(pool, n, settings) if set_based else ():
            members = candidate_set_members(part, n, settings, stream=part["pkey"][0])
            for method in set_based:
                with timed_into(outcome.method_seconds, method.name):
                    frame = _set_choice(root, part, members, method, n, settings, judge_backend, outcome)
                if frame is not None:
                    results.append(_tag(frame.join(keys, on="pkey"), method, n, means))
    if not results:
        return pl.DataFrame(schema={**dict.fromkeys(GROUP, pl.String), "accuracy": pl.Float64,
                                    "verification": pl.Float64, "execution": pl.Float64, "generation": pl.Float64,
                                    "method": pl.String, "n": pl.Int64})
    return pl.concat(results, how="vertical_relaxed")


def _evaluated_at(method: EvaluationMethod, n: int, settings: EvaluationSettings) -> bool:
    if method.max_n is not None and n > method.max_n:
        return False
    return not (method.needs_llm and settings.judge.ns and n not in settings.judge.ns)


def _slices(pool: pl.DataFrame, n: int, settings: EvaluationSettings):
    """The problems with at least N runs, in slices whose candidate-set rows stay near SET_ROWS: memory stays flat
    however many problems are evaluated."""
    eligible = pool.filter(pl.col("m") >= n)
    if not eligible.height:
        return
    problems = max(1, SET_ROWS // (n * max(settings.max_enumerate, settings.draws)))
    for start in range(0, eligible["pkey"].max() + 1, problems):
        part = eligible.filter(pl.col("pkey").is_between(start, start + problems - 1))
        if part.height:
            yield part


def _set_choice(root, pool, members, method: EvaluationMethod, n: int, settings: EvaluationSettings, judge_backend,
                outcome: EvaluationOutcome) -> pl.DataFrame | None:
    if method.kind is MethodKind.CANDIDATE_SET:
        return method.choose(members, n, settings)
    return _judge(root, pool, members, method, n, settings, judge_backend, outcome)


def _tag(frame: pl.DataFrame, method: EvaluationMethod, n: int, means: pl.DataFrame) -> pl.DataFrame:
    return sampling_costs(frame, means, n, method.executes_all).with_columns(
        method=pl.lit(method.name), n=pl.lit(n, dtype=pl.Int64))


def _judge(root, pool: pl.DataFrame, members: pl.DataFrame, method: EvaluationMethod, n: int,
           settings: EvaluationSettings, backend, outcome: EvaluationOutcome) -> pl.DataFrame | None:
    if backend is None:
        if not any(method.name in note for note in outcome.notes):
            outcome.notes.append(f"{method.name}: no judge backend given, not evaluated")
        return None
    judged_runs = (members.filter(pl.col("set_id") < settings.judge.draws).sort("pkey", "set_id", "slot")
                   .join(pool.select("pkey", "idx", "problem_id", "run_id"), on=["pkey", "idx"],
                         maintain_order="left"))
    judged_runs = judged_runs.join(run_texts(root, judged_runs["run_id"].unique().to_list()), on="run_id",
                                   maintain_order="left")
    sets = judged_runs.group_by("pkey", "set_id", maintain_order=True).agg(
        pl.col("problem_id").first(), pl.col("question").first(), pl.col("run_id"))
    shown = method.choose(root, judged_runs)
    candidate_sets = [CandidateSet(method.name, row["problem_id"], row["question"], tuple(row["run_id"]),
                                   tuple(shown[run_id] for run_id in row["run_id"]))
                      for row in sets.iter_rows(named=True)]
    result = judge_sets(candidate_sets, backend, settings.judge, _judge_cache(root))
    _note_judging(outcome, method, n, result)
    picks = pl.DataFrame({"pkey": sets["pkey"], "set_id": sets["set_id"],
                          "slot": [v.choice for v in result.verdicts], "tokens": [v.tokens for v in result.verdicts]},
                         schema={"pkey": pl.Int64, "set_id": pl.Int64, "slot": pl.Int64, "tokens": pl.Int64})
    return judged(members, picks)


def _note_judging(outcome: EvaluationOutcome, method: EvaluationMethod, n: int, result: JudgedSets) -> None:
    outcome.judge_calls += len(result.fresh)
    outcome.judge_cached += result.asked - len(result.fresh)
    outcome.judge_unparsed += sum(not v.parsed for v in result.fresh)
    outcome.new_verdicts += result.fresh
    estimate = "judge prompt lengths are estimated at 4 characters a token (the judge backend has no tokenizer)"
    if result.estimated and estimate not in outcome.notes:
        outcome.notes.append(estimate)
    knockouts = sum(v.calls > 1 for v in result.verdicts)
    cut = sum(v.cut for v in result.verdicts)
    if knockouts:
        outcome.notes.append(f"{method.name} at N={n}: {knockouts} of {len(result.verdicts)} sets did not fit the "
                             f"judge's context whole and were judged in a knockout of groups that fit")
    if cut:
        outcome.notes.append(f"{method.name} at N={n}: {cut} candidates longer than the judge's context were shown "
                             f"cut, with a note saying so")


def _judge_cache(root) -> dict[str, Verdict]:
    rows = scan_table(root, "judge_cache").collect().to_dicts()
    return {row["cache_key"]: Verdict.from_row(row) for row in rows}


# ---------------------------------------------------------------- table, interval, output


def _rows(per_problem: pl.DataFrame, settings: EvaluationSettings, evaluation_id: str, champions: dict[str, int],
          now: datetime) -> list[dict]:
    rows = []
    rng = np.random.default_rng(settings.seed)
    for key, group in per_problem.sort(*GROUP[:2], "method", "n", "problem_id").group_by(
            "benchmark", "policy", "method", "n", maintain_order=True):
        benchmark, policy, method, n = key
        accuracy = group["accuracy"].to_numpy()
        low, high = bootstrap_interval(accuracy, settings.bootstrap, rng)
        rows.append({"evaluation_id": evaluation_id, "benchmark": benchmark, "policy": policy, "method": method,
                     "n": n, "accuracy": float(accuracy.mean()), "ci_low": low, "ci_high": high,
                     "n_problems": len(accuracy), "verification_tokens": float(group["verification"].mean()),
                     "execution_tokens": float(group["execution"].mean()),
                     "rm_version": champions.get(domain_of(benchmark)),
                     "created_at": now.isoformat(), "generation_tokens": float(group["generation"].mean())})
    return rows


def bootstrap_interval(values: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float, float]:
    """95% percentile interval of the mean over problems resampled with replacement (its normal limit above
    NORMAL_LIMIT problems, where resampling costs more than it tells)."""
    count = len(values)
    if count == 1:
        return float(values[0]), float(values[0])
    if count > NORMAL_LIMIT:
        half = 1.96 * values.std(ddof=1) / np.sqrt(count)
        return float(values.mean() - half), float(values.mean() + half)
    means = np.concatenate([values[rng.integers(0, count, size=(min(100, resamples - start), count))].mean(axis=1)
                            for start in range(0, resamples, 100)])
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _write(root: StorageRoot, outcome: EvaluationOutcome, per_problem: pl.DataFrame, verifier_rows) -> None:
    evaluation_id = outcome.evaluation_id
    problems = per_problem.select(GROUP).unique().sort(GROUP).with_columns(evaluation_id=pl.lit(evaluation_id))
    tables = {
        "evaluation": pa.Table.from_pylist(outcome.rows, schema=EVALUATION),
        "evaluation_problems": problems.select(EVALUATION_PROBLEMS.names).to_arrow().cast(EVALUATION_PROBLEMS),
        "judge_cache": pa.Table.from_pylist([v.row() for v in outcome.new_verdicts], schema=JUDGE_CACHE),
    }
    if verifier_rows is not None:
        tables["verifier_scores"] = verifier_rows.to_arrow().cast(VERIFIER_SCORES)
    with tempfile.TemporaryDirectory(prefix="orchrm-evaluation-") as staging:
        for name, table in tables.items():
            path = str(Path(staging, f"{name}.parquet"))
            pq.write_table(table, path, compression="zstd")
            root.replace_batch(name, evaluation_id, [path])
    if outcome.rows:
        outcome.plots = {"accuracy_vs_n": accuracy_vs_n(outcome.rows),
                         "accuracy_vs_tokens": accuracy_vs_tokens(outcome.rows)}
        folder = root.batch_dir("evaluation", evaluation_id)  # beside the evaluation's rows
        for name, png in outcome.plots.items():
            with root.fs.open(f"{folder}/{name}.png", "wb") as out:
                out.write(png)
            outcome.plot_paths[name] = root.uri(*f"{folder}/{name}.png"[len(root.base) + 1:].split("/"))
