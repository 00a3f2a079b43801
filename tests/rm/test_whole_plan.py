"""The reward model reads the whole plan: graph first, the thinking's middle cut, the same in training and scoring."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.plans import AgentSpec, Plan, render_plan
from orchrm_dagster.rm.template import (LEGACY_SPEC, InputSpec, encode, encode_with_report, read_input_spec,
                                        write_input_spec)
from tests.plans.plan_strategies import valid_plans


@pytest.fixture(scope="module")
def tokenizer(tiny_backbone):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_backbone)


def _long_plan(thinking_words: int = 600) -> str:
    thinking = "alpha " + "filler " * thinking_words + "omega"
    agents = (AgentSpec("1", "CoTAgent", "solve it", ""), AgentSpec("2", "SCAgent", "vote", "check ${1}"),
              AgentSpec("3", "DebateAgent", "settle it", "${1} and ${2}", ("Proposer", "Skeptic")))
    return render_plan(Plan(thinking, agents, (("1", "2"), ("1", "3"), ("2", "3"))))


def test_a_long_thinking_block_loses_its_middle_not_the_graph(tokenizer):
    ids = encode(tokenizer, ["how many apples?"], [_long_plan()], InputSpec(max_length=128, thinking_tokens=None))[0]
    text = tokenizer.decode(ids)
    assert len(ids) == 128
    for piece in ("how many apples", "cotagent", "scagent", "debateagent", "1 - > 2, 1 - > 3, 2 - > 3",
                  "proposer, skeptic", "settle it", "alpha", "omega", "..."):
        assert piece in text, piece
    assert text.index("debateagent") < text.index("alpha")  # the graph comes before the thinking


def test_thinking_is_read_up_to_its_budget(tokenizer):
    spec = InputSpec(max_length=512, thinking_tokens=32)
    short = encode(tokenizer, ["q?"], [_long_plan(10)], spec)[0]
    long = encode(tokenizer, ["q?"], [_long_plan(600)], spec)[0]
    assert len(long) - len(short) < 32  # 600 words of thinking cost no more than the budget
    assert "omega" in tokenizer.decode(long)


def test_the_old_format_cuts_the_graph_of_the_same_plan(tokenizer):
    text = tokenizer.decode(encode(tokenizer, ["q?"], [_long_plan()], InputSpec("plan_text", 128))[0])
    assert "debateagent" not in text  # what graph_first fixes


def test_a_plan_that_does_not_parse_is_read_head_and_tail(tokenizer):
    raw = "start " + "word " * 400 + "finish"
    report = encode_with_report(tokenizer, ["q?"], [raw], InputSpec(max_length=64))
    text = tokenizer.decode(report.ids[0])
    assert len(report.ids[0]) == 64 and "start" in text and "finish" in text


def test_descriptions_are_cut_before_inputs_and_edges(tokenizer):
    agents = tuple(AgentSpec(str(k), "CoTAgent", "long description " * 40, f"${{{k - 1}}}" if k > 1 else "")
                   for k in range(1, 7))
    plan = render_plan(Plan("", agents, tuple((str(k - 1), str(k)) for k in range(2, 7))))
    report = encode_with_report(tokenizer, ["q?"], [plan], InputSpec(max_length=160))
    text = tokenizer.decode(report.ids[0])
    assert report.structure_whole == [False] and report.graph_whole == [True]
    assert len(report.ids[0]) <= 160 and "5 - > 6" in text and "[ 6 ] cotagent" in text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(plan=valid_plans(max_agents=5), thinking=st.integers(0, 700), max_length=st.integers(96, 512),
       question=st.text(min_size=1, max_size=400))
def test_any_plan_fits_and_keeps_its_graph_when_the_graph_fits(tokenizer, plan, thinking, max_length, question):
    plan = Plan("word " * thinking, plan.agents, plan.edges, plan.direct_answer)
    spec = InputSpec(max_length=max_length)
    report = encode_with_report(tokenizer, [question], [render_plan(plan)], spec)
    ids = report.ids[0]
    assert len(ids) <= max_length and ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    bare = Plan("", tuple(AgentSpec(a.agent_id, a.agent_name) for a in plan.agents), plan.edges, plan.direct_answer)
    graph_only = encode(tokenizer, ["?"], [render_plan(bare)], InputSpec(max_length=10_000, thinking_tokens=0))[0]
    if len(graph_only) + 64 <= max_length:  # ids, types and edges fit beside the question floor
        assert report.graph_whole == [True]


def test_a_checkpoint_records_how_it_reads(tmp_path):
    assert read_input_spec(str(tmp_path)) == LEGACY_SPEC  # trained before the spec was recorded
    spec = InputSpec("graph_first", 384, 64)
    write_input_spec(str(tmp_path), spec)
    assert read_input_spec(str(tmp_path)) == spec


@pytest.mark.slow  # a whole reward-model training on whole plans: about 90 s on 2 cores
def test_a_thinking_first_batch_is_still_ranked(tmp_path):
    """Plans that open with 400-600 tokens of thinking and show their quality only in the closing agent: trained
    on correct-over-incorrect pairs, the reward model's Best-of-8 on held-out problems beats a single sample."""
    from orchrm_dagster.rm import RMTrainConfig, RewardScorer, train_reward_model
    from orchrm_dagster.rm.synthetic import best_of_n_accuracy, thinking_first_pairs, thinking_first_problems

    problems = thinking_first_problems(60, seed=5)
    train, held_out = problems[:45], problems[45:]
    config = RMTrainConfig(max_length=256, epochs=2, batch_size=8, learning_rate=1e-4)
    result = train_reward_model(thinking_first_pairs(train), thinking_first_pairs(held_out, 1), config,
                                str(tmp_path / "rm"))
    scorer = RewardScorer(result.model_dir, "cpu")
    assert scorer.spec == config.input_spec() and os.path.exists(os.path.join(result.model_dir, "input_format.json"))
    scores = scorer.score([p.question for p in held_out for _ in p.plans], [x for p in held_out for x in p.plans])
    best, single = best_of_n_accuracy(held_out, [scores[k * 8:(k + 1) * 8] for k in range(len(held_out))])
    assert best >= single + 0.10, (best, single)
