"""The result type every labeler returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    is_correct: bool | None  # None: a failed run, no verdict on its plan (labels.batch.failed_run_verdict)
    extracted_answer: str | None
    labeler: str
    labeler_version: str
    # Why the answer is incorrect or could not be judged; None when correct.
    reason: str | None
    # Token F1 for QA, 1.0 / 0.0 for the other labelers.
    score: float | None


def correct(labeler: str, version: str, extracted: str | None, score: float = 1.0) -> Verdict:
    return Verdict(True, extracted, labeler, version, None, score)


def incorrect(
    labeler: str, version: str, extracted: str | None, reason: str, score: float = 0.0
) -> Verdict:
    return Verdict(False, extracted, labeler, version, reason, score)
