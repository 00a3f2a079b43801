"""Reward models at the paper's scale, proved on tiny models: a decoder (Llama-type) backbone as the sequence
classifier, LoRA adapters on a frozen backbone (saved merged or as adapters, scoring the same), weights loaded in
their dtype, and the memory a configuration needs, estimated before anything loads."""

import dataclasses
import json
import os

import pytest
import torch

from orchrm_dagster.lora import is_adapter_folder
from orchrm_dagster.rm.adapters import load_reward_model
from orchrm_dagster.rm.config import RMTrainConfig
from orchrm_dagster.rm.memory import ModelShape, memory_estimate
from orchrm_dagster.rm.template import InputSpec, encode, read_input_spec
from orchrm_dagster.rm.train import load_backbone, train_reward_model
from tests.rm.toy import toy_pairs


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory) -> str:
    """A 2-layer Llama (hidden 64) with SmolLM2's tokenizer, saved as a causal LM: no score head, as a real one."""
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_decoder"), hidden_size=64)


def decoder_config(backbone: str, **changes) -> RMTrainConfig:
    return RMTrainConfig(**{"backbone": backbone, "max_length": 48, "epochs": 1, "batch_size": 4,
                            "learning_rate": 1e-3, "device": "cpu", "precision": "fp32", **changes})


def scores(model, tokenizer, spec: InputSpec, pairs) -> torch.Tensor:
    """One forward pass over every chosen and rejected plan, right-padded (as the scorer pads)."""
    ids = encode(tokenizer, pairs.question * 2, pairs.chosen_plan + pairs.rejected_plan, spec)
    width = max(map(len, ids))
    input_ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in ids])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
    with torch.inference_mode():
        return model.eval()(input_ids=input_ids, attention_mask=mask).logits.squeeze(-1)


def test_a_decoder_backbone_trains_through_the_reward_model_engine_and_scores(storage_root, tiny_decoder):
    from orchrm_dagster.rm import read_manifest, train_new_version

    config = decoder_config(tiny_decoder, template="chat")
    outcome = train_new_version(storage_root, toy_pairs(8, seed=3), toy_pairs(4, seed=4), config, ["x"])
    model_dir = os.path.join(outcome.path, "model")
    assert os.path.exists(os.path.join(model_dir, "model.safetensors")) and not is_adapter_folder(model_dir)
    assert read_input_spec(model_dir) == InputSpec("graph_first", 48, 128, "chat")  # the template is recorded
    manifest = read_manifest(outcome.path)
    assert manifest["config"]["template"] == "chat"
    assert manifest["memory_estimate"] == outcome.memory and "training needs about" in outcome.memory["message"]
    assert manifest["trainer_checkpoints"] == {"written": 0, "seconds": 0.0}  # within its checkpoint_minutes
    assert 0.0 <= outcome.metrics["val_accuracy"] <= 1.0  # the validation pairs were scored by the checkpoint
    saved = json.loads(open(os.path.join(model_dir, "config.json")).read())
    assert saved["architectures"] == ["LlamaForSequenceClassification"] and saved["pad_token_id"] is not None

    tokenizer = _tokenizer(model_dir)
    model = load_reward_model(model_dir, tokenizer)
    assert tokenizer.pad_token_id != tokenizer.eos_token_id and tokenizer.padding_side == "right"
    ids = encode(tokenizer, ["q"], ["plan"], read_input_spec(model_dir))[0]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")  # the chat template's turn
    alone = scores(model, tokenizer, read_input_spec(model_dir), toy_pairs(4, seed=4))
    assert torch.isfinite(alone).all() and alone.std() > 0


def test_lora_trains_adapters_and_the_head_and_its_merged_and_adapter_checkpoints_score_the_same(tmp_path,
                                                                                              tiny_decoder):
    from orchrm_dagster.lora import save_trained
    from orchrm_dagster.rm.train import rm_lora_config

    train, held_out = toy_pairs(8, seed=5), toy_pairs(6, seed=6)
    config = decoder_config(tiny_decoder, lora=True, lora_r=4, lora_alpha=8, save="adapter")
    result = train_reward_model(train, toy_pairs(0, 0), config, str(tmp_path / "run"))
    adapter_dir = result.model_dir
    assert is_adapter_folder(adapter_dir) and not os.path.exists(os.path.join(adapter_dir, "model.safetensors"))
    assert result.memory["trainable_params"] < result.memory["weights_gb"] * 1e9 / 4 / 10  # adapters + head only
    from safetensors.torch import load_file

    saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    assert any("lora_A" in name for name in saved) and any("score" in name for name in saved)
    assert not any("embed_tokens" in name for name in saved)  # the frozen embeddings are not copied

    # the same trained adapters, merged into a plain folder by the one merge-and-save helper
    tokenizer = _tokenizer(adapter_dir)
    merged_dir = str(tmp_path / "merged")
    save_trained(load_reward_model(adapter_dir, tokenizer, merge=False), tokenizer, merged_dir, merge=True)
    assert not is_adapter_folder(merged_dir)
    spec = read_input_spec(adapter_dir)
    from_adapter = scores(load_reward_model(adapter_dir, tokenizer), tokenizer, spec, held_out)
    from_merged = scores(load_reward_model(merged_dir, _tokenizer(merged_dir)), tokenizer, spec, held_out)
    assert torch.allclose(from_adapter, from_merged, atol=1e-5)

    # the backbone stayed frozen: its untouched layer weights are the backbone's own
    base, _ = load_backbone(tiny_decoder, 0)
    merged = load_reward_model(merged_dir, _tokenizer(merged_dir))
    k = "model.layers.0.self_attn.k_proj.weight"  # not a default LoRA target (q_proj, v_proj)
    assert torch.equal(merged.state_dict()[k], base.state_dict()[k])
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged.state_dict()[q], base.state_dict()[q])  # the adapters merged in
    assert rm_lora_config(config, "llama").task_type == "SEQ_CLS"


def test_a_merged_lora_checkpoint_loads_without_peft_as_a_plain_classifier(tmp_path, tiny_decoder):
    from transformers import AutoModelForSequenceClassification

    config = decoder_config(tiny_decoder, lora=True, lora_r=2, lora_target_modules=("all-linear",))
    result = train_reward_model(toy_pairs(4, seed=7), toy_pairs(4, seed=8), config, str(tmp_path / "run"))
    assert not is_adapter_folder(result.model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(result.model_dir)
    assert not any("lora" in name for name in model.state_dict())
    assert 0.0 <= result.validation_metrics["val_accuracy"] <= 1.0


def test_a_lora_trainer_checkpoint_holds_the_adapters_and_their_optimizer_state_alone(tmp_path, tiny_decoder):
    from safetensors.torch import load_file

    config = decoder_config(tiny_decoder, lora=True, lora_r=2, checkpoint_minutes=0)
    run = tmp_path / "run"
    result = train_reward_model(toy_pairs(8, seed=7), toy_pairs(0, 0), config, str(run))
    [checkpoint] = list(run.glob("checkpoint-*"))  # after step 1 of 2: none at the end
    assert not (checkpoint / "model.safetensors").exists()
    saved = load_file(checkpoint / "adapter_model.safetensors")
    assert set(saved) and all("lora_" in name or "score" in name for name in saved)
    trained = sum(tensor.numel() for tensor in saved.values())
    moments = [t for state in torch.load(checkpoint / "optimizer.pt")["state"].values() for t in state.values()
               if torch.is_tensor(t) and t.dim() > 0]
    assert sum(t.numel() for t in moments) == 2 * trained  # AdamW's two moments of the adapters and head
    assert result.steps == 2 and result.checkpoints == 1
    resumed = train_reward_model(toy_pairs(8, seed=7), toy_pairs(0, 0), dataclasses.replace(config, epochs=2), str(run))
    assert resumed.resumed_from == 1 and resumed.steps == 4  # the adapters and their optimizer state load back


@pytest.mark.parametrize("dtype, expected", [("bf16", torch.bfloat16), ("fp32", torch.float32),
                                             ("fp16", torch.float16)])
def test_weights_load_in_the_configured_dtype(tiny_decoder, dtype, expected):
    model, tokenizer = load_backbone(tiny_decoder, 0, dtype)
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == expected
    assert model.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id


def test_bf16_lora_training_runs_on_bf16_weights(tmp_path, tiny_decoder):
    config = decoder_config(tiny_decoder, lora=True, lora_r=2, dtype="bf16")
    result = train_reward_model(toy_pairs(4, seed=9), toy_pairs(0, 0), config, str(tmp_path / "run"))
    assert result.steps == 1 and result.final_loss == result.final_loss  # not NaN
    assert result.memory["weights_gb"] < 0.1 and result.memory["fits"] is not False  # estimated before loading


EIGHT_B = ModelShape(8.0e9, hidden_size=4096, layers=32)


def test_an_8b_reward_model_fits_one_80gb_gpu_with_lora_in_bf16_and_not_trained_whole_in_fp32():
    lora = memory_estimate(EIGHT_B, RMTrainConfig(lora=True, dtype="bf16", gradient_checkpointing=True),
                           device_gb=80)
    assert lora.fits and lora.weights_gb == pytest.approx(16.0, abs=0.1)
    assert lora.trainable_params < 0.01 * EIGHT_B.params and lora.optimizer_gb < 0.1
    full = memory_estimate(8.0e9, RMTrainConfig(dtype="fp32"), hidden_size=4096, layers=32, device_gb=80)
    assert not full.fits
    assert (full.weights_gb, full.gradients_gb, full.optimizer_gb) == pytest.approx((32.0, 32.0, 64.0))
    assert "weights 32.0 GB + gradients 32.0 GB + AdamW 64.0 GB" in full.message
    assert "does not fit in 80 GB" in full.message and "fits in 80 GB" in lora.message
    # without activation checkpointing, 16 pairs x 512 tokens keep more activations than the GPU holds
    assert not memory_estimate(EIGHT_B, RMTrainConfig(lora=True, dtype="bf16"), device_gb=80).fits


def _tokenizer(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)

    # the scorer every step uses takes either checkpoint, and ranks the same
    from orchrm_dagster.rm.score import RewardScorer

    questions, plans = held_out.question, held_out.chosen_plan
    by_adapter = RewardScorer(adapter_dir, "cpu").score(questions, plans)
    by_merged = RewardScorer(merged_dir, "cpu").score(questions, plans)
    assert torch.allclose(torch.tensor(by_adapter), torch.tensor(by_merged), atol=1e-4)
