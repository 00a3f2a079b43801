"""Locate the final answer inside free-form model output.

All helpers are total: they take any string and return a string or None.
"""

from __future__ import annotations

import re

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_OPEN_ANSWER_TAG = re.compile(r"<answer>", re.IGNORECASE)
_BOXED_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_NO_BRACES = re.compile(r"\\boxed\s+([^\s${}]+)")
_ANSWER_PHRASE = re.compile(r"\banswer\b\s*(?:is\b|:)\s*:?", re.IGNORECASE)
# A period ending a sentence: followed by whitespace or the end, and not the
# dot of a one-letter abbreviation such as the "C." in "D.C." or "J. K.".
_SENTENCE_END = re.compile(r"(?<!\b[A-Za-z])\.(?=\s|$)")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_DECORATION = "*_`\"' \t"


def answer_tag_content(text: str) -> str | None:
    """Content of the last <answer>...</answer>; a trailing unclosed tag counts too."""
    closed = _ANSWER_TAG.findall(text)
    last_open = None
    for last_open in _OPEN_ANSWER_TAG.finditer(text):
        pass
    if last_open is not None and "</answer>" not in text[last_open.end():].lower():
        return text[last_open.end():].strip()
    return closed[-1].strip() if closed else None


def last_boxed_content(text: str) -> str | None:
    """Content of the last well-formed \\boxed{...} (nested braces allowed)."""
    found = None
    for opening in _BOXED_OPEN.finditer(text):
        content = _balanced_content(text, opening.end())
        if content is not None:
            found = content
    if found is None:
        bare = _BOXED_NO_BRACES.findall(text)
        found = bare[-1] if bare else None
    return found.strip() if found is not None else None


def _balanced_content(text: str, start: int) -> str | None:
    """Text from start up to the brace closing the one just before start."""
    depth = 1
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # skip escaped characters such as \{ and \}
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return None


def answer_phrase(text: str) -> str | None:
    """What follows the last "answer is" / "Answer:", up to the end of that sentence."""
    last = None
    for last in _ANSWER_PHRASE.finditer(text):
        pass
    if last is None:
        return None
    line = text[last.end():].lstrip().split("\n", 1)[0]
    sentence_end = _SENTENCE_END.search(line)
    if sentence_end is not None:
        line = line[: sentence_end.start()]
    phrase = strip_decoration(line)
    return phrase or None


def last_nonempty_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def strip_decoration(text: str) -> str:
    """Remove markdown emphasis, quotes and a trailing period around an answer."""
    text = text.strip().strip(_DECORATION)
    while text.endswith("."):
        text = text[:-1].rstrip().rstrip(_DECORATION)
    return text


def unwrap_text_command(text: str) -> str:
    """\\text{Paris} -> Paris (also \\textbf, \\mathrm, \\mbox, ...)."""
    return _TEXT_WRAPPER.sub(r"\1", text)
