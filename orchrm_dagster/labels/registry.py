"""Choose a problem's answer type (so its labeler) and dispatch a final answer to that labeler."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Sequence

from .extract import answer_tag_content
from .labeler import Claim, labeler_for, labelers
from .verdict import Verdict, incorrect


def answer_type_for(benchmark: str, reference: str | None, choices: Sequence[str] | None) -> str:
    """The answer type a labeler is certain of from the problem's own data (a problem with choices), else the one
    whose benchmark prefix the benchmark's name starts with (the longest prefix), else the one whose claim from
    the reference is surest (ties: the first answer type by name)."""
    known = labelers()
    claims = {answer_type: labeler.claim(reference, choices) for answer_type, labeler in known.items()}
    certain = [answer_type for answer_type, claim in claims.items() if claim is Claim.CERTAIN]
    if certain:
        return certain[0]
    name = (benchmark or "").strip().lower()
    named = [(len(prefix), answer_type) for answer_type, labeler in known.items()
             for prefix in labeler.benchmark_prefixes if name.startswith(prefix)]
    if named:
        return max(named)[1]
    return max(claims, key=claims.__getitem__)


def benchmark_answer_type(benchmark: str, answer_types: Mapping[str, str] | None = None) -> str:
    """A benchmark's answer type from its name alone: the one `answer_types` (the settings' `labels.answer_types`:
    benchmark -> answer type, or a dotted path to a labeler) gives it, else the one whose benchmark prefix its name
    starts with, else the default. The domain of a benchmark (`rm.domain_of`), so a team's own benchmark named in the
    settings is labeled, paired and scored in the domain the file says."""
    configured = (answer_types or {}).get(benchmark)
    return labeler_for(configured).answer_type if configured else answer_type_for(benchmark, None, None)


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
    labeler = labeler_for(answer_type)
    if final_answer is None or not str(final_answer).strip():
        return incorrect(labeler.name, labeler.version, None, "no final answer")
    if reference is None or not str(reference).strip():
        return incorrect(labeler.name, labeler.version, None, "no reference answer")
    text = _answer_text(str(final_answer))
    if not text:
        return incorrect(labeler.name, labeler.version, None, "no final answer")
    return labeler.label(str(reference).strip(), text, choices, qa_f1_threshold=qa_f1_threshold)


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
