from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.labels import Verdict, label_answer

# Tokens that exercise the extraction paths: LaTeX, boxes, tags, numbers.
TOKENS = list("0123456789+-*/^_=.,()[]{}$\\ \nabcxyzABCD%!") + [
    "\\boxed{", "\\frac", "\\sqrt", "\\text{", "<answer>", "</answer>", "answer is ", "Answer: ", "\\left(", "\\right)",
]
MATHY = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
ANY_TEXT = st.one_of(st.text(max_size=300), MATHY)
PROPERTY_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    # the repo-wide autouse fixture only sets env vars; sharing it across examples is fine
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_well_formed(verdict):
    assert isinstance(verdict, Verdict)
    assert isinstance(verdict.is_correct, bool)
    assert (verdict.reason is None) == verdict.is_correct
    assert verdict.score is None or 0.0 <= verdict.score <= 1.0


@PROPERTY_SETTINGS
@given(reference=st.one_of(ANY_TEXT, st.sampled_from(["42", "\\frac{14}{3}", "3\\sqrt{13}", "\\text{(C)}"])), answer=ANY_TEXT)
def test_math_never_raises(reference, answer):
    assert_well_formed(label_answer("math", reference, answer))


@PROPERTY_SETTINGS
@given(reference=ANY_TEXT, answer=ANY_TEXT, threshold=st.one_of(st.none(), st.floats(0, 1)))
def test_qa_never_raises(reference, answer, threshold):
    assert_well_formed(label_answer("qa", reference, answer, qa_f1_threshold=threshold))


@PROPERTY_SETTINGS
@given(reference=ANY_TEXT, answer=ANY_TEXT, choices=st.one_of(st.none(), st.lists(st.text(max_size=20), max_size=12)))
def test_choice_never_raises(reference, answer, choices):
    assert_well_formed(label_answer("choice", reference, answer, choices))
