"""Correctness labelers for final answers (pure Python, no Dagster)."""

from .registry import LABELER_VERSIONS, answer_type_for, label_answer, label_cached
from .verdict import Verdict

__all__ = ["Verdict", "label_answer", "answer_type_for", "LABELER_VERSIONS", "label_cached"]
