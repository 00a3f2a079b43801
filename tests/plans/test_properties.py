from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.plans import Plan, PlanError, parse_plan, render_plan, validate_plan
from tests.plans.plan_strategies import mutated_plans, random_graph_plans, tag_soup, valid_plans

FAST = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _free_text_is_tag_free(plan: Plan) -> bool:
    fields = [plan.thinking, plan.direct_answer or ""]
    for a in plan.agents:
        fields += [a.agent_id, a.agent_name, a.description, a.agent_input, *a.debate_roles]
    return not any("<" in f for f in fields)


def _check_total(text: str) -> None:
    result = parse_plan(text)
    assert isinstance(result, (Plan, PlanError))
    if isinstance(result, Plan):
        assert validate_plan(result) is None
        order = result.topological_order()
        assert sorted(order) == sorted(result.agent_ids)
        if _free_text_is_tag_free(result):  # then what parse returns renders back to itself
            assert parse_plan(render_plan(result), max_chars=None) == result


@FAST
@given(st.text(max_size=400))
def test_never_raises_on_arbitrary_text(text):
    _check_total(text)


@FAST
@given(tag_soup)
def test_never_raises_on_tag_soup(text):
    _check_total(text)


@FAST
@given(random_graph_plans())
def test_never_raises_on_random_graphs(text):
    _check_total(text)


@FAST
@given(mutated_plans())
def test_never_raises_on_mutated_plans(text):
    _check_total(text)


@FAST
@given(valid_plans())
def test_valid_plans_round_trip_and_order_respects_edges(plan):
    assert validate_plan(plan) is None
    text = render_plan(plan)
    assert parse_plan(text) == plan
    if plan.is_direct:
        return
    order = plan.topological_order()
    assert sorted(order) == sorted(plan.agent_ids)
    position = {agent_id: k for k, agent_id in enumerate(order)}
    assert all(position[a] < position[b] for a, b in plan.edges)
    assert order[-1] == plan.sink
    assert order == plan.topological_order()  # deterministic
    # wrapped in chatter and a code fence, it still parses to the same plan
    assert parse_plan(f"Here you go:\n```xml\n{text}\n```\nDone.") == plan
