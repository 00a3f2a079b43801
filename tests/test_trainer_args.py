"""Activation checkpointing is turned on or off under the name the installed transformers reads, whatever TRL's own
default for the old name (True)."""

import pytest

from orchrm_dagster.trainer_args import activation_checkpointing_arg


@pytest.mark.parametrize("enabled", [False, True])
def test_the_reward_models_and_the_rounds_configs_checkpoint_activations_as_asked(tmp_path, enabled):
    from trl import GRPOConfig, RewardConfig

    for config_class in (RewardConfig, GRPOConfig):
        config = config_class(output_dir=str(tmp_path), use_cpu=True, **activation_checkpointing_arg(enabled))
        assert config.gradient_checkpointing is enabled
        assert getattr(config, "activation_checkpointing", enabled) is enabled
