"""Math answers: a cheap string fast path, then math-verify."""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from importlib.metadata import version
from typing import Iterator, Sequence

from .extract import answer_phrase, last_boxed_content, unwrap_text_command
from .labeler import Claim, register_labeler
from .time_limit import LabelTimeout, time_limit
from .verdict import Verdict, correct, incorrect

LABELER = "math_verify"
LABELER_VERSION = f"math-verify-{version('math-verify')}+orchrm1"

# Wall-clock budget for parsing and comparing one answer.
TIME_LIMIT_S = 5.0

# how an answer is extracted (math-verify's extraction configs, made on first use: importing math-verify takes half
# a second, which commands that only read settings should not pay)
_LATEX_ONLY = "latex"
_LATEX_THEN_PLAIN = "latex, then plain"

_INLINE_SPACING = re.compile(r"\\[!,;: ]")
_SMALL_FRACTION = re.compile(r"\\[dt]frac")
_SPACE_NOT_BETWEEN_DIGITS = re.compile(r"(?<!\d)\s+|\s+(?!\d)")
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_PLAIN_INTEGER = re.compile(r"(-?)0*(\d+)")
_WHOLE_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{(.*)\}", re.DOTALL)
_MATH_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+(?:\s*\{[^{}]*\})?")
_PROSE_WORD = re.compile(r"[A-Za-z]{4,}")
_BARE_MATH_MAX_CHARS = 200
_TOO_LARGE = "answer is too large to evaluate safely"
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_LATEX_HINT = re.compile(r"\\[A-Za-z]|[$^_{}]")


class _DropTimeoutDisabledWarning(logging.Filter):
    """We pass timeout=None on purpose (time_limit replaces it); don't warn about it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())


def label_math(reference: str, text: str) -> Verdict:
    fast = fast_path_match(reference, text)
    if fast is not None:
        return correct(LABELER, LABELER_VERSION, fast)
    return label_with_math_verify(reference, text)


def label_with_math_verify(reference: str, text: str) -> Verdict:
    try:
        with time_limit(TIME_LIMIT_S):
            return _compare(reference, text)
    except LabelTimeout:
        return _incorrect(None, f"math-verify error: timed out after {TIME_LIMIT_S:g}s")
    except Exception as exc:
        return _incorrect(None, f"math-verify error: {type(exc).__name__}: {_safe_message(exc)}")


def _compare(reference: str, text: str) -> Verdict:
    gold = _parse_reference(reference)
    if not gold:
        return _incorrect(None, "could not parse the reference answer")
    predicted = _parse_prediction(text)
    if predicted is None:
        return _incorrect(None, _TOO_LARGE)
    if not predicted:
        return _incorrect(None, "could not parse a math answer from final_answer")
    from .math_size import too_large_to_evaluate  # sympy: imported with math-verify, when a label needs it

    extracted = _extracted_string(predicted)
    if any(too_large_to_evaluate(item) for item in predicted):
        return _incorrect(extracted, _TOO_LARGE)
    from math_verify import verify

    if verify(list(gold), predicted, timeout_seconds=None):
        return correct(LABELER, LABELER_VERSION, extracted)
    return _incorrect(extracted, "math-verify: not equivalent to the reference")


# --- fast path -------------------------------------------------------------


def fast_path_match(reference: str, text: str) -> str | None:
    """The candidate answer string if it equals the reference after normalization."""
    target = normalize_math_string(reference)
    if not target:
        return None
    for candidate in _fast_path_candidates(text):
        if normalize_math_string(candidate) == target:
            return candidate.strip()
    return None


def _fast_path_candidates(text: str) -> list[str]:
    boxed = last_boxed_content(text)
    if boxed is not None:
        return [boxed]
    phrase = answer_phrase(text)
    return [text, phrase] if phrase else [text]


def normalize_math_string(text: str) -> str:
    text = text.replace("\\$", "").replace("$", "").strip()
    whole_boxed = _WHOLE_BOXED.fullmatch(text)
    if whole_boxed and last_boxed_content(text) == whole_boxed.group(1).strip():
        text = whole_boxed.group(1)
    text = unwrap_text_command(text)
    text = _INLINE_SPACING.sub("", text)
    text = _SMALL_FRACTION.sub(r"\\frac", text)
    text = _SPACE_NOT_BETWEEN_DIGITS.sub("", text)
    text = _THOUSANDS_COMMA.sub("", text).rstrip(".")
    integer = _PLAIN_INTEGER.fullmatch(text)
    return integer.group(1) + integer.group(2) if integer else text


# --- math-verify parsing ---------------------------------------------------


@lru_cache(maxsize=8192)
def _parse_reference(reference: str) -> tuple:
    # References are LaTeX without delimiters, so wrap them for math-verify.
    for candidate, configs in ((_as_latex(reference), _LATEX_ONLY), (reference, _LATEX_THEN_PLAIN)):
        parsed = _parse(candidate, configs)
        if parsed:
            return tuple(parsed)
    return ()


def _parse_prediction(text: str) -> list | None:
    """Parsed answer, [] when none is found, None when it is unsafe to parse."""
    from .math_size import text_too_large_to_parse

    unparsed_match: list = []
    for candidate, configs in _prediction_attempts(text):
        if text_too_large_to_parse(candidate):
            return None
        parsed = _parse(candidate, configs)
        if any(not isinstance(item, str) for item in parsed):
            return parsed
        # Only the matched string came back (e.g. "#### 18" read as LaTeX):
        # keep it in case no later attempt parses.
        unparsed_match = unparsed_match or parsed
    return unparsed_match


def _prediction_attempts(text: str) -> Iterator[tuple[str, Sequence]]:
    boxed = last_boxed_content(text)
    if boxed:
        # Only the last box: math-verify alone would merge every \boxed into a set.
        yield _as_latex(boxed), _LATEX_ONLY
        yield boxed, _LATEX_THEN_PLAIN
        return
    phrase = answer_phrase(text)
    if phrase and looks_like_bare_math(phrase):
        yield _as_latex(phrase), _LATEX_ONLY
    if looks_like_bare_math(text):
        yield _as_latex(text), _LATEX_ONLY
    yield text, _LATEX_THEN_PLAIN


def looks_like_bare_math(text: str) -> bool:
    """Short LaTeX or arithmetic without $ delimiters, e.g. "3\\sqrt{13}" or "p - q".

    math-verify only reads LaTeX inside delimiters, and outside them picks out
    plain numbers, so "1 \\pm \\sqrt{19}" would become 1 unless wrapped.
    """
    text = text.strip()
    if not text or len(text) > _BARE_MATH_MAX_CHARS or "\n" in text:
        return False
    if _MATH_DELIMITER.search(text):
        return False
    return not _PROSE_WORD.search(_LATEX_COMMAND.sub(" ", text))


def _parse(candidate: str, extraction: str) -> list:
    from math_verify import parse

    return parse(candidate, extraction_config=_extraction_configs(extraction), parsing_timeout=None)


@lru_cache(maxsize=None)
def _extraction_configs(extraction: str) -> tuple:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    if extraction == _LATEX_ONLY:
        return (LatexExtractionConfig(),)
    return LatexExtractionConfig(), ExprExtractionConfig()


def _as_latex(text: str) -> str:
    # Inline $...$ cannot span lines in math-verify's patterns.
    return "$" + " ".join(text.split("\n")) + "$"


def _extracted_string(predicted: list) -> str:
    if len(predicted) > 1 and isinstance(predicted[1], str):
        return predicted[1]
    return _safe_message(predicted[0])


def _safe_message(value: object) -> str:
    try:
        return str(value)[:200]
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def _incorrect(extracted: str | None, reason: str) -> Verdict:
    return incorrect(LABELER, LABELER_VERSION, extracted, reason)


def reference_looks_mathematical(reference: str | None) -> bool:
    if not reference:
        return False
    text = reference.strip().replace(",", "")
    return bool(_NUMBER.fullmatch(text) or _LATEX_HINT.search(text))


class MathLabeler:
    name = LABELER
    version = LABELER_VERSION
    answer_type = "math"
    benchmark_prefixes = ("aime", "gsm8k", "math", "deepscaler", "amc", "olympiad")
    prompt_file = "answer_math"

    def claim(self, reference: str | None, choices: Sequence[str] | None) -> Claim:
        return Claim.LIKELY if reference_looks_mathematical(reference) else Claim.NONE

    def label(self, reference: str, text: str, choices: Sequence[str] | None, **options) -> Verdict:
        return label_math(reference, text)


register_labeler(MathLabeler())
