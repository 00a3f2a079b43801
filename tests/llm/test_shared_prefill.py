"""Rows of a batch with one prompt (N samples of a problem, a GRPO group) share one forward pass over the prompt: the
same next-token scores and KV cache as a pass per row, so what is sampled does not depend on the sharing. A batch of
several problems' samples forwards each distinct prompt once."""

import pytest
import torch

from orchrm_dagster.llm.kv_cache import left_padded
from orchrm_dagster.llm.transformers_decoding import _prefill, load_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.tiny_models import make_tiny_policy

    return load_model(make_tiny_policy(tmp_path_factory.mktemp("tiny_policy")), device="cpu")


def separately(tiny, input_ids, attention, positions):
    """Every row's own pass (a batch whose prompts all differ is forwarded as it is)."""
    rows = [(i,) for i in range(len(input_ids))]
    return _prefill(tiny.model, input_ids, attention, positions, rows)


@pytest.mark.parametrize("prompts", [
    [[5, 17, 42, 9]] * 3,
    [[5, 17, 42, 9], [8, 3], [5, 17, 42, 9], [8, 3], [8, 3]],  # two problems' samples, one prompt left-padded
])
def test_a_shared_prompt_pass_gives_every_row_the_scores_and_cache_of_its_own_pass(tiny, prompts):
    input_ids, attention = left_padded(prompts, tiny.pad_token_id, "cpu")
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        shared = _prefill(tiny.model, input_ids, attention, positions, [tuple(p) for p in prompts])
        separate = separately(tiny, input_ids, attention, positions)
    assert shared.logits.shape == separate.logits.shape == (len(prompts), 1, tiny.model.config.vocab_size)
    assert torch.allclose(shared.logits, separate.logits, atol=1e-5)
    for mine, theirs in zip(shared.past_key_values.layers, separate.past_key_values.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-5) and torch.allclose(mine.values, theirs.values,
                                                                                     atol=1e-5)
    with torch.inference_mode():
        shared.logits[0, 0, 0] = -1e9  # each row's scores are its own: masking one row leaves the others
    assert shared.logits[1, 0, 0] != -1e9
