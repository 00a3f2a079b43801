"""Correctness labelers for final answers, and labeling a whole run batch (no Dagster)."""

from .batch import (LABEL_SOURCES, REFERENCE_SOURCE, RUN_SOURCE, UNLABELED_FIX, LabelReport, LabelSettings,
                    failed_run_verdict, label_batch, run_verdict, unlabeled_note, unparsed_note)
from .choice_labeler import LETTERS as CHOICE_LETTERS
from .distractor import wrong_answer
from .labeler import Claim, Labeler, answer_types, labeler_for, labelers, register_labeler
from .registry import answer_type_for, benchmark_answer_type, label_answer, label_cached
from .verdict import Verdict

__all__ = [
    "CHOICE_LETTERS", "Claim", "LABEL_SOURCES", "REFERENCE_SOURCE", "RUN_SOURCE", "UNLABELED_FIX", "LabelReport",
    "LabelSettings", "Labeler", "Verdict", "answer_type_for", "benchmark_answer_type", "answer_types",
    "failed_run_verdict", "label_answer", "label_batch", "label_cached", "labeler_for", "labelers",
    "register_labeler", "run_verdict", "unlabeled_note", "unparsed_note", "wrong_answer"
]
