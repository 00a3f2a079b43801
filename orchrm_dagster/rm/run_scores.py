"""The `rm_scores` table: every ingested run scored by the champion of its domain, one partition per run batch."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from orchrm_dagster.contract import RM_SCORES, WAREHOUSE_TABLES
from orchrm_dagster.rm.config import ScoringSettings
from orchrm_dagster.rm.domains import DomainScorer, benchmark_domains, domain_of
from orchrm_dagster.rm.versions import champion_refusals, current_champions, domain_scorer
from orchrm_dagster.storage import ParquetSink, StorageRoot, scan_files


@dataclass
class ScoringReport:
    champions: dict[str, int]  # domain -> the version that scored its runs
    batches_scored: int = 0
    batches_current: int = 0
    runs_scored: int = 0
    runs_without_champion: int = 0  # runs of a domain no version is champion of yet: left unscored
    seconds: float = 0.0
    runs_by_domain: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # domain -> why its runs were left unscored (no champion)


def score_runs(root: StorageRoot, settings: ScoringSettings = ScoringSettings(),
               rows_per_chunk: int = 4096) -> ScoringReport:
    """Scores every run batch, each run with its domain's champion; batches already scored so are left as they
    are. NoChampion, saying why, when no domain has a champion; the runs of a domain without one are left unscored
    and the report says why (`refused`)."""
    started = time.perf_counter()
    scorer = domain_scorer(root, settings)
    report = ScoringReport(scorer.champions)
    stale = set(batches_to_score(root, scorer.champions))
    unscored: set[str | None] = set()
    for batch_id in root.batch_ids("runs"):
        if batch_id not in stale:
            report.batches_current += 1
            continue
        unscored |= _score_batch(root, scorer, batch_id, rows_per_chunk, report)
        report.batches_scored += 1
    unscored.discard(None)
    report.refused = champion_refusals(root, unscored, scorer.champions) if unscored else {}
    report.seconds = time.perf_counter() - started
    return report


def batches_to_score(root: StorageRoot, champions: Mapping[str, int] | None = None) -> list[str]:
    """Run batches whose scores are not, run for run, those of the champion of the run's domain (`champions`;
    None: the current ones): never scored, scored by another version, or re-ingested since they were scored."""
    champions = current_champions(root) if champions is None else champions

    def stale(batch_id: str) -> bool:
        generations = (root.batch_generation("runs", batch_id), root.batch_generation("rm_scores", batch_id))
        if generations[1] < generations[0]:
            return True
        # a run of a domain without a champion has no score, and needs none
        return any(champions.get(domain) != version for domain, version in _scored_with(root, batch_id, generations))

    return [b for b in root.batch_ids("runs") if stale(b)]


_SCORED_WITH: dict[tuple, frozenset] = {}


def _scored_with(root: StorageRoot, batch_id: str, generations: tuple[str, str]) -> frozenset:
    """The (domain, scoring version) pairs among the batch's runs (version None: a run without a score), read once
    per generation of the runs and of their scores: the loop asks every few seconds. Reads the runs' ids and
    benchmarks, never their plans."""
    key = (root.url, batch_id, generations)
    if key not in _SCORED_WITH:
        if len(_SCORED_WITH) > 4096:
            _SCORED_WITH.clear()
        runs = _batch_columns(root, "runs", batch_id, ["run_id", "benchmark"])
        scores = _batch_columns(root, "rm_scores", batch_id, ["run_id", "rm_version"])
        scored = runs.join(scores.unique("run_id"), on="run_id", how="left")
        _SCORED_WITH[key] = frozenset(
            scored.select(benchmark_domains(scored["benchmark"]), "rm_version").unique().iter_rows())
    return _SCORED_WITH[key]


def _batch_columns(root: StorageRoot, table: str, batch_id: str, columns: list[str]) -> pl.DataFrame:
    return scan_files(root, root.batch_files(table, batch_id), WAREHOUSE_TABLES[table]).select(columns).collect()


def _score_batch(root: StorageRoot, scorer: DomainScorer, batch_id: str, rows_per_chunk: int,
                 report: ScoringReport) -> set[str | None]:
    """Scores the batch's runs; returns the domains of the runs left unscored (no champion)."""
    unscored: set[str | None] = set()
    with tempfile.TemporaryDirectory(prefix="orchrm-scores-") as staging:
        out = str(Path(staging, "scores.parquet"))
        sink = ParquetSink(out, RM_SCORES, rows_per_chunk)
        for part in root.batch_files("runs", batch_id):
            with root.fs.open(part, "rb") as src:
                for chunk in pq.ParquetFile(src).iter_batches(rows_per_chunk,
                                                              columns=["run_id", "benchmark", "question", "plan"]):
                    columns = chunk.to_pydict()
                    domains = [domain_of(benchmark) for benchmark in columns["benchmark"]]
                    scores, tokens, versions = scorer.score_with_lengths(columns["question"], columns["plan"], domains)
                    for run_id, domain, score, n_tokens, version in zip(columns["run_id"], domains, scores, tokens,
                                                                        versions):
                        if version is None:
                            report.runs_without_champion += 1
                            unscored.add(domain)
                            continue
                        sink.append((batch_id, run_id, version, score, n_tokens))
                        report.runs_scored += 1
                        report.runs_by_domain[domain] = report.runs_by_domain.get(domain, 0) + 1
        sink.close()
        root.replace_batch("rm_scores", batch_id, [out])
    return unscored
