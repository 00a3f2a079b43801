"""Fast checks of the pieces of the transformers decoding loop that need no model."""

import math

import torch
import xgrammar as xgr

from orchrm_dagster.llm.kv_cache import left_padded
from orchrm_dagster.llm.transformers_decoding import _batches, _Row, _warp
from orchrm_dagster.llm.base import ChatRequest, SamplingSettings
from orchrm_dagster.plans import plan_grammar_ebnf


def test_plan_grammar_is_valid_xgrammar_ebnf():
    grammar = xgr.Grammar.from_ebnf(plan_grammar_ebnf())
    assert "root" in str(grammar)


def test_left_padding_puts_tokens_on_the_right():
    ids, attention = left_padded([[5, 6, 7], [8]], pad_id=0, device="cpu")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert attention.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_top_p_keeps_the_nucleus_only():
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    warped = _warp(scores, temperature=1.0, top_p=0.7)
    assert torch.isfinite(warped[0, :2]).all() and torch.isinf(warped[0, 2:]).all()
    assert _warp(scores, temperature=0.0, top_p=0.1) is scores  # greedy ignores top_p


def test_temperature_divides_the_scores():
    scores = torch.tensor([[2.0, -4.0]])
    assert _warp(scores, temperature=2.0, top_p=1.0).tolist() == [[1.0, -2.0]]
    assert math.isinf(_warp(torch.tensor([[0.0, -30.0]]), 1.0, top_p=1e-6)[0, 1])


def test_batches_group_by_sampling_and_grammar_and_respect_the_size():
    def row(index, temperature=0.0, grammar=None, length=3):
        request = ChatRequest(messages=({"role": "user", "content": "x"},),
                              sampling=SamplingSettings(temperature=temperature, seed=index), grammar=grammar)
        return _Row(index, request, [1] * length)

    rows = [row(0), row(1, temperature=1.0), row(2, length=1), row(3, grammar="g"), row(4), row(5)]
    batches = [[r.index for r in batch] for batch in _batches(rows, max_batch_size=2)]
    assert batches == [[2, 0], [4, 5], [1], [3]]
