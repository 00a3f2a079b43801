from __future__ import annotations

import pytest

from orchrm_dagster.mas.answers import extract_answer, majority_index, normalize_answer


@pytest.mark.parametrize("text,answer", [
    ("so \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{ 18 } and an unclosed \\boxed{19", "18"),
    ("reasoning\nAnswer: Paris\nThanks", "Paris"),
    ("answer: A\nfinal ANSWER:  B  ", "B"),
    ("step one\n\n  the result is 7  \n\n", "the result is 7"),
    ("", ""),
    ("Answer:", ""),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_normalize_answer():
    assert normalize_answer(" $18$. ") == normalize_answer("18") == "18"
    assert normalize_answer("**New   York**") == "new york"


def test_majority_index():
    assert majority_index(["\\boxed{3}", "Answer: 4", "\\boxed{4}", "Answer: 3", "Answer: 4"]) == 1
    assert majority_index(["Answer: x", "Answer: y"]) == 0  # tie: first seen
    assert majority_index(["", "Answer: 5", "  "]) == 1  # blanks do not vote
    assert majority_index(["", ""]) == 0 and majority_index([]) == -1
