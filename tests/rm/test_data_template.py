import pyarrow as pa
import pytest

from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.rm.template import InputSpec, encode, format_input
from orchrm_dagster.rm.train import ensure_distinct_pad_token, pairs_in_steps


def test_format_input_puts_question_before_plan():
    assert format_input("2+2?", "<agent>") == "Question:\n2+2?\n\nPlan:\n<agent>"


def test_from_arrow_filters_a_split():
    table = pa.table({"pair_id": ["p1", "p2", "p3"], "split": ["train", "validation", "train"],
                      "source": ["s", "c", "s"], "question": ["q1", "q2", "q3"],
                      "chosen_plan": ["w1", "w2", "w3"], "rejected_plan": ["l1", "l2", "l3"]})
    train = PairTexts.from_arrow(table, split="train")
    assert train.pair_id == ["p1", "p3"] and train.rejected_plan == ["l1", "l3"]
    assert len(PairTexts.from_arrow(table)) == 3
    assert train.fingerprint() != PairTexts.from_arrow(table, split="validation").fingerprint()


def test_unequal_columns_are_refused():
    with pytest.raises(ValueError):
        PairTexts(["p"], ["q"], ["w"], [], ["s"])


def test_pairs_in_steps_counts_the_short_last_batch():
    assert pairs_in_steps(0, 3, n_pairs=20, batch_size=8) == 20
    assert pairs_in_steps(3, 6, n_pairs=20, batch_size=8) == 20
    assert pairs_in_steps(2, 4, n_pairs=20, batch_size=8) == 12


def test_encode_truncates_without_padding(tiny_backbone):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
    ids = encode(tokenizer, ["short?", "long?"], ["plan", "step " * 100], InputSpec("plan_text", 16))
    assert len(ids[0]) < 16 and len(ids[1]) == 16
    assert ids[1][-1] == tokenizer.sep_token_id  # BERT-type: no EOS appended


def test_decoder_backbone_gets_a_pad_token_distinct_from_eos(tiny_backbone):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
    tokenizer.eos_token = tokenizer.pad_token = "[SEP]"  # how many decoder tokenizers ship
    model = LlamaForSequenceClassification(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, num_labels=1)).eval()
    ensure_distinct_pad_token(model, tokenizer)
    assert tokenizer.pad_token != tokenizer.eos_token
    assert model.config.pad_token_id == tokenizer.pad_token_id == len(tokenizer) - 1
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    ids = encode(tokenizer, ["q"], ["plan"], InputSpec(max_length=32))[0]
    assert ids[-1] == tokenizer.eos_token_id
    padded = torch.tensor([ids + [tokenizer.pad_token_id] * 3])
    with torch.inference_mode():  # the score is read at the last non-pad token (the EOS), so padding changes nothing
        alone = model(input_ids=torch.tensor([ids])).logits
        with_padding = model(input_ids=padded, attention_mask=(padded != tokenizer.pad_token_id).long()).logits
    assert torch.allclose(alone, with_padding, atol=1e-5)
