"""The simulated environment: correctness drawn from a truth function of the parsed plan, seeded by the run; tokens
from the measured per-agent costs; unparseable plans fail as with real agents."""

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from orchrm_dagster.contract import RunErrorKind
from orchrm_dagster.environments import PlanJob, execute_and_label, executor_for
from orchrm_dagster.environments.costs import calls_of, load_costs
from orchrm_dagster.labels import answer_type_for, label_answer
from orchrm_dagster.mas import AgentSettings
from orchrm_dagster.orchestration import ExecutionSettings
from orchrm_dagster.plans import KNOWN_AGENTS, AgentSpec, Plan, render_plan
from orchrm_dagster.problems import load_shipped
from orchrm_dagster.synthetic import random_plan
from orchrm_dagster.truths import truth_named, truths

SIMULATED = ExecutionSettings().in_environment("simulated")


def no_backend():
    raise AssertionError("the simulated environment must not build an LLM backend")


def executor(execution: ExecutionSettings = SIMULATED):
    return executor_for(execution, no_backend)


def chain(*agents: str, roles=()) -> str:
    """A plan: a chain of the given agent types."""
    specs = tuple(AgentSpec(str(i), name, "Work on it.", "" if i == 1 else f"${{{i - 1}}}",
                            roles if name == "DebateAgent" else ())
                  for i, name in enumerate(agents, 1))
    edges = tuple((str(i - 1), str(i)) for i in range(2, len(agents) + 1))
    return render_plan(Plan("Think first.", specs, edges))


def job(plan: str, seed: int = 0, reference: str = "42", answer_type: str = "math") -> PlanJob:
    return PlanJob("What is 6 x 7?", plan, answer_type, seed, reference=reference)


def test_the_same_plan_in_the_same_run_answers_the_same():
    plan = chain("CoTAgent", "SCAgent")
    first = executor().execute([job(plan, seed) for seed in range(40)])
    again = executor().execute([job(plan, seed) for seed in reversed(range(40))])
    assert [r.final_answer for r in first] == [r.final_answer for r in reversed(again)]
    answers = [r.final_answer for r in first]
    assert "<answer>42</answer>" in answers and len(set(answers)) == 2  # right in some runs, wrong in others
    # a wrong run gives the problem's one distractor: wrong answers agree, as common mistakes do


def test_an_unparseable_plan_fails_as_with_real_agents_and_costs_nothing():
    [result] = executor().execute([job("<agent>not a plan")])
    assert result.error.startswith("plan does not parse") and result.error_kind == RunErrorKind.PLAN_UNPARSEABLE
    assert result.plan_error and result.final_answer is None and result.calls == []
    [labeled] = execute_and_label([job("<agent>not a plan")], executor())
    assert labeled.correct is False


def test_a_problem_without_a_reference_fails_naming_why():
    [result] = executor().execute([job(chain("CoTAgent"), reference=None)])
    assert "no reference answer" in result.error and result.final_answer is None


def test_tokens_follow_the_measured_costs_per_agent_type_and_the_execution_settings():
    costs = load_costs()
    agents = AgentSettings(sc_samples=3, debate_rounds=1, reflexion_rounds=1)
    execution = dataclasses.replace(SIMULATED, subagent_max_new_tokens=50, agents=agents)
    plan = chain("CoTAgent", "SCAgent", "DebateAgent", "ReflexionAgent", "WebSearchAgent")
    [result] = executor(execution).execute([job(plan)])
    reflexion = 1 + round(costs.reflexion_calls_per_round)  # the first attempt, then its round as measured
    expected_calls = {"CoTAgent": 1, "SCAgent": 3, "DebateAgent": 2 * 1 + 1, "ReflexionAgent": reflexion,
                      "WebSearchAgent": 2}
    assert [c.agent_name for c in result.calls] == [name for name in expected_calls for _ in
                                                    range(expected_calls[name])]
    assert result.prompt_tokens == sum(n * costs.call(name).prompt_tokens for name, n in expected_calls.items())
    assert result.completion_tokens == sum(n * min(costs.call(name).completion_tokens, 50)
                                           for name, n in expected_calls.items())
    assert all(c.model == "simulated" and "simulated" in c.note for c in result.calls)
    without_corpus = dataclasses.replace(execution, corpus=None)
    [alone] = executor(without_corpus).execute([job(chain("WebSearchAgent"))])
    assert len(alone.calls) == 1  # no retrieval: WebSearchAgent answers with one call, as the real one does


@pytest.mark.parametrize("name", KNOWN_AGENTS)
def test_every_agent_type_has_a_measured_cost(name):
    cost = load_costs().call(name)
    assert cost.prompt_tokens > 0 and cost.completion_tokens > 0
    assert calls_of(AgentSpec("1", name, "d", ""), AgentSettings(), retrieval=True, costs=load_costs()) >= 1


def test_a_costs_file_that_misses_an_agent_is_refused_naming_file_and_field(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text('{"agents": {"CoTAgent": {"prompt_tokens_per_call": 10, "completion_tokens_per_call": 5}}}')
    with pytest.raises(ValueError, match=r"costs.json: agents.SCAgent: missing"):
        load_costs(str(path))
    path.write_text('{"agents": {"CoTAgent": {"prompt_tokens_per_call": -1}}}')
    with pytest.raises(ValueError, match=r"costs.json: agents.CoTAgent.prompt_tokens_per_call: must be a number"):
        load_costs(str(path))


agent_kinds = st.lists(st.sampled_from(KNOWN_AGENTS), min_size=1, max_size=4)


@pytest.mark.parametrize("truth_name", list(truths()))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), kinds=agent_kinds)
def test_each_truths_rate_matches_its_definition_on_generated_plans(truth_name, seed, kinds):
    """Over many runs of one plan, the share answered correctly is the truth's probability of that plan (a
    binomial test that a correct implementation fails once in 10^6 examples)."""
    rng = random.Random(seed)
    plan = random_plan(rng, len(kinds)) if rng.random() < 0.5 else None
    text = render_plan(plan) if plan else chain(*kinds, roles=("Proposer", "Skeptic"))
    if plan is None:
        from orchrm_dagster.plans import parse_plan

        plan = parse_plan(text)
    truth = truth_named(truth_name)
    chance = truth.chance(truth.config(), plan)
    execution = SIMULATED.in_environment("simulated", truth_name)
    runs = 400
    labeled = execute_and_label([job(text, seed * 1000 + i) for i in range(runs)], executor(execution))
    correct = sum(item.correct for item in labeled)
    if chance in (0.0, 1.0):
        assert correct == runs * chance
    else:
        assert binomtest(correct, runs, chance).pvalue > 1e-6, (truth_name, chance, correct)


def test_the_truths_decide_as_they_say():
    success = truth_named("plan_success_rate")
    config = success.config()
    from orchrm_dagster.plans import parse_plan

    assert success.chance(config, parse_plan(chain("CoTAgent", "CoTAgent"))) == pytest.approx(0.15)
    assert success.chance(config, parse_plan(chain("CoTAgent", "SCAgent"))) == pytest.approx(0.15 + 0.7 / 2)
    assert success.chance(config, parse_plan(chain("SCAgent", "DebateAgent"))) == pytest.approx(0.85)
    sink = truth_named("debate_sink")
    fed_by_two = Plan("t", (AgentSpec("1", "CoTAgent", "d", ""), AgentSpec("2", "CoTAgent", "d", ""),
                            AgentSpec("3", "DebateAgent", "d", "${1} ${2}", ("A", "B"))), (("1", "3"), ("2", "3")))
    fed_by_one = parse_plan(chain("CoTAgent", "DebateAgent", roles=("A", "B")))
    debate_first = parse_plan(chain("DebateAgent", "CoTAgent", roles=("A", "B")))
    assert sink.chance(sink.config(), fed_by_two) == 0.85
    assert sink.chance(sink.config(), fed_by_one) == sink.chance(sink.config(), debate_first) == 0.15
    cue = truth_named("verifying_cue")  # the generator's cue at another worth: 0.1 by default, or punished
    assert cue.chance(cue.config(), parse_plan(chain("CoTAgent", "SCAgent"))) == pytest.approx(0.15 + 0.1 / 2)
    punished = cue.config(worth=-0.3)
    assert cue.chance(punished, parse_plan(chain("SCAgent", "DebateAgent"))) == 0.0  # clipped, never below 0
    assert cue.chance(punished, parse_plan(chain("CoTAgent", "CoTAgent"))) == pytest.approx(0.15)


@pytest.mark.parametrize("benchmark", ["gsm8k_test", "math500", "hotpotqa_dev", "aime24", "aime25"])
def test_a_drawn_answer_is_labeled_as_drawn_on_every_shipped_problem(benchmark):
    """The truth holds through the labelers: a correct draw answers the reference, a wrong draw something its
    labeler judges wrong, for every problem of every shipped benchmark."""
    from orchrm_dagster.environments.simulated import answer_text

    problems = load_shipped(benchmark)
    for problem in problems[:300]:
        answer_type = answer_type_for(problem["benchmark"], problem["answer"], problem.get("choices"))
        item = PlanJob(problem["question"], "", answer_type, reference=problem["answer"],
                       choices=tuple(problem["choices"]) if problem.get("choices") else None)
        for correct in (True, False):
            verdict = label_answer(answer_type, problem["answer"], answer_text(item, correct), item.choices)
            assert verdict.is_correct is correct, (problem["problem_id"], correct, verdict)
