"""The question as every model sees it: the orchestrator's prompt, each sub-agent's task, GRPO's prompts."""

from __future__ import annotations

from collections.abc import Sequence

from orchrm_dagster.labels import CHOICE_LETTERS
from orchrm_dagster.mas.prompts import render_prompt


def question_text(question: str, choices: Sequence[str] | None = None) -> str:
    """``question``, and for a multiple-choice problem its choices lettered as the choice labeler reads a letter
    answer ("A. first choice", ...; the labeler knows as many letters as :data:`CHOICE_LETTERS`, so no more are
    listed)."""
    if not choices:
        return question
    lines = "\n".join(f"{letter}. {choice}" for letter, choice in zip(CHOICE_LETTERS, choices))
    return render_prompt("question_with_choices", question=question, choices=lines)
