"""Correctness labelers for final answers, and labeling a whole run batch (no Dagster)."""

from .batch import LabelReport, LabelSettings, failed_run_verdict, label_batch
from .registry import LABELER_FOR_TYPE, LABELER_VERSIONS, answer_type_for, label_answer, label_cached
from .verdict import Verdict

__all__ = ["LABELER_FOR_TYPE", "LABELER_VERSIONS", "LabelReport", "LabelSettings", "Verdict", "answer_type_for",
           "failed_run_verdict", "label_answer", "label_batch", "label_cached"]
