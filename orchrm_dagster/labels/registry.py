"""Choose a labeler for a benchmark and dispatch to it."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

from orchrm_dagster.contract import ANSWER_TYPES

from . import choice_labeler, math_labeler, qa_labeler
from .extract import answer_tag_content
from .verdict import Verdict, incorrect

LABELER_VERSIONS: dict[str, str] = {
    math_labeler.LABELER: math_labeler.LABELER_VERSION,
    qa_labeler.LABELER: qa_labeler.LABELER_VERSION,
    choice_labeler.LABELER: choice_labeler.LABELER_VERSION,
}
LABELER_FOR_TYPE: dict[str, str] = {
    "math": math_labeler.LABELER,
    "qa": qa_labeler.LABELER,
    "choice": choice_labeler.LABELER,
}

_MATH_BENCHMARKS = ("aime", "gsm8k", "math", "deepscaler", "amc", "olympiad")
_QA_BENCHMARKS = ("hotpotqa", "browsecomp", "nq", "triviaqa", "squad")
_CHOICE_BENCHMARKS = ("gpqa",)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_LATEX_HINT = re.compile(r"\\[A-Za-z]|[$^_{}]")


def answer_type_for(benchmark: str, reference: str | None, choices: Sequence[str] | None) -> str:
    """Pick "math", "qa" or "choice" from the choices, the benchmark name, then the reference."""
    if choices:
        return "choice"
    name = (benchmark or "").strip().lower()
    for answer_type, prefixes in (
        ("math", _MATH_BENCHMARKS),
        ("qa", _QA_BENCHMARKS),
        ("choice", _CHOICE_BENCHMARKS),
    ):
        if name.startswith(prefixes):
            return answer_type
    return "math" if _reference_looks_mathematical(reference) else "qa"


def _reference_looks_mathematical(reference: str | None) -> bool:
    if not reference:
        return False
    text = reference.strip().replace(",", "")
    return bool(_NUMBER.fullmatch(text) or _LATEX_HINT.search(text))


def label_answer(
    answer_type: str,
    reference: str | None,
    final_answer: str | None,
    choices: Sequence[str] | None = None,
    *,
    qa_f1_threshold: float | None = None,
) -> Verdict:
    """Judge final_answer against reference. Never raises for string inputs.

    Raises ValueError only for an unknown answer_type (a caller bug).
    """
    if answer_type not in LABELER_FOR_TYPE:
        raise ValueError(f"unknown answer_type {answer_type!r}; expected one of {ANSWER_TYPES}")
    labeler = LABELER_FOR_TYPE[answer_type]
    if final_answer is None or not str(final_answer).strip():
        return incorrect(labeler, LABELER_VERSIONS[labeler], None, "no final answer")
    if reference is None or not str(reference).strip():
        return incorrect(labeler, LABELER_VERSIONS[labeler], None, "no reference answer")
    text = _answer_text(str(final_answer))
    if not text:
        return incorrect(labeler, LABELER_VERSIONS[labeler], None, "no final answer")
    reference = str(reference).strip()
    if answer_type == "math":
        return math_labeler.label_math(reference, text)
    if answer_type == "qa":
        return qa_labeler.label_qa(reference, text, qa_f1_threshold)
    return choice_labeler.label_choice(reference, text, choices)


def _answer_text(final_answer: str) -> str:
    """MAS-Orchestra's direct-answer form wraps the answer in <answer>...</answer>."""
    tagged = answer_tag_content(final_answer)
    return (tagged if tagged is not None else final_answer).strip()


def label_cached(
    answer_type: str,
    reference: str | None,
    final_answer: str | None,
    choices: Sequence[str] | None = None,
    *,
    qa_f1_threshold: float | None = None,
) -> Verdict:
    """label_answer behind an LRU cache: large batches repeat (reference, answer) pairs."""
    choices_key = tuple(choices) if choices is not None else None
    return _label_hashable(answer_type, reference, final_answer, choices_key, qa_f1_threshold)


@lru_cache(maxsize=262144)
def _label_hashable(
    answer_type: str,
    reference: str | None,
    final_answer: str | None,
    choices: tuple[str, ...] | None,
    qa_f1_threshold: float | None,
) -> Verdict:
    return label_answer(
        answer_type,
        reference,
        final_answer,
        list(choices) if choices is not None else None,
        qa_f1_threshold=qa_f1_threshold,
    )


label_cached.cache_info = _label_hashable.cache_info  # type: ignore[attr-defined]
label_cached.cache_clear = _label_hashable.cache_clear  # type: ignore[attr-defined]
