"""GRPO's log-probabilities with each group's prompt forwarded once.

A group's plans share one prompt (on this project's CPU rounds a 1,200-token few-shot prompt before a 240-token plan),
yet TRL's GRPOTrainer forwards `prompt + plan` for every plan, in the policy's forward and backward and in the
reference model's forward. Here the distinct prompts of a micro-batch are forwarded once with a KV cache, the cache is
copied to each of their plans, and the plans are forwarded on it: `P + G x C` tokens instead of `G x (P + C)`. The
gradient is exactly the same (the prompt's cache is a function of the weights, and autograd sums the copies' gradients
into it); the log-probabilities come from TRL's own fused LM head, so temperature, soft-capping and chunking are the
trainer's. Where sharing does not hold (multimodal inputs, an MoE aux loss, activation checkpointing in a training
forward, which drops the cache, or a data-parallel wrapper that allows one forward per backward) TRL's own path runs.
"""

from __future__ import annotations

import torch

from orchrm_dagster.grpo.profile import phase


def shared_prefix_trainer(base: type) -> type:
    """`base` (TRL's GRPOTrainer) with each micro-batch's distinct prompts forwarded once."""

    class SharedPrefixGRPOTrainer(base):
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                               batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                               **inputs):
            with phase("policy forward" if torch.is_grad_enabled() else "reference forward"):
                return self._logps(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                                   compute_aux_loss, **inputs)

        def _logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                   compute_aux_loss, **inputs):
            if (compute_aux_loss or any(value is not None for value in inputs.values())
                    or input_ids.size(1) - logits_to_keep < 2 or not can_share(model)):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                    **inputs)
            batch_size = batch_size or input_ids.size(0)
            chunks = [prefix_shared_logps(model, input_ids[start:start + batch_size],
                                          attention_mask[start:start + batch_size], logits_to_keep, compute_entropy,
                                          self.accelerator.autocast)
                      for start in range(0, input_ids.size(0), batch_size)]
            logps = torch.cat([c[0] for c in chunks])
            entropies = torch.cat([c[1] for c in chunks]) if compute_entropy else None
            return logps, entropies, None

    return SharedPrefixGRPOTrainer


def can_share(model) -> bool:
    """A forward that keeps a KV cache through to its backward: not under a data-parallel wrapper (one forward per
    backward) nor, with gradients, under activation checkpointing (its layers drop the cache)."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return False
    return not (torch.is_grad_enabled() and model.training and _checkpointing(model))


def _checkpointing(model) -> bool:
    return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


def prefix_shared_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_length: int,
                        compute_entropy: bool, autocast) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The completion tokens' log-probabilities (and entropies) of `prompt + completion` rows, each distinct prompt
    (all but its last token) forwarded once. The rows' last prompt token and completion are then forwarded on the
    copied cache, through the model's fused LM head (TRL's `add_fused_lm_head`): it scores the completion tokens from
    the hidden states of that last prompt token and of the completion, as TRL's own path does."""
    prompt_width = input_ids.size(1) - completion_length
    prefix, prefix_mask = input_ids[:, :prompt_width - 1], attention_mask[:, :prompt_width - 1]
    distinct, row_prompt = torch.unique(torch.cat([prefix, prefix_mask], dim=1), dim=0, return_inverse=True)
    with autocast():
        cache = model(input_ids=distinct[:, :prompt_width - 1], attention_mask=distinct[:, prompt_width - 1:],
                      use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_select_indices(row_prompt)
        tail = input_ids[:, prompt_width - 1:]
        labels = tail.masked_fill(attention_mask[:, prompt_width - 1:] == 0, -100)
        labels[:, 0] = -100  # the last prompt token is context, not scored
        outputs = model(input_ids=tail, attention_mask=attention_mask, past_key_values=cache, labels=labels,
                        fused_lm_head=True)
    entropies = outputs.entropy[:, -completion_length:] if compute_entropy else None
    return outputs.log_probs[:, -completion_length:], entropies
