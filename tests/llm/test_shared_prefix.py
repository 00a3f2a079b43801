"""Rows that share their prompts' text decode on one copy of it (cascade attention): the prompts' common prefix
held once, each prompt's tail once, each row's cache holding only what it generated. A decode step's logits equal
those over each row's own copy of its whole prompt (left padding, several prompts with a common prefix, runs of rows,
a run split by a row of another prompt, rows leaving the batch)."""

import pytest
import torch

from orchrm_dagster.llm.kv_cache import GrowingCache, left_padded
from orchrm_dagster.llm.shared_prefix import MIN_COMMON_TOKENS, attending, common_length, prefill, shares_prefixes
from orchrm_dagster.llm.transformers_decoding import _prefill, load_model

pytestmark = pytest.mark.filterwarnings("ignore")

FEW_SHOT = ("You orchestrate sub-agents. Example: a plan with one verifying agent answers arithmetic well, a plan "
            "with two agents checks itself. Now plan for this question: ")


@pytest.fixture(scope="module", params=[(2, 2), (4, 1)], ids=["heads-2-kv-2", "grouped-query-4-over-1"])
def tiny(tmp_path_factory, request):
    from tests.tiny_models import make_tiny_policy

    heads, kv_heads = request.param
    folder = make_tiny_policy(tmp_path_factory.mktemp("tiny_policy"), heads=heads, kv_heads=kv_heads)
    return load_model(folder, device="cpu")


def prompts(tiny, head: str = FEW_SHOT) -> list[list[int]]:
    questions = ["what is 12 + 30? Think about it.", "a prime above 40?", "7 x 8?"]
    return [tiny.tokenizer(head + question)["input_ids"] for question in questions]


@pytest.mark.parametrize("head", [FEW_SHOT, ""])  # a long common prefix held once; none: whole prompts as tails
@torch.inference_mode()
def test_a_step_over_prompts_held_once_gives_the_logits_of_per_row_copies(tiny, head):
    model = tiny.model
    assert shares_prefixes(model)
    distinct = prompts(tiny, head)
    assert (common_length(distinct) >= MIN_COMMON_TOKENS) == bool(head)
    rows = [distinct[i] for i in (0, 0, 0, 1, 1, 0, 2, 2)]  # runs of one prompt, one split by another prompt
    input_ids, attention = left_padded(rows, tiny.pad_token_id, model.device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    copies = _prefill(model, input_ids, attention, positions, [tuple(r) for r in rows])
    logits, prefix = prefill(model, rows, tiny.pad_token_id, GrowingCache)
    assert prefix.prompt_of_row == [0, 0, 0, 1, 1, 0, 2, 2] and bool(prefix.common_keys) == bool(head)
    torch.testing.assert_close(logits, copies.logits[:, -1, :], atol=1e-5, rtol=1e-4)
    per_row, own = copies.past_key_values, GrowingCache()
    tokens = torch.tensor([[5], [9], [11], [5], [7], [3], [2], [13]])
    for step in range(4):
        positions = positions[:, -1:] + 1
        attention = torch.cat([attention, attention.new_ones((len(tokens), 1))], dim=1)
        expected = model(input_ids=tokens, attention_mask=attention, position_ids=positions,
                         past_key_values=per_row, use_cache=True).logits[:, -1, :]
        with attending(model):
            got = model(input_ids=tokens, position_ids=positions, past_key_values=own, use_cache=True,
                        shared_prefix=prefix).logits[:, -1, :]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
        assert own.layers[0].keys.shape[-2] == step + 1  # the rows' own caches: what they generated, no prompt
        tokens = expected.argmax(-1, keepdim=True)
        if step == 1:  # rows 1 and 4 finish: the rest go on
            keep = [0, 2, 3, 5, 6, 7]
            index = torch.tensor(keep)
            per_row.batch_select_indices(index)
            own.batch_select_indices(index)
            prefix.keep_rows(keep)
            attention, positions, tokens = attention[index], positions[index], tokens[index]
    assert model.config._attn_implementation != "orchrm_shared_prefix"  # its own attention again after the loop


def test_the_common_prefix_leaves_each_prompt_its_last_token_and_is_not_held_below_the_floor():
    assert common_length([[1] * 40, [1] * 40]) == 39  # the same prompt twice: its last token starts decoding
    assert common_length([[7] * 30 + [1], [7] * 30 + [2, 3]]) == 30
    assert common_length([[7] * (MIN_COMMON_TOKENS - 1) + [1], [7] * (MIN_COMMON_TOKENS - 1) + [2]]) == 0


def test_a_model_whose_attention_the_shared_prefix_does_not_know_decodes_with_copies(tiny):
    from types import SimpleNamespace

    from transformers import Gemma2Config, MistralConfig

    assert shares_prefixes(tiny.model)
    assert not shares_prefixes(SimpleNamespace(config=tiny.model.config, device=torch.device("cuda")))  # unrun there
    assert not shares_prefixes(SimpleNamespace(config=Gemma2Config()))  # softcapped scores
    assert not shares_prefixes(SimpleNamespace(config=MistralConfig(sliding_window=4096)))
