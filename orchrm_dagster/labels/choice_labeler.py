"""Multiple choice: compare option letters (A = first choice)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

from .extract import last_boxed_content, strip_decoration, unwrap_text_command
from .labeler import Claim, register_labeler
from .qa_labeler import normalize_answer
from .verdict import Verdict, correct, incorrect

LABELER = "choice_letter"
LABELER_VERSION = "orchrm1"

LETTERS = "ABCDEFGHIJ"


def label_choice(reference: str, text: str, choices: Sequence[str] | None = None) -> Verdict:
    gold = reference_letter(reference, choices)
    if gold is None:
        return _incorrect(None, "reference is neither an option letter nor one of the choices")
    predicted = extract_choice_letter(text, choices)
    if predicted is None:
        return _incorrect(None, "could not find an option letter")
    if predicted == gold:
        return correct(LABELER, LABELER_VERSION, predicted)
    return _incorrect(predicted, f"chose {predicted}, reference is {gold}")


def reference_letter(reference: str, choices: Sequence[str] | None) -> str | None:
    # Option text first: GPQA-style references are the text of the right option.
    by_text = _letter_of_choice_text(reference, choices)
    if by_text is not None:
        return by_text
    return _lone_letter(unwrap_text_command(reference), _valid_letters(choices))


def extract_choice_letter(text: str, choices: Sequence[str] | None = None) -> str | None:
    valid = _valid_letters(choices)
    boxed = last_boxed_content(text)
    if boxed is not None:
        letter = _lone_letter(unwrap_text_command(boxed), valid)
        if letter is not None:
            return letter
    # The whole reply is just the letter: "B", "(b)", "B."
    lone = _lone_letter(text, valid)
    if lone is not None:
        return lone
    for pattern in _patterns(valid):
        letter = _last_group(pattern, text)
        if letter is not None:
            return letter
    return _letter_of_choice_text(text, choices)


def _valid_letters(choices: Sequence[str] | None) -> str:
    return LETTERS[: len(choices)] if choices else LETTERS


@lru_cache(maxsize=16)
def _patterns(valid: str) -> tuple[re.Pattern[str], ...]:
    letter = f"[{valid}]"
    # A letter standing alone, but not the pronoun in "the answer is I think ..."
    alone = r"(?![\w'])(?!(?<=I)\s+[a-z])"
    return (
        # "The answer is (B)", "Answer: **B**", "answer is option B"
        re.compile(rf"(?i:\banswer\b)\s*(?:is\b|:)?\s*:?\s*(?i:option|choice)?\s*[*(\[]*\s*({letter}){alone}"),
        re.compile(rf"(?i:\boption|\bchoice)\s*[(\[]?({letter}){alone}"),
        re.compile(rf"\(({letter})\)"),
        # "B)" or "B." opening a line or following whitespace
        re.compile(rf"(?:^|\s)({letter})[).](?:\s|$)", re.MULTILINE),
    )


def _last_group(pattern: re.Pattern[str], text: str) -> str | None:
    matches = pattern.findall(text)
    return matches[-1] if matches else None


def _lone_letter(text: str, valid: str) -> str | None:
    match = re.fullmatch(r"[\s*(\[]*([A-Za-z])[\s*)\].:]*", text)
    if match is None:
        return None
    letter = match.group(1).upper()
    return letter if letter in valid else None


def _letter_of_choice_text(text: str, choices: Sequence[str] | None) -> str | None:
    if not choices:
        return None
    wanted = normalize_answer(strip_decoration(text))
    for index, choice in enumerate(choices[: len(LETTERS)]):
        if wanted and normalize_answer(choice) == wanted:
            return LETTERS[index]
    return None


def _incorrect(extracted: str | None, reason: str) -> Verdict:
    return incorrect(LABELER, LABELER_VERSION, extracted, reason)


class ChoiceLabeler:
    name = LABELER
    version = LABELER_VERSION
    answer_type = "choice"
    benchmark_prefixes = ("gpqa",)
    prompt_file = "answer_choice"

    def claim(self, reference: str | None, choices: Sequence[str] | None) -> Claim:
        return Claim.CERTAIN if choices else Claim.NONE

    def label(self, reference: str, text: str, choices: Sequence[str] | None, **options) -> Verdict:
        return label_choice(reference, text, choices)


register_labeler(ChoiceLabeler())
