"""Label every run of one batch against its reference answer."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from orchrm_dagster.contract import LABELS
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.labels.labeler import labeler_for
from orchrm_dagster.labels.registry import answer_type_for, label_cached
from orchrm_dagster.labels.verdict import Verdict
from orchrm_dagster.storage import ParquetSink, StorageRoot, publish_batch

_RUN_COLUMNS = ["run_id", "problem_id", "benchmark", "reference_answer", "final_answer", "error", "is_correct"]


@engine_config
class LabelSettings:
    qa_f1_threshold: float | None = Field(
        default=None, description="Short-answer QA counts as correct at this token F1; unset = exact match only")
    answer_types: dict[str, str] = Field(
        default_factory=dict, description="benchmark -> answer type (a registered labeler's, such as math, or a "
                                          "dotted path to a labeler: my_pkg.my_module:my_labeler), overriding the "
                                          "built-in mapping")

    def __post_init__(self) -> None:
        for answer_type in self.answer_types.values():
            labeler_for(answer_type)  # ValueError naming an unknown answer type and the known ones


@dataclass
class LabelReport:
    batch_id: str
    runs: int = 0
    labeled: int = 0
    correct: int = 0
    without_reference: int = 0
    producer_verdicts: int = 0
    disagreements: int = 0
    by_labeler: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0


def failed_run_verdict(answer_type: str, error: str) -> Verdict:
    labeler = labeler_for(answer_type)
    return Verdict(False, None, labeler.name, labeler.version, f"execution failed: {error}", 0.0)


def label_batch(root: StorageRoot, batch_id: str, references: dict, settings: LabelSettings = LabelSettings(),
                rows_per_group: int = 20_000) -> LabelReport:
    started = time.perf_counter()
    report = LabelReport(batch_id)
    with tempfile.TemporaryDirectory(prefix=f"orchrm-labels-{batch_id}-") as staging:
        out = str(Path(staging, "labels.parquet"))
        sink = ParquetSink(out, LABELS, rows_per_group)
        for part in root.batch_files("runs", batch_id):
            with root.fs.open(part, "rb") as src:
                for batch in pq.ParquetFile(src).iter_batches(batch_size=rows_per_group, columns=_RUN_COLUMNS):
                    for run in batch.to_pylist():
                        row = _label_run(run, batch_id, references, settings, report)
                        if row is not None:
                            sink.append_mapping(row)
        sink.close()
        publish_batch(root, "labels", batch_id, [out])
    report.seconds = time.perf_counter() - started
    return report


def _label_run(run: dict, batch_id: str, references: dict, settings: LabelSettings, report: LabelReport) -> dict | None:
    report.runs += 1
    known = references.get(run["problem_id"])
    reference = run["reference_answer"] or (known.answer if known else None)
    if reference is None:
        report.without_reference += 1
        return None
    choices = known.choices if known else None
    configured = settings.answer_types.get(run["benchmark"])  # an answer type, or a dotted path to a labeler
    answer_type = labeler_for(configured).answer_type if configured else (
        known.answer_type if known else answer_type_for(run["benchmark"], reference, None))
    if run["error"]:
        verdict = failed_run_verdict(answer_type, run["error"])
    else:
        verdict = label_cached(answer_type, reference, run["final_answer"], choices,
                               qa_f1_threshold=settings.qa_f1_threshold)
    _count(report, verdict, run["is_correct"])
    return {
        "batch_id": batch_id, "run_id": run["run_id"], "problem_id": run["problem_id"],
        "benchmark": run["benchmark"], "answer_type": answer_type, "reference_answer": reference,
        "is_correct": verdict.is_correct, "extracted_answer": verdict.extracted_answer, "score": verdict.score,
        "labeler": verdict.labeler, "labeler_version": verdict.labeler_version, "reason": verdict.reason,
        "producer_is_correct": run["is_correct"],
    }


def _count(report: LabelReport, verdict: Verdict, producer_is_correct: bool | None) -> None:
    report.labeled += 1
    report.correct += verdict.is_correct
    report.by_labeler[verdict.labeler] += 1
    if verdict.reason:
        report.reasons[verdict.reason.split(":", 1)[0].split(" (", 1)[0]] += 1
    if producer_is_correct is not None:
        report.producer_verdicts += 1
        report.disagreements += producer_is_correct != verdict.is_correct
