"""A simple final-answer extractor and the majority vote of SCAgent.

Deliberately simpler than the labelers (orchrm_dagster.labels): it only has to group samples that
give the same answer, not to grade them.
"""

from __future__ import annotations

import re

_BOXED_OPEN = re.compile(r"\\boxed\s*\{")
_ANSWER_MARK = re.compile(r"answer\s*:", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def extract_answer(text: str) -> str:
    """The last ``\\boxed{...}`` (balanced braces), else the rest of the line after the last
    "Answer:", else the last non-empty line; "" for blank text."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    marks = list(_ANSWER_MARK.finditer(text))
    if marks:
        after = text[marks[-1].end():].strip()
        return after.split("\n", 1)[0].strip() if after else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` whose braces balance, or None."""
    found = None
    for opening in _BOXED_OPEN.finditer(text):
        content = _balanced(text, opening.end())
        if content is not None:
            found = content
    return found


def _balanced(text: str, start: int) -> str | None:
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def normalize_answer(answer: str) -> str:
    """The vote key: case-folded, whitespace collapsed, without surrounding $, *, quotes or a final period."""
    key = _SPACES.sub(" ", answer).strip().rstrip(". ")
    return key.strip("$*`\"' ").rstrip(". ").casefold()


def majority_index(texts: list[str]) -> int:
    """Index of the first text whose answer gets the most votes (ties: the answer seen first).

    Texts without an answer do not vote unless none has one; -1 for an empty list.
    """
    keys = [normalize_answer(extract_answer(t)) for t in texts]
    counts: dict[str, int] = {}
    for key in keys:
        if key:
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return 0 if texts else -1
    winner = max(counts, key=counts.__getitem__)  # dicts keep first-seen order; max keeps the first maximum
    return keys.index(winner)
