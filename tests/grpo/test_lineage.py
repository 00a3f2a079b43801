"""Which checkpoint a round continues from, and which reward model a from-scratch round accepts."""

from orchrm_dagster.grpo.lineage import latest_of_lineage, lineage_origin, recipe_problem, reward_model_sources

ROUNDS = [{"round": 1, "policy_checkpoint": "grpo-r0001", "start_policy": "fewshot"},
          {"round": 2, "policy_checkpoint": "grpo-r0002", "start_policy": "base"},
          {"round": 3, "policy_checkpoint": "grpo-r0003", "start_policy": "grpo-r0002"},
          {"round": 4, "policy_checkpoint": "grpo-r0004", "start_policy": "grpo-r0001"}]
CHECKPOINTS = [{"round": r, "name": f"grpo-r{r:04d}", "promoted": r != 3} for r in (1, 2, 3, 4)]


def test_a_checkpoint_belongs_to_the_lineage_its_chain_of_rounds_began_from():
    assert lineage_origin(ROUNDS, "grpo-r0003") == "base" and lineage_origin(ROUNDS, "grpo-r0004") == "fewshot"
    assert lineage_origin(ROUNDS, "fewshot") == "fewshot"
    assert lineage_origin([{"round": 1, "policy_checkpoint": "grpo-r0001"}], "grpo-r0001") is None  # unrecorded


def test_a_round_continues_from_the_last_promoted_checkpoint_of_its_own_lineage():
    scratch = latest_of_lineage(CHECKPOINTS, ROUNDS, 5, "base", unknown_counts=False)
    assert scratch["name"] == "grpo-r0002"  # r3 (scratch) was not promoted; r4 is the other lineage's
    assert latest_of_lineage(CHECKPOINTS, ROUNDS, 5, "fewshot", unknown_counts=True)["name"] == "grpo-r0004"
    assert latest_of_lineage(CHECKPOINTS, ROUNDS, 2, "base", unknown_counts=False) is None  # none before round 2


def test_a_from_scratch_round_needs_a_reward_model_trained_on_correct_over_incorrect_pairs_only():
    assert reward_model_sources("scratch") == ("correct_over_incorrect",) and reward_model_sources("continue") == ()
    assert recipe_problem("scratch", ("correct_over_incorrect",)) is None
    assert "every source" in recipe_problem("scratch", ())
    assert recipe_problem("continue", ("correct_over_incorrect",)) is None
