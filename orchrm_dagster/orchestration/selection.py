"""Best-of-N before rollout: the champion reward model of the benchmark's domain scores each problem's sampled plans,
and only the best is executed. Scores are kept in the `plan_scores` table, so a plan is scored once per reward-model
version."""

from __future__ import annotations

import dataclasses
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import PLAN_SCORES, plan_hash
from orchrm_dagster.orchestration.sampling import PlanSample
from orchrm_dagster.orchestration.store import Cell
from orchrm_dagster.rm import NoChampion, ScoringSettings, best_of_n_order, champion_scorer, champion_version, domain_of
from orchrm_dagster.storage import StorageRoot

SCORES_TABLE = "plan_scores"


@dataclass(frozen=True)
class PlanScore:
    score: float
    tokens: int  # what the reward model read


@dataclass(frozen=True)
class ScoredSamples:
    rm_version: int
    scores: dict[str, PlanScore]  # sample run_id -> score
    newly_scored: int


def score_samples(root: StorageRoot, cell: Cell, samples: list[PlanSample],
                  settings: ScoringSettings = ScoringSettings()) -> ScoredSamples:
    """The score of each sample by the champion of the cell's benchmark's domain, reusing the partition's stored
    scores by the same version; the scores of every sample are written back to `plan_scores`."""
    domain = domain_of(cell.benchmark)
    try:
        version = champion_version(root, domain)
    except NoChampion as refusal:
        raise NoChampion(f"Best-of-N on {cell.benchmark} refused: {refusal}") from None
    stored = {run_id: score for run_id, (v, score) in _stored(root, cell).items() if v == version}
    todo = [s for s in samples if s.run_id not in stored]
    if todo:
        _, scorer = champion_scorer(root, settings, domain)
        values, lengths = scorer.score_with_lengths([s.question for s in todo], [s.plan for s in todo])
        stored |= {s.run_id: PlanScore(value, tokens) for s, value, tokens in zip(todo, values, lengths)}
    scores = {s.run_id: stored[s.run_id] for s in samples}
    _write(root, cell, samples, version, scores)
    return ScoredSamples(version, scores, len(todo))


def _stored(root: StorageRoot, cell: Cell) -> dict[str, tuple[int, PlanScore]]:
    found = {}
    for part in root.batch_files(SCORES_TABLE, cell.folder):
        with root.fs.open(part, "rb") as src:
            for row in pq.read_table(src, columns=["run_id", "rm_version", "score", "tokens"]).to_pylist():
                found[row["run_id"]] = (row["rm_version"], PlanScore(row["score"], row["tokens"]))
    return found


def _write(root: StorageRoot, cell: Cell, samples: list[PlanSample], version: int,
           scores: dict[str, PlanScore]) -> None:
    rows = [{"run_id": s.run_id, "problem_id": s.problem_id, "benchmark": s.benchmark, "policy_name": s.policy_name,
             "sample_index": s.sample_index, "plan_hash": plan_hash(s.plan), "rm_version": version,
             "score": scores[s.run_id].score, "tokens": scores[s.run_id].tokens} for s in samples]
    with tempfile.TemporaryDirectory() as staging:
        path = str(Path(staging, "scores.parquet"))
        pq.write_table(pa.Table.from_pylist(rows, schema=PLAN_SCORES), path, compression="zstd")
        root.replace_batch(SCORES_TABLE, cell.folder, [path])


@dataclass(frozen=True)
class Selection:
    chosen: PlanSample  # the best candidate, under the run_id of its Best-of-N execution
    meta: dict  # recorded on the run: the candidates' hashes and scores, verification tokens


def best_of_n(samples: list[PlanSample], scored: ScoredSamples, n: int) -> list[Selection]:
    """Per problem, among its first `n` samples (in sample order): the plan the Best-of-N rule picks
    (`rm.best_of_n_order`: plans that parse first, then score, then the lower plan hash)."""
    by_problem: dict[str, list[PlanSample]] = defaultdict(list)
    for sample in sorted(samples, key=lambda s: (s.problem_id, s.sample_index)):
        if sample.sample_index < n:
            by_problem[sample.problem_id].append(sample)
    selections = []
    for candidates in by_problem.values():
        scores = [scored.scores[s.run_id].score for s in candidates]
        hashes = [plan_hash(s.plan) for s in candidates]
        best = candidates[best_of_n_order([s.plan_parses for s in candidates], scores, hashes)[0]]
        verification = sum(scored.scores[s.run_id].tokens for s in candidates)
        meta = {"selection": {
            "method": "orchrm_bon", "n": n, "rm_version": scored.rm_version, "chosen": best.run_id,
            "candidates": [{"run_id": s.run_id, "plan_hash": h, "score": score, "parses": s.plan_parses}
                           for s, h, score in zip(candidates, hashes, scores)],
            "verification_tokens": verification,
            "candidate_orchestrator_tokens": sum(s.orchestrator_prompt_tokens + s.orchestrator_completion_tokens
                                                 for s in candidates)}}
        chosen = dataclasses.replace(best, run_id=f"{best.run_id}/best-of-{n}")
        selections.append(Selection(chosen, meta))
    return selections
