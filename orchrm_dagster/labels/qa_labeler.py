"""Short-answer QA: SQuAD normalization, exact match and HotpotQA token F1."""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Sequence

from .extract import answer_phrase, last_boxed_content, last_nonempty_line, strip_decoration, unwrap_text_command
from .labeler import Claim, register_labeler
from .verdict import Verdict, correct, incorrect

LABELER = "qa_em_f1"
LABELER_VERSION = "squad-norm+orchrm1"

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
# HotpotQA's official eval gives no partial credit when either side is one of these.
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})


def label_qa(reference: str, text: str, f1_threshold: float | None = None) -> Verdict:
    extracted = extract_qa_answer(text)
    gold = normalize_answer(reference)
    predicted = normalize_answer(extracted)
    if not gold:
        return _incorrect(extracted, "reference is empty after normalization", 0.0)
    if not predicted:
        return _incorrect(extracted, "answer is empty after normalization", 0.0)
    f1 = token_f1(predicted, gold)
    if predicted == gold:
        return correct(LABELER, LABELER_VERSION, extracted, score=f1)
    if f1_threshold is not None and f1 >= f1_threshold:
        return correct(LABELER, LABELER_VERSION, extracted, score=f1)
    return _incorrect(extracted, _mismatch_reason(f1, f1_threshold), f1)


def extract_qa_answer(text: str) -> str:
    boxed = last_boxed_content(text)
    if boxed:
        return strip_decoration(unwrap_text_command(boxed))
    phrase = answer_phrase(text)
    if phrase:
        return phrase
    if "\n" in text.strip():
        return strip_decoration(last_nonempty_line(text) or "")
    return strip_decoration(text)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 / HotpotQA normalization."""
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(normalized_prediction: str, normalized_reference: str) -> float:
    """HotpotQA's f1_score on already-normalized strings."""
    if normalized_prediction != normalized_reference and (
        normalized_prediction in _CLOSED_ANSWERS or normalized_reference in _CLOSED_ANSWERS
    ):
        return 0.0
    prediction_tokens = normalized_prediction.split()
    reference_tokens = normalized_reference.split()
    overlap = sum((Counter(prediction_tokens) & Counter(reference_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(prediction_tokens)
    recall = overlap / len(reference_tokens)
    return 2 * precision * recall / (precision + recall)


def _mismatch_reason(f1: float, f1_threshold: float | None) -> str:
    if f1_threshold is None:
        return f"exact match failed (F1={f1:.2f})"
    return f"exact match failed and F1={f1:.2f} < {f1_threshold:g}"


def _incorrect(extracted: str, reason: str, f1: float) -> Verdict:
    return incorrect(LABELER, LABELER_VERSION, extracted, reason, score=f1)


class QALabeler:
    name = LABELER
    version = LABELER_VERSION
    answer_type = "qa"
    benchmark_prefixes = ("hotpotqa", "browsecomp", "nq", "triviaqa", "squad")
    prompt_file = "answer_qa"

    def claim(self, reference: str | None, choices: Sequence[str] | None) -> Claim:
        return Claim.FALLBACK  # a short answer is what any other answer is not

    def label(self, reference: str, text: str, choices: Sequence[str] | None, **options) -> Verdict:
        return label_qa(reference, text, options.get("qa_f1_threshold"))


register_labeler(QALabeler())
