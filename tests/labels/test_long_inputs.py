import time

import pytest

from orchrm_dagster.labels import label_answer

SIZE = 50_000
ADVERSARIAL = {
    "unclosed boxes": "\\boxed{" * (SIZE // 7),
    "many boxes": "\\boxed{1} " * (SIZE // 10) + "\\boxed{42}",
    "lone dollars": "$" * SIZE,
    "answer tags": "<answer>" * (SIZE // 8),
    "nested braces": "{" * SIZE,
}


@pytest.mark.parametrize("answer_type", ["math", "qa", "choice"])
@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_long_pathological_text_is_labeled_quickly(answer_type, name):
    started = time.monotonic()
    verdict = label_answer(answer_type, "42" if answer_type != "choice" else "B", ADVERSARIAL[name])
    assert time.monotonic() - started < 10
    assert verdict.is_correct == (answer_type != "choice" and name == "many boxes")
