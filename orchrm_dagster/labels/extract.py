"""Locate the final answer inside free-form model output.

All helpers are total: they take any string and return a string or None.
"""

from __future__ import annotations

import re
from functools import lru_cache

_OPEN_ANSWER_TAG = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE_ANSWER_TAG = re.compile(r"</answer>", re.IGNORECASE)
# A box opening, an escaped character (so \{ and \\ are skipped), or a brace.
_BRACE_TOKEN = re.compile(r"\\(?:boxed|fbox)\s*\{|\\.|[{}]", re.DOTALL)
_BOXED_NO_BRACES = re.compile(r"\\boxed\s+([^\s${}]+)")
_ANSWER_PHRASE = re.compile(r"\banswer\b\s*(?:is\b|:)\s*:?", re.IGNORECASE)
_PERIOD_BEFORE_SPACE = re.compile(r"\.(?=\s|$)")
_WORD_BEFORE = re.compile(r"[A-Za-z.]+$")
# Periods after these do not end a sentence ("Mr. Church", "Rear Adm. Snyder").
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr mt ft vs etc inc co corp ltd no adm gen col lt capt cmdr sgt gov sen rep prof rev hon".split()
)
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_DECORATION = "*_`\"' \t"


def answer_tag_content(text: str) -> str | None:
    """Content of the last complete <answer>...</answer>, if any."""
    last_close = None
    for last_close in _CLOSE_ANSWER_TAG.finditer(text):
        pass
    if last_close is None:
        return None
    last_open = None
    for last_open in _OPEN_ANSWER_TAG.finditer(text, 0, last_close.start()):
        pass
    return text[last_open.end() : last_close.start()].strip() if last_open else None


@lru_cache(maxsize=256)
def last_boxed_content(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (nested braces allowed).

    One pass over braces with a stack, so many unclosed boxes stay linear.
    """
    stack: list[int | None] = []  # content start for a box opening, None for a plain "{"
    last: tuple[int, int] | None = None
    for token in _BRACE_TOKEN.finditer(text):
        kind = token.group()
        if kind == "{":
            stack.append(None)
        elif kind == "}":
            content_start = stack.pop() if stack else None
            if content_start is not None and (last is None or content_start > last[0]):
                last = (content_start, token.start())
        elif len(kind) > 2:  # \boxed{ (two-character tokens are escapes)
            stack.append(token.end())
    if last is not None:
        return text[last[0] : last[1]].strip()
    unbraced = None
    for unbraced in _BOXED_NO_BRACES.finditer(text):
        pass
    return unbraced.group(1) if unbraced else None


def answer_phrase(text: str) -> str | None:
    """What follows the last "answer is" / "Answer:", up to the end of that sentence."""
    last = None
    for last in _ANSWER_PHRASE.finditer(text):
        pass
    if last is None:
        return None
    line = text[last.end():].lstrip().split("\n", 1)[0]
    phrase = strip_decoration(first_sentence(line))
    return phrase or None


def first_sentence(line: str) -> str:
    for period in _PERIOD_BEFORE_SPACE.finditer(line):
        if not _ends_with_abbreviation(line[: period.start()]):
            return line[: period.start()]
    return line


def _ends_with_abbreviation(text: str) -> bool:
    word = _WORD_BEFORE.search(text[-40:])
    if word is None:
        return False
    token = word.group().lower()
    # one letter ("J. K. Rowling") or dotted initials ("D.C.", "U.S.")
    return len(token) == 1 or "." in token or token in _ABBREVIATIONS


def last_nonempty_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def strip_decoration(text: str) -> str:
    """Remove markdown emphasis, quotes and a trailing period around an answer."""
    return text.strip(_DECORATION).rstrip(_DECORATION + ".")


def unwrap_text_command(text: str) -> str:
    """\\text{Paris} -> Paris (also \\textbf, \\mathrm, \\mbox, ...)."""
    return _TEXT_WRAPPER.sub(r"\1", text)
