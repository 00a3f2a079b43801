import pytest

from orchrm_dagster.labels import label_answer
from orchrm_dagster.labels.qa_labeler import normalize_answer, token_f1


def judge(reference, answer, threshold=None):
    return label_answer("qa", reference, answer, qa_f1_threshold=threshold)


@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        ("Chief of Protocol", "chief of protocol"),
        ("the Eiffel Tower", "Eiffel Tower."),
        ("The Beatles", "beatles!"),
        ("St. Louis", "st louis"),
        ("Chief of Protocol", "The answer is: Chief of Protocol."),
        ("Chief of Protocol", "Answer: **Chief of Protocol**"),
        ("Chief of Protocol", "She served as ambassador.\nLater on she was\nChief of Protocol"),
        ("Chief of Protocol", "<answer>Chief of Protocol</answer>"),
        ("Paris", "\\boxed{\\text{Paris}}"),
        ("yes", "Yes."),
    ],
)
def test_exact_match_after_normalization(reference, answer):
    verdict = judge(reference, answer)
    assert verdict.is_correct, verdict
    assert verdict.score == 1.0
    assert verdict.reason is None


def test_normalization_matches_squad():
    assert normalize_answer("  The  Quick, brown FOX!  ") == "quick brown fox"
    assert normalize_answer("an apple a day") == "apple day"


def test_partial_credit_needs_a_threshold():
    verdict = judge("Barack Obama", "President Barack Obama")
    assert not verdict.is_correct
    assert verdict.score == pytest.approx(0.8)
    assert verdict.reason == "exact match failed (F1=0.80)"

    lenient = judge("Barack Obama", "President Barack Obama", threshold=0.5)
    assert lenient.is_correct
    assert lenient.score == pytest.approx(0.8)

    strict = judge("Barack Obama", "President Barack Obama", threshold=0.9)
    assert not strict.is_correct
    assert "0.80" in strict.reason


def test_yes_no_never_gets_partial_credit():
    assert token_f1("yes", "no") == 0.0
    assert token_f1("no", "no it was not") == 0.0
    verdict = judge("no", "no it was not", threshold=0.1)
    assert not verdict.is_correct
    assert verdict.score == 0.0


def test_extracts_after_the_last_answer_phrase():
    text = "My first answer is London. On reflection, the answer is Paris. It is in France."
    verdict = judge("Paris", text)
    assert verdict.is_correct
    assert verdict.extracted_answer == "Paris"


def test_keeps_initials_inside_the_answer():
    assert judge("Washington, D.C.", "The answer is Washington, D.C.").is_correct
    verdict = judge("J. K. Rowling", "I think the answer is J. K. Rowling. She wrote it in 1997.")
    assert verdict.is_correct
    assert verdict.extracted_answer == "J. K. Rowling"
    assert judge("Mr. Church", "The answer is Mr. Church. He was played by Eddie Murphy.").is_correct


def test_wrong_answer():
    verdict = judge("Paris", "The answer is Lyon.")
    assert not verdict.is_correct
    assert verdict.extracted_answer == "Lyon"
    assert verdict.score == 0.0


def test_answer_that_is_only_articles_and_punctuation():
    verdict = judge("Paris", "The.")
    assert not verdict.is_correct
    assert verdict.reason == "answer is empty after normalization"
