import pytest

from orchrm_dagster.rm.score import RewardScorer, _load


def _inputs(n: int):
    questions = [f"question {i}" for i in range(n)]
    plans = ["<agent> step" * (1 + (i * 7) % 13) for i in range(n)]  # lengths shuffled against input order
    return questions, plans


def test_scores_come_back_in_input_order(tiny_backbone):
    scorer = RewardScorer(tiny_backbone, device="cpu", batch_size=4)
    questions, plans = _inputs(10)
    scores, lengths = scorer.score_with_lengths(questions, plans)
    one_by_one = [scorer.score([q], [p])[0] for q, p in zip(questions, plans)]
    assert scores == pytest.approx(one_by_one, abs=1e-5)
    assert lengths == [len(scorer.tokenizer(f"Question:\n{q}\n\nPlan:\n{p}")["input_ids"])
                       for q, p in zip(questions, plans)]
    assert scorer.score(questions, plans) == scores  # deterministic
    assert scorer.score([], []) == []


def test_long_inputs_are_truncated(tiny_backbone):
    scorer = RewardScorer(tiny_backbone, device="cpu", max_length=32)
    _, lengths = scorer.score_with_lengths(["q"], ["word " * 500])
    assert lengths == [32]
    assert scorer.count_plan_tokens(["word " * 500]) == [500]


def test_loaded_models_are_cached(tiny_backbone):
    first = RewardScorer(tiny_backbone, device="cpu")
    hits = _load.cache_info().hits
    second = RewardScorer(tiny_backbone, device="cpu", batch_size=8)
    assert second.model is first.model
    assert _load.cache_info().hits == hits + 1


def test_batches_are_length_sorted_and_bounded():
    from orchrm_dagster.rm.score import length_sorted_batches

    lengths = [50, 10, 300, 20, 40, 30]
    assert length_sorted_batches(lengths, batch_size=2, max_batch_tokens=None) == [[1, 3], [5, 4], [0, 2]]
    assert length_sorted_batches(lengths, batch_size=8, max_batch_tokens=100) == [[1, 3, 5], [4, 0], [2]]
    assert length_sorted_batches([], batch_size=8, max_batch_tokens=100) == []


def test_batches_are_cut_by_padded_tokens_and_score_as_one_by_one(tiny_backbone):
    from orchrm_dagster.rm.score import ENCODED_CHUNK

    scorer = RewardScorer(tiny_backbone, device="cpu", max_batch_tokens=1024)
    questions, plans = _inputs(max(100, 3 * ENCODED_CHUNK + 5))  # chunks encoded ahead of the forward passes
    shapes = []
    launch = scorer.launch
    scorer.launch = lambda batch_ids: shapes.append((len(batch_ids), max(map(len, batch_ids)))) or launch(batch_ids)
    scores, lengths = scorer.score_with_lengths(questions, plans)
    assert all(rows * width <= 1024 for rows, width in shapes) and sum(rows for rows, _ in shapes) == len(plans)
    assert max(rows for rows, _ in shapes) > 32  # short inputs: more than the old 32 a batch
    del scorer.launch
    one_by_one = [scorer.score([q], [p])[0] for q, p in zip(questions, plans)]
    assert scores == pytest.approx(one_by_one, abs=1e-5)
    assert lengths == [len(scorer.tokenizer(f"Question:\n{q}\n\nPlan:\n{p}")["input_ids"])
                       for q, p in zip(questions, plans)]


def test_a_batch_without_a_count_is_cut_by_tokens_alone():
    from orchrm_dagster.rm.score import length_sorted_batches

    assert length_sorted_batches([10] * 50, batch_size=None, max_batch_tokens=200) == [list(range(20)),
                                                                                       list(range(20, 40)),
                                                                                       list(range(40, 50))]
