import pytest

from orchrm_dagster.labels import label_answer, labeler_for


def judge(reference, answer):
    return label_answer("math", reference, answer)


@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        ("\\frac{1}{2}", "So we get $\\boxed{\\frac{1}{2}}$."),
        ("\\frac{1}{2}", "\\boxed{0.5}"),
        ("0.5", "The answer is 1/2."),
        ("\\frac{14}{3}", "14/3"),
        ("\\frac{14}{3}", "The answer is $\\dfrac{14}{3}$"),
        ("25", "025"),
        ("25", "The answer is \\boxed{025}"),
        ("025", "25"),
        ("1000", "1,000"),
        ("1000", "The total is \\boxed{1,000} dollars"),
        ("10,\\!080", "10080"),
        ("\\$32,\\!348", "\\$32,348"),
        ("42", "The answer is 42."),
        ("18", "She makes $18 every day. The answer is $18."),
        ("3\\sqrt{13}", "\\boxed{3 \\sqrt{13}}"),
        ("\\text{(C)}", "\\boxed{C}"),
        ("\\text{(C)}", "The answer is (C)"),
        ("\\text{Evelyn}", "Evelyn"),
        ("p - q", "The answer is p-q."),
        ("1 \\pm \\sqrt{19}", "1 \\pm \\sqrt{19}"),
        ("90^\\circ", "\\boxed{90}"),
        ("x=5", "5"),
        ("1,-2", "\\boxed{-2, 1}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "$(3, \\pi/2)$"),
        ("18", "Janet makes 9 * 2 = 18 dollars.\n#### 18"),
        ("-5", "The answer is \u22125."),
        ("5", "\\boxed 5"),
        ("12", "**Final Answer**\n\n12"),
    ],
)
def test_equivalent_answers_are_correct(reference, answer):
    verdict = judge(reference, answer)
    assert verdict.is_correct, verdict
    assert verdict.reason is None
    assert verdict.score == 1.0
    assert verdict.extracted_answer


@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        ("25", "24"),
        ("25", "The answer is \\boxed{24}"),
        ("\\sqrt{2}", "\\boxed{2}"),
        ("2", "\\boxed{\\sqrt{2}}"),
        ("\\frac{14}{3}", "\\frac{3}{14}"),
        ("1000", "100"),
        ("250", "25"),
        ("-5", "5"),
        ("\\text{(C)}", "\\boxed{D}"),
    ],
)
def test_close_but_wrong_answers_are_incorrect(reference, answer):
    verdict = judge(reference, answer)
    assert not verdict.is_correct, verdict
    assert verdict.score == 0.0
    assert verdict.reason


def test_last_boxed_wins():
    text = "First try: \\boxed{3}. Wait, that is wrong; it should be \\boxed{\\frac{1}{2}}."
    assert judge("\\frac{1}{2}", text).is_correct
    assert not judge("3", text).is_correct
    assert judge("3", text).extracted_answer == "\\frac{1}{2}"


def test_nested_braces_inside_boxed():
    verdict = judge("\\frac{3\\sqrt{3}}{4}", "Area is \\boxed{\\frac{3\\sqrt{3}}{4}} square units")
    assert verdict.is_correct
    assert verdict.extracted_answer == "\\frac{3\\sqrt{3}}{4}"


def test_answer_tag_form():
    assert judge("\\frac{1}{2}", "thinking... 7 <answer>0.5</answer>").is_correct
    assert judge("7", "<answer>1</answer> then <answer>7</answer>").is_correct


def test_text_without_an_answer():
    verdict = judge("42", "I am not sure how to solve this problem.")
    assert not verdict.is_correct
    assert verdict.extracted_answer is None
    assert verdict.reason == "could not parse a math answer from final_answer"


@pytest.mark.parametrize("empty", [None, "", "   \n\t"])
def test_missing_final_answer(empty):
    verdict = judge("42", empty)
    assert not verdict.is_correct
    assert verdict.reason == "no final answer"


def test_huge_answers_are_refused_not_computed():
    verdict = judge("5", "The answer is $10^{10^{10}}$")
    assert not verdict.is_correct
    assert "too large" in verdict.reason


def test_verdict_metadata():
    verdict = judge("42", "\\boxed{42}")
    assert verdict.labeler == "math_verify"
    assert verdict.labeler_version == labeler_for("math").version
    assert verdict.labeler_version.startswith("math-verify-0.9.0")
