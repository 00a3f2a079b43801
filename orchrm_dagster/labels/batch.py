"""Label every run of one batch: against its reference answer where it has one, else by the run's own `is_correct`
where its benchmark's own verdicts are trusted (`LabelSettings.trust_run_labels`); a run that is neither is left
unlabeled and counted (`LabelReport.unlabeled`), so the ingest line, `orchrm status` and the asset say so."""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from orchrm_dagster.contract import LABELS, NO_VERDICT_KINDS
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.labels.labeler import labeler_for
from orchrm_dagster.labels.registry import answer_type_for, benchmark_answer_type, label_cached
from orchrm_dagster.labels.verdict import Verdict
from orchrm_dagster.storage import ParquetSink, StorageRoot, publish_batch

_RUN_COLUMNS = ["run_id", "problem_id", "benchmark", "reference_answer", "final_answer", "error", "is_correct",
                "meta"]
_PLAN_COLUMNS = ["plan", "plan_hash"]  # read only when plans are checked

# labels.label_source: what decided a label
REFERENCE_SOURCE = "reference"  # a labeler judged the final answer against the reference answer
RUN_SOURCE = "run"  # the run's own is_correct (its benchmark trusted, no reference answer)
LABEL_SOURCES = (REFERENCE_SOURCE, RUN_SOURCE)
# labels.labeler (and labeler_version) of a label the run's own is_correct decided
RUN_LABELER = "run_is_correct"
RUN_LABELER_VERSION = "orchrm1"
ALL_BENCHMARKS = "*"

UNLABELED_FIX = ("add its problem to the problems table, give runs a reference_answer, or trust its runs' own labels: "
                 "labels.trust_run_labels")


def unlabeled_note(count: int, benchmarks: dict[str, int] | None = None) -> str:
    """What a user reads of runs left unlabeled: how many, why, of which benchmarks, and the fix."""
    named = ""
    if benchmarks:
        shown = sorted(benchmarks.items(), key=lambda item: (-item[1], str(item[0])))
        named = " (" + ", ".join(f"{name}: {n}" for name, n in shown[:5]) + (", ..." if len(shown) > 5 else "") + ")"
    return f"{count} run(s) unlabeled, without a reference answer{named}: {UNLABELED_FIX}"


def unparsed_note(count: int) -> str:
    """What a user reads of labeled runs whose plan does not parse."""
    return (f"{count} labeled run(s) with a plan that does not parse: best-of-N ranks such a plan after every plan "
            f"that parses")


@engine_config
class LabelSettings:
    qa_f1_threshold: float | None = Field(
        default=None, description="Short-answer QA counts as correct at this token F1; unset = exact match only")
    answer_types: dict[str, str] = Field(
        default_factory=dict, description="benchmark -> answer type (a registered labeler's, such as math, or a "
                                          "dotted path to a labeler: my_pkg.my_module:my_labeler), overriding the "
                                          "built-in mapping")
    trust_run_labels: tuple[str, ...] = Field(
        default=(), description="Benchmarks whose runs' own is_correct is their label where there is no reference "
                                "answer (neither the run's reference_answer nor its problem in the problems table): "
                                "a team's own problems, whose correctness only its own system knows. '*': every "
                                "benchmark. Where a reference exists it decides, as for any run. A failed run is "
                                "labeled as any failed run is (no verdict where its cause is outside its plan: "
                                "contract.NO_VERDICT_KINDS; else incorrect); a trusted run without is_correct stays "
                                "unlabeled. "
                                "labels.label_source says what decided each label: reference or run")

    def __post_init__(self) -> None:
        for answer_type in self.answer_types.values():
            labeler_for(answer_type)  # ValueError naming an unknown answer type and the known ones
        blank = [name for name in self.trust_run_labels if not name.strip()]
        if blank:
            raise ValueError("trust_run_labels names benchmarks (or '*' for every one): an empty name matches none")

    def trusts(self, benchmark: str | None) -> bool:
        """Whether the runs of `benchmark` are labeled by their own is_correct where no reference exists."""
        return ALL_BENCHMARKS in self.trust_run_labels or benchmark in self.trust_run_labels


@dataclass
class LabelReport:
    batch_id: str
    runs: int = 0
    labeled: int = 0
    correct: int = 0
    without_reference: int = 0  # runs with no reference answer, labeled by their own is_correct or not at all
    unlabeled: int = 0  # runs left without a label: no reference, and not trusted or without an is_correct
    unlabeled_by_benchmark: Counter = field(default_factory=Counter)
    trusted_without_verdict: int = 0  # of the unlabeled: trusted, but the run has no is_correct
    unparsed_plans: int = 0  # labeled runs whose plan does not parse (counted when label_batch is given the check)
    failed_runs: int = 0  # runs that failed for a cause outside the plan's answer (NO_VERDICT_KINDS): no verdict
    failed_by_kind: Counter = field(default_factory=Counter)
    producer_verdicts: int = 0
    disagreements: int = 0
    by_source: Counter = field(default_factory=Counter)  # label_source -> labels
    by_labeler: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def unlabeled_hint(self) -> str:
        """The unlabeled runs, why and what to do ('' when every run has a label)."""
        if not self.unlabeled:
            return ""
        note = unlabeled_note(self.unlabeled, dict(self.unlabeled_by_benchmark))
        if self.trusted_without_verdict:
            note += (f"; {self.trusted_without_verdict} of them of a trusted benchmark but without an is_correct of "
                     f"their own")
        return note


def failed_run_verdict(answer_type: str, error: str, kind: str | None = None) -> Verdict:
    """A failed run's label: no verdict (is_correct unset) where it failed for a cause outside its plan's answer (its
    kind one of NO_VERDICT_KINDS: an endpoint, a sub-agent call, the time budget), else incorrect (a plan that cannot
    run, or a failure whose kind the run does not say)."""
    labeler = labeler_for(answer_type)
    if kind in NO_VERDICT_KINDS:
        return Verdict(None, None, labeler.name, labeler.version, f"execution failed ({kind}), no verdict: {error}",
                       None)
    return Verdict(False, None, labeler.name, labeler.version, f"execution failed: {error}", 0.0)


def error_kind(run: dict) -> str | None:
    """A run's `meta.error_kind` (contract.RunErrorKind), when its record says one."""
    try:
        kind = json.loads(run.get("meta") or "{}").get("error_kind")
    except (ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def run_verdict(is_correct: bool | None, error: str | None, kind: str | None = None) -> Verdict:
    """The label a trusted run's own is_correct gives it (a failed run as `failed_run_verdict` says)."""
    if error and kind in NO_VERDICT_KINDS:
        return Verdict(None, None, RUN_LABELER, RUN_LABELER_VERSION, f"execution failed ({kind}), no verdict: {error}",
                       None)
    if error:
        return Verdict(False, None, RUN_LABELER, RUN_LABELER_VERSION, f"execution failed: {error}", 0.0)
    if is_correct:
        return Verdict(True, None, RUN_LABELER, RUN_LABELER_VERSION, None, 1.0)
    return Verdict(False, None, RUN_LABELER, RUN_LABELER_VERSION, "the run's own verdict: incorrect", 0.0)


class _PlanParses:
    """Whether a run's plan parses by `check` (a plan text -> bool), each distinct plan (by its hash) checked once
    per batch; without `check`, unknown (None)."""

    def __init__(self, check: Callable[[str], bool] | None, limit: int = 200_000):
        self.check = check
        self.known: dict[str, bool] = {}
        self.limit = limit

    def __call__(self, plan: str | None, plan_hash: str | None) -> bool | None:
        if self.check is None:
            return None
        if plan is None:
            return False
        if plan_hash is None:
            return bool(self.check(plan))
        found = self.known.get(plan_hash)
        if found is None:
            if len(self.known) >= self.limit:
                self.known.clear()
            found = self.known[plan_hash] = bool(self.check(plan))
        return found


def label_batch(root: StorageRoot, batch_id: str, references: dict, settings: LabelSettings = LabelSettings(),
                rows_per_group: int = 20_000, plan_parses: Callable[[str], bool] | None = None) -> LabelReport:
    """Label the batch's runs and publish them as its `labels`. `plan_parses` (a plan text -> whether it parses:
    `rm.plan_parses`, the best-of-N rule's own reading, which the labels asset gives) fills `labels.plan_parses` and
    `LabelReport.unparsed_plans`; without it they stay unknown (null, 0)."""
    started = time.perf_counter()
    report = LabelReport(batch_id)
    parses = _PlanParses(plan_parses)
    columns = _RUN_COLUMNS + (_PLAN_COLUMNS if plan_parses is not None else [])
    with tempfile.TemporaryDirectory(prefix=f"orchrm-labels-{batch_id}-") as staging:
        out = str(Path(staging, "labels.parquet"))
        sink = ParquetSink(out, LABELS, rows_per_group)
        for part in root.batch_files("runs", batch_id):
            with root.fs.open(part, "rb") as src:
                for batch in pq.ParquetFile(src).iter_batches(batch_size=rows_per_group, columns=columns):
                    for run in batch.to_pylist():
                        row = _label_run(run, batch_id, references, settings, report, parses)
                        if row is not None:
                            sink.append_mapping(row)
        sink.close()
        publish_batch(root, "labels", batch_id, [out])
    report.seconds = time.perf_counter() - started
    return report


def _label_run(run: dict, batch_id: str, references: dict, settings: LabelSettings, report: LabelReport,
               parses=None) -> dict | None:
    report.runs += 1
    known = references.get(run["problem_id"])
    reference = run["reference_answer"] or (known.answer if known else None)
    configured = settings.answer_types.get(run["benchmark"])  # an answer type, or a dotted path to a labeler
    if reference is None:
        report.without_reference += 1
        if not settings.trusts(run["benchmark"]) or (run["is_correct"] is None and not run["error"]):
            report.unlabeled += 1
            report.unlabeled_by_benchmark[run["benchmark"]] += 1
            report.trusted_without_verdict += settings.trusts(run["benchmark"])
            return None
        answer_type = known.answer_type if known and known.answer_type and not configured else \
            benchmark_answer_type(run["benchmark"], settings.answer_types)
        verdict, source = run_verdict(run["is_correct"], run["error"], error_kind(run)), RUN_SOURCE
    else:
        choices = known.choices if known else None
        answer_type = labeler_for(configured).answer_type if configured else (
            known.answer_type if known else answer_type_for(run["benchmark"], reference, None))
        if run["error"]:
            verdict = failed_run_verdict(answer_type, run["error"], error_kind(run))
        else:
            verdict = label_cached(answer_type, reference, run["final_answer"], choices,
                                   qa_f1_threshold=settings.qa_f1_threshold)
        source = REFERENCE_SOURCE
    plan_parses = parses(run.get("plan"), run.get("plan_hash")) if parses is not None else None
    _count(report, verdict, run["is_correct"], source, plan_parses)
    return {
        "batch_id": batch_id, "run_id": run["run_id"], "problem_id": run["problem_id"],
        "benchmark": run["benchmark"], "answer_type": answer_type, "reference_answer": reference,
        "is_correct": verdict.is_correct, "extracted_answer": verdict.extracted_answer, "score": verdict.score,
        "labeler": verdict.labeler, "labeler_version": verdict.labeler_version, "reason": verdict.reason,
        "producer_is_correct": run["is_correct"], "label_source": source, "plan_parses": plan_parses,
    }


def _count(report: LabelReport, verdict: Verdict, producer_is_correct: bool | None, source: str,
           plan_parses: bool | None) -> None:
    if verdict.is_correct is None:  # a failed run: a row that says so, no verdict either way
        report.failed_runs += 1
        report.failed_by_kind[verdict.reason.split("(", 1)[1].split(")", 1)[0]] += 1
        return
    report.labeled += 1
    report.correct += verdict.is_correct
    report.by_source[source] += 1
    report.by_labeler[verdict.labeler] += 1
    report.unparsed_plans += plan_parses is False
    if verdict.reason:
        report.reasons[verdict.reason.split(":", 1)[0].split(" (", 1)[0]] += 1
    if producer_is_correct is not None and source == REFERENCE_SOURCE:
        report.producer_verdicts += 1
        report.disagreements += producer_is_correct != verdict.is_correct
