"""The one rule every GRPO reward ends with, and the held-out reward that follows it: an unparseable plan ranks
below every parseable plan of its group, whatever the rewards' offsets, scales and positive weights."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.grpo import group_rewards, held_out_rewards
from orchrm_dagster.grpo.gate import Reward
from orchrm_dagster.grpo.heldout import held_out_plan_rewards

from ..orchestration.test_sampling_and_execution import PLAN

PROPERTY = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def held_out_reward(samples, scorer, margin):
    """The mean held-out reward, as the gate reads it (None: no plan parses, no reward to speak of)."""
    rewards = held_out_plan_rewards(samples, scorer, margin)
    return None if rewards is None else Reward.of(rewards).mean


@st.composite
def reward_batches(draw):
    """A TRL generation batch: groups of plans (some unparseable) and 1-3 rewards, each with its own offset
    (up to 1e12) and scale, and a positive weight per reward."""
    group_size = draw(st.integers(2, 16))
    groups = draw(st.integers(1, 3))
    parses = draw(st.lists(st.booleans(), min_size=group_size * groups, max_size=group_size * groups))
    rewards = []
    for _ in range(draw(st.integers(1, 3))):
        offset = draw(st.floats(-1e12, 1e12))
        scale = draw(st.sampled_from([1e-6, 1e-2, 1.0, 1e3, 1e6]))
        values = draw(st.lists(st.floats(-10, 10), min_size=len(parses), max_size=len(parses)))
        rewards.append([offset + scale * v if ok else None for v, ok in zip(values, parses)])
    weights = draw(st.lists(st.floats(0.01, 100), min_size=len(rewards), max_size=len(rewards)))
    margin = draw(st.floats(0.01, 10))
    ids = [f"p{i // group_size}" for i in range(len(parses))]
    return ids, parses, rewards, weights, margin


@PROPERTY
@given(reward_batches())
def test_every_unparseable_plan_ranks_below_every_parseable_one_after_the_weighted_sum(batch):
    ids, parses, rewards, weights, margin = batch
    # as TRL does it: each reward's values as float32, then the weighted sum in float32
    per_reward = np.array([group_rewards(raw, ids, margin) for raw in rewards], dtype=np.float32)
    total = (per_reward * np.array(weights, dtype=np.float32)[:, None]).sum(axis=0)
    for group in set(ids):
        members = [i for i, g in enumerate(ids) if g == group]
        parsed = [total[i] for i in members if parses[i]]
        unparsed = [total[i] for i in members if not parses[i]]
        if parsed and unparsed:
            assert max(unparsed) < min(parsed)
        if not parsed:
            assert all(v == 0 for v in unparsed)  # nothing parses: no advantage


@PROPERTY
@given(st.lists(st.one_of(st.none(), st.integers(-100, 100).map(float)), min_size=2, max_size=16),
       st.floats(-1e9, 1e9), st.floats(0.01, 100))
def test_the_rule_ignores_a_rewards_offset_and_scale(raw, offset, scale):
    shifted = [None if v is None else offset + scale * v for v in raw]
    ids = ["p"] * len(raw)
    assert group_rewards(shifted, ids, 1.0) == pytest.approx(group_rewards(raw, ids, 1.0), abs=1e-3)


def test_a_group_is_normalized_as_grpo_does_and_groups_apart():
    rewards = group_rewards([1.0, 2.0, 3.0, 10.0, None], ["a", "a", "a", "b", "b"], margin=1.0)
    first = rewards[:3]
    assert sum(first) == pytest.approx(0) and math.sqrt(sum(v * v for v in first) / 3) == pytest.approx(1)
    assert rewards[3:] == pytest.approx([1.0, -1.0])  # two plans apart: the parseable one above


def test_equal_rewards_give_no_advantage_and_unparseable_plans_still_rank_last():
    assert group_rewards([0.3, 0.3, 0.3], ["p"] * 3, 1.0) == [0.0, 0.0, 0.0]  # rounding noise is no spread
    assert group_rewards([None, None], ["p"] * 2, 1.0) == [0.0, 0.0]
    tied = group_rewards([0.1, 0.1, None], ["p"] * 3, 1.0)
    assert tied[0] == tied[1] > 0 > tied[2]


def test_the_margin_sets_how_far_below_an_unparseable_plan_is_placed():
    near, far = (group_rewards([0.0, 1.0, 2.0, None], ["p"] * 4, margin) for margin in (0.1, 5.0))
    assert near[3] < near[0] and far[3] < near[3]


def test_a_non_finite_reward_is_an_error_not_a_silent_rank():
    with pytest.raises(ValueError, match="non-finite"):
        group_rewards([float("nan"), 1.0], ["p", "p"], 1.0)


def test_held_out_placement_keeps_the_raw_scale():
    placed = held_out_rewards([-100.0, -99.0, None, None], ["a", "a", "a", "b"], margin=1.0)
    assert placed[:2] == [-100.0, -99.0] and placed[2] == pytest.approx(-100.5) and placed[3] is None


class OffsetScorer:
    """The champion with an arbitrary offset: a plan's score is offset + its SCAgent count."""

    def __init__(self, offset):
        self.offset = offset

    def score(self, questions, plans):
        return [self.offset + p.count("SCAgent") for p in plans]


def samples(*plans, problem="p"):
    return [SimpleNamespace(question="q", plan=plan, problem_id=problem) for plan in plans]


@pytest.mark.parametrize("offset", [-100.0, 0.0, 1e6])
def test_the_held_out_reward_ranks_a_policy_with_unparseable_plans_below_the_same_plans_parsed(offset):
    """The gate compares like with like: whatever the champion's offset (a fixed -1 was above every plan at -100),
    replacing a plan by one that does not parse lowers the held-out reward."""
    sc_plan = PLAN.replace("CoTAgent", "SCAgent")
    parsed = held_out_reward(samples(PLAN, sc_plan), OffsetScorer(offset), margin=1.0)
    broken = held_out_reward(samples(PLAN, "not a plan"), OffsetScorer(offset), margin=1.0)
    assert broken < parsed and broken < offset  # below its problem's lowest plan


def test_a_held_out_problem_where_nothing_parses_counts_below_the_measurements_lowest_plan():
    scorer = OffsetScorer(-100.0)
    one_problem = held_out_reward(samples(PLAN, PLAN, problem="a"), scorer, 1.0)
    with_failure = held_out_reward(samples(PLAN, PLAN, problem="a") + samples("x", "y", problem="b"), scorer, 1.0)
    assert with_failure < one_problem == -100.0
    assert held_out_reward(samples("x", "y"), scorer, 1.0) is None  # never -inf: no number reaches the gate
