import json
from pathlib import Path

import pytest

from orchrm_dagster.labels import label_answer
from orchrm_dagster.labels.math_labeler import label_with_math_verify

MATH500 = Path(__file__).parents[2] / "orchrm_dagster" / "data" / "benchmarks" / "math500.jsonl"


@pytest.fixture(scope="module")
def references():
    with MATH500.open() as lines:
        return [json.loads(line)["answer"] for line in lines]


def test_boxed_reference_is_judged_correct(references):
    failures = [
        ref for ref in references[:50] if not label_answer("math", ref, "The answer is $\\boxed{" + ref + "}$").is_correct
    ]
    assert failures == []


def test_math_verify_alone_accepts_boxed_references(references):
    # Bypasses the string fast path so math-verify must parse every reference.
    failures = [
        ref for ref in references[:50] if not label_with_math_verify(ref, "The answer is $\\boxed{" + ref + "}$").is_correct
    ]
    assert failures == []


def test_bare_reference_text_is_judged_correct_by_math_verify(references):
    failures = [ref for ref in references[:50] if not label_with_math_verify(ref, ref).is_correct]
    assert failures == []
