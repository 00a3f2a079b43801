import pytest

from orchrm_dagster.labels import label_answer

CHOICES = ["London", "Berlin", "Paris", "Rome"]


@pytest.mark.parametrize(
    "answer",
    [
        "The answer is (C)",
        "the correct answer is C.",
        "Answer: C",
        "**Answer:** (C) Paris",
        "\\boxed{C}",
        "$\\boxed{\\text{C}}$",
        "(C)",
        "C)",
        "C",
        "c",
        "After weighing (A) and (B), I choose option C",
        "Between the options, (C) is right",
        "<answer>C</answer>",
    ],
)
def test_letter_formats(answer):
    verdict = label_answer("choice", "C", answer)
    assert verdict.is_correct, verdict
    assert verdict.extracted_answer == "C"


def test_reference_given_as_option_text():
    assert label_answer("choice", "Paris", "The answer is (C)", CHOICES).is_correct
    assert not label_answer("choice", "Paris", "The answer is (B)", CHOICES).is_correct


def test_answer_given_as_option_text():
    verdict = label_answer("choice", "C", "Paris", CHOICES)
    assert verdict.is_correct
    assert verdict.extracted_answer == "C"


def test_wrong_letter():
    verdict = label_answer("choice", "C", "The answer is (B)")
    assert not verdict.is_correct
    assert verdict.extracted_answer == "B"
    assert verdict.score == 0.0


def test_letters_beyond_the_choices_are_ignored():
    verdict = label_answer("choice", "A", "(E)", ["x", "y", "z", "w"])
    assert not verdict.is_correct
    assert verdict.reason == "could not find an option letter"


def test_pronoun_i_is_not_an_option():
    assert label_answer("choice", "B", "The answer is I think (B)").is_correct
    assert label_answer("choice", "I", "The answer is I.").is_correct


def test_no_letter():
    verdict = label_answer("choice", "A", "I think it depends on the weather")
    assert not verdict.is_correct
    assert verdict.reason == "could not find an option letter"


def test_unknown_reference():
    verdict = label_answer("choice", "Madrid", "(A)", CHOICES)
    assert not verdict.is_correct
    assert "reference" in verdict.reason
