"""xgrammar-constrained decoding with the embedded model (slow: runs a real model on CPU)."""

import pytest
import torch

from orchrm_dagster.llm import ChatRequest, SamplingSettings
from orchrm_dagster.llm.grammar_constraint import GrammarError, GrammarLogitsProcessor, compile_grammar
from orchrm_dagster.llm.transformers_decoding import TransformersBackend

pytestmark = pytest.mark.slow

YES_NO = 'root ::= "yes" | "no"'


@pytest.fixture(scope="module")
def loaded():
    return TransformersBackend().loaded()


def test_backend_output_is_exactly_yes_or_no():
    question = "Is the sky blue on a clear day? Answer yes or no."
    requests = [ChatRequest(messages=({"role": "user", "content": question},), grammar=YES_NO,
                            sampling=SamplingSettings(temperature=t, max_new_tokens=8, seed=s))
                for t, s in ((0.0, None), (1.0, 0), (1.0, 1))]
    for completion in TransformersBackend().generate(requests):
        assert completion.text in ("yes", "no") and completion.finish_reason == "stop"


def test_compiled_grammars_are_cached_and_bad_ones_raise(loaded):
    first = compile_grammar(loaded.tokenizer, YES_NO, vocab_size=loaded.model.config.vocab_size)
    assert compile_grammar(loaded.tokenizer, YES_NO, vocab_size=loaded.model.config.vocab_size) is first
    with pytest.raises(GrammarError):
        compile_grammar(loaded.tokenizer, "root ::= (", vocab_size=loaded.model.config.vocab_size)


def test_processor_in_hf_generate_gives_one_matcher_per_row(loaded):
    tokenizer, model = loaded.tokenizer, loaded.model
    compiled = compile_grammar(tokenizer, YES_NO, vocab_size=model.config.vocab_size)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True)
               for q in ("Is fire cold? Answer yes or no.", "Is water wet?")]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    processor = GrammarLogitsProcessor(compiled, batch_size=2, eos_token_id=loaded.eos_token_id)
    with torch.inference_mode():
        out = model.generate(**batch, logits_processor=[processor], max_new_tokens=8, do_sample=False,
                             pad_token_id=loaded.pad_token_id)
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    assert all(text in ("yes", "no") for text in texts)
    assert all(processor.is_complete(row) for row in range(2))
