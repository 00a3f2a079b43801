"""A wrong answer to a problem, as its labeler judges it: what a simulated wrong run answers, and what generated
history runs answer when they are wrong."""

from __future__ import annotations

import random

from .choice_labeler import LETTERS as CHOICE_LETTERS


def wrong_answer(rng: random.Random, answer: str, answer_type: str, choices: tuple[str, ...] | None = None) -> str:
    """An answer to a problem of `answer_type` that its labeler judges wrong against `answer` (a math answer moved
    off, another letter for multiple choice, another phrase for QA)."""
    if choices:
        letters = [letter for letter in CHOICE_LETTERS[:len(choices)] if letter != answer.strip().upper()]
        return rng.choice(letters or ["none of the above"])
    if answer.lstrip("-").isdigit():
        return str(int(answer) + rng.choice((-2, -1, 1, 3, 10)))
    if answer_type == "math":  # not a rearrangement: "6+9i" reversed is still 6+9i to math-verify
        return f"{answer}+{rng.randint(1, 9)}"
    return rng.choice(("unknown", "none of the above", f"not {answer}"))
