"""The champion's live accuracy: how well it ranks pairs it never trained on, as they arrive, per domain. Two
sources, one measure:

- `pairs`: the pairs in the tables that were not there when the champion trained (the new batches' pairs), each
  ranked by the champion's scores of its two runs (`rm_scores`, written before any retraining reads the pairs);
- `held-out plans of round N`: the round's held-out plans, executed for the gate and scored by the champion anyway,
  paired within each problem (a correct plan over an incorrect one): what the champion makes of the policy it is
  rewarding now, at no extra token. They are measured, never trained on (a held-out problem neither trains the policy
  nor gives the reward model a pair: its next calibration and held-out scores would read what it learned from).

The problem is the unit: pairs of one problem share its question and plans, so the interval is cluster-robust (the
ratio estimator's sandwich variance over problems, Student's t with problems - 1 degrees of freedom). A champion is
stale in a domain when the upper bound of its live accuracy lies below its validation accuracy there minus a margin
(`staleness`); bench/staleness.py measured the bound's coverage and the rule's false alarms (SIMULATED)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from orchrm_dagster.contract import CHAMPION_LIVE_ACCURACY
from orchrm_dagster.storage import StorageRoot, scan_table

LIVE_TABLE = "champion_live_accuracy"
PAIRS_SOURCE = "pairs"


@dataclass(frozen=True)
class LiveAccuracy:
    """A champion's ranking of pairs it never trained on, in one domain."""

    domain: str
    rm_version: int
    source: str  # "pairs" or "held-out plans of round N"
    by_problem: tuple[tuple[str, int, int], ...]  # (problem id, pairs ranked right, pairs)
    validation_accuracy: float | None = None  # the champion's on its validation pairs of the domain

    @property
    def pairs(self) -> int:
        return sum(n for _, _, n in self.by_problem)

    @property
    def correct(self) -> int:
        return sum(c for _, c, _ in self.by_problem)

    @property
    def problems(self) -> int:
        return len(self.by_problem)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.pairs if self.pairs else None

    def upper(self, level: float) -> float | None:
        """One-sided upper bound at `level` (the chance it lies below the truth)."""
        return _bound(self.by_problem, level, +1)

    def interval(self, confidence: float = 0.95) -> tuple[float | None, float | None]:
        level = (1 - confidence) / 2
        return _bound(self.by_problem, level, -1), _bound(self.by_problem, level, +1)

    def text(self) -> str:
        if not self.pairs:
            return f"no new pairs in {self.domain}"
        low, high = self.interval()
        validation = (f" (validation {self.validation_accuracy:.3f})" if self.validation_accuracy is not None
                      else "")
        return (f"v{self.rm_version} ranks {self.accuracy:.3f} of {self.pairs} new {self.domain} pairs right "
                f"[{low:.3f}, {high:.3f}] over {self.problems} problems, {self.source}{validation}")


def _bound(by_problem, level: float, side: int) -> float | None:
    """The cluster-robust bound (problems as clusters) of the pooled accuracy; with one problem, or none varying,
    the Wilson bound of the pairs (the cluster variance would be 0 and say nothing)."""
    pairs = sum(n for _, _, n in by_problem)
    if not pairs:
        return None
    from scipy.stats import t

    accuracy = sum(c for _, c, _ in by_problem) / pairs
    k = len(by_problem)
    residuals = [c - accuracy * n for _, c, n in by_problem]
    spread = math.fsum(r * r for r in residuals)
    if k < 2 or spread == 0:
        from statsmodels.stats.proportion import proportion_confint

        low, high = proportion_confint(sum(c for _, c, _ in by_problem), pairs, alpha=2 * level, method="wilson")
        # its float rounding may leave the accuracy itself (0 or 1) a hair outside
        return float(max(high, accuracy) if side > 0 else min(low, accuracy))
    # never narrower than independent pairs would make it, and widened by half a pair (continuity): with tens of
    # small clusters the sandwich alone covered 91-92% for 95% (bench/staleness.py)
    variance = max(k / (k - 1) * spread / pairs**2, accuracy * (1 - accuracy) / pairs)
    half = t.ppf(1 - level, k - 1) * math.sqrt(variance) + 0.5 / pairs
    return float(min(1.0, max(0.0, accuracy + side * half)))


@dataclass(frozen=True)
class StalenessRule:
    margin: float = 0.02  # how far below its validation accuracy the live accuracy may be shown to lie
    level: float = 0.05  # the one-sided bound's level
    min_pairs: int = 20  # fewer new pairs than this say nothing


def staleness(live: LiveAccuracy, rule: StalenessRule) -> tuple[bool | None, str]:
    """Whether `live` shows its champion stale (True), fresh (False) or says nothing (None: too few pairs, no
    validation accuracy), and why in words: stale where its live accuracy's upper bound lies below its validation
    accuracy minus `rule.margin`."""
    if live.validation_accuracy is None:
        return None, f"unmeasured: {live.text()}: no validation accuracy to hold it against"
    if live.pairs < rule.min_pairs:
        return None, f"unmeasured: {live.text()}: fewer than {rule.min_pairs} pairs"
    upper, floor = live.upper(rule.level), live.validation_accuracy - rule.margin
    if upper < floor:
        return True, f"stale: {live.text()}; its upper bound {upper:.3f} < validation - margin {floor:.3f}"
    return False, f"fresh: {live.text()}; its upper bound {upper:.3f} >= validation - margin {floor:.3f}"


def ranked_pairs(problem_ids: Iterable[str], right: Iterable[bool]) -> tuple[tuple[str, int, int], ...]:
    """(problem id, pairs ranked right, pairs) of each problem, sorted by problem."""
    counts: dict[str, list[int]] = {}
    for problem, won in zip(problem_ids, right):
        cell = counts.setdefault(problem, [0, 0])
        cell[0] += bool(won)
        cell[1] += 1
    return tuple((p, c, n) for p, (c, n) in sorted(counts.items()))


def plan_pairs(plans: Iterable[dict]) -> tuple[tuple[str, int, int], ...]:
    """Every (correct, incorrect) pair of scored plans of one problem, ranked by score: a tie counts as wrong (the
    champion did not prefer the correct plan)."""
    by_problem: dict[str, tuple[list[float], list[float]]] = {}
    for plan in plans:
        if plan.get("score") is None or plan.get("correct") is None or plan.get("failure") is not None:
            continue
        by_problem.setdefault(plan["problem_id"], ([], []))[0 if plan["correct"] else 1].append(plan["score"])
    counts = []
    for problem, (correct, incorrect) in sorted(by_problem.items()):
        if correct and incorrect:
            right = sum(c > i for c in correct for i in incorrect)
            counts.append((problem, right, len(correct) * len(incorrect)))
    return tuple(counts)


def pairs_live_accuracy(root: StorageRoot, champions: Mapping[str, int]) -> list[LiveAccuracy]:
    """Each champion's live accuracy on the pairs in the tables it never saw (not there when it trained), by domain:
    both runs of a pair scored by it, the pair's domain its chosen run's. Only the pair sources it trained on."""
    from orchrm_dagster.rm.domains import benchmark_domains
    from orchrm_dagster.rm.versions import seen_pair_ids, trained_on, validation_accuracy

    found = []
    for version in sorted(set(champions.values())):
        seen = seen_pair_ids(root, version)
        if seen is None:
            continue
        pairs = (scan_table(root, "pairs").select("pair_id", "problem_id", "source", "chosen_run_id",
                                                  "rejected_run_id")
                 .join(seen.lazy(), on="pair_id", how="anti"))
        sources = trained_on(root, version)
        if sources:
            pairs = pairs.filter(pl.col("source").is_in(list(sources)))
        scores = (scan_table(root, "rm_scores").filter(pl.col("rm_version") == version)
                  .select("run_id", "score").unique("run_id"))
        benchmarks = scan_table(root, "runs").select("run_id", "benchmark").unique("run_id")
        ranked = (pairs.join(scores.rename({"run_id": "chosen_run_id", "score": "chosen"}), on="chosen_run_id")
                  .join(scores.rename({"run_id": "rejected_run_id", "score": "rejected"}), on="rejected_run_id")
                  .join(benchmarks.rename({"run_id": "chosen_run_id"}), on="chosen_run_id")
                  .select("problem_id", (pl.col("chosen") > pl.col("rejected")).alias("right"), "benchmark")
                  .collect())
        ranked = ranked.with_columns(domain=benchmark_domains(ranked["benchmark"]))
        for domain in sorted(d for d, v in champions.items() if v == version):
            mine = ranked.filter(pl.col("domain") == domain)
            found.append(LiveAccuracy(domain, version, PAIRS_SOURCE,
                                      ranked_pairs(mine["problem_id"].to_list(), mine["right"].to_list()),
                                      validation_accuracy(root, version, domain)))
    return found


# the series' columns as Polars reads them: the contract's schema, written once
LIVE_COLUMNS = pl.from_arrow(CHAMPION_LIVE_ACCURACY.empty_table()).schema


def record_live_accuracy(root: StorageRoot, measures: Iterable[LiveAccuracy]) -> int:
    """Appends each measure to the `champion_live_accuracy` series unless the latest row of its (source, version,
    domain) already says the same; returns the rows added. One writer at a time (the root's lock)."""
    from orchrm_dagster.storage import root_lock, writing

    measures = [m for m in measures if m.pairs]
    if not measures:
        return 0
    with root_lock(root, LIVE_TABLE, timeout_s=120):
        series = read_live_accuracy(root)
        latest = {(r["source"], r["rm_version"], r["domain"]): (r["pairs"], r["correct"])
                  for r in series.sort("measured_at").iter_rows(named=True)}
        now = time.time()
        rows = []
        for m in measures:
            if latest.get((m.source, m.rm_version, m.domain)) == (m.pairs, m.correct):
                continue
            low, high = m.interval()
            rows.append({"measured_at": now, "source": m.source, "rm_version": m.rm_version, "domain": m.domain,
                         "pairs": m.pairs, "correct": m.correct, "problems": m.problems, "accuracy": m.accuracy,
                         "low": low, "high": high, "validation_accuracy": m.validation_accuracy,
                         "by_problem": json.dumps(m.by_problem)})
        if rows:
            path = root.table_file(LIVE_TABLE)
            with writing(f"the {LIVE_TABLE} series", path):
                table = pl.concat([series, pl.DataFrame(rows, schema=LIVE_COLUMNS)]).to_arrow()
                root.write_table(table.cast(CHAMPION_LIVE_ACCURACY), path)
    return len(rows)


def read_live_accuracy(root: StorageRoot) -> pl.DataFrame:
    """The whole series, oldest first (empty before the first measure)."""
    path = root.table_file(LIVE_TABLE)
    if not root.exists(path):
        return pl.DataFrame(schema=LIVE_COLUMNS)
    return pl.from_arrow(root.read_table(path)).cast(LIVE_COLUMNS).sort("measured_at")


def latest_held_out(root: StorageRoot, champions: Mapping[str, int]) -> list[LiveAccuracy]:
    """Each champion's latest live measure on a round's held-out plans (as the series recorded it), by domain."""
    series = read_live_accuracy(root).filter(pl.col("source") != PAIRS_SOURCE)
    found = []
    for domain, version in sorted(champions.items()):
        rows = series.filter((pl.col("domain") == domain) & (pl.col("rm_version") == version))
        if rows.height:
            row = rows.row(-1, named=True)
            found.append(LiveAccuracy(domain, version, row["source"],
                                      tuple(tuple(cell) for cell in json.loads(row["by_problem"])),
                                      row["validation_accuracy"]))
    return found
