"""GRPO's log-probabilities with each prompt forwarded once: the same values and the same gradients as TRL's own
forward of every `prompt + plan` row."""

import contextlib

import pytest
import torch

from orchrm_dagster.grpo.shared_prefix import can_share, prefix_shared_logps

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def fused_policy(tmp_path_factory):
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from tests.tiny_models import make_tiny_policy

    model = AutoModelForCausalLM.from_pretrained(make_tiny_policy(tmp_path_factory.mktemp("tiny")))
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model.train()


def trl_logps(model, input_ids, attention_mask, completion_length):
    """TRL 1.16's own path (GRPOTrainer._get_per_token_logps_and_entropies without chunking)."""
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-completion_length] = -100
    outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    return outputs.log_probs[:, -completion_length:], outputs.entropy[:, -completion_length:]


def group_rows(prompts: list[list[int]], completions: list[list[int]]):
    """Left-padded prompts and right-padded completions, as TRL builds them (pad 0)."""
    width, length = max(map(len, prompts)), max(map(len, completions))
    ids, mask = [], []
    for prompt, completion in zip(prompts, completions):
        left, right = width - len(prompt), length - len(completion)
        ids.append([0] * left + prompt + completion + [0] * right)
        mask.append([0] * left + [1] * (len(prompt) + len(completion)) + [0] * right)
    return torch.tensor(ids), torch.tensor(mask), length


def gradients(model, loss) -> list[torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("prompts", [
    [[5, 6, 7, 8, 9, 10]] * 4,  # one group: one prompt for every plan
    [[5, 6, 7, 8, 9, 10]] * 2 + [[11, 12, 13]] * 2,  # two groups in a micro-batch, the second left-padded
])
def test_the_same_log_probabilities_and_gradients_as_every_row_forwarded(fused_policy, prompts):
    completions = [[20, 21, 22, 2], [23, 24], [25, 26, 27], [28]]
    ids, mask, length = group_rows(prompts, completions)
    theirs, their_entropy = trl_logps(fused_policy, ids, mask, length)
    ours, our_entropy = prefix_shared_logps(fused_policy, ids, mask, length, True, contextlib.nullcontext)
    scored = mask[:, -length:].bool()
    torch.testing.assert_close(ours[scored], theirs[scored], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(our_entropy[scored], their_entropy[scored], atol=1e-5, rtol=1e-5)
    weights = torch.arange(1.0, 1 + scored.sum().item())  # a loss that weighs every token differently
    for mine, reference in zip(gradients(fused_policy, (ours[scored] * weights).sum()),
                               gradients(fused_policy, (theirs[scored] * weights).sum())):
        torch.testing.assert_close(mine, reference, atol=1e-5, rtol=1e-4)


def test_activation_checkpointing_in_a_training_forward_takes_trls_own_path(fused_policy):
    fused_policy.gradient_checkpointing_enable()
    try:
        assert not can_share(fused_policy)
        with torch.no_grad():  # the reference model's forward keeps its cache
            assert can_share(fused_policy)
    finally:
        fused_policy.gradient_checkpointing_disable()
    assert can_share(fused_policy)
