import random
import time

import pytest

from orchrm_dagster.plans import (
    KNOWN_AGENTS,
    PLAN_ERROR_CODES,
    AgentSpec,
    Plan,
    PlanError,
    parse_plan,
    render_plan,
    validate_plan,
)


def agent(agent_id, name="CoTAgent", agent_input="", roles=None, description="Solve it step by step."):
    roles_tag = "" if roles is None else f"<debate_roles>{roles}</debate_roles>"
    return (f"<agent>\n<agent_id>{agent_id}</agent_id>\n<agent_name>{name}</agent_name>\n"
            f"<agent_description>{description}</agent_description>\n"
            f"<required_arguments><agent_input>{agent_input}</agent_input>{roles_tag}</required_arguments>\n</agent>\n")


def edges(*pairs):
    return "<edge>" + "".join(f"<from>{a}</from><to>{b}</to>" for a, b in pairs) + "</edge>"


DIRECT = "<thinking>\nThis is easy: 6 * 7.\n</thinking>\n<answer> 42 </answer>"
SINGLE = "<thinking>Delegate to one careful solver.</thinking>\n" + agent("1", "SCAgent")
FAN_IN = (
    "<thinking>Search, solve, then debate the two results.</thinking>\n"
    + agent("1", "WebSearchAgent", "")
    + agent("2", "CoTAgent", "")
    + agent("3", "SCAgent", "Check the facts in ${1}")
    + agent("4", "DebateAgent", "Combine ${2} and ${3}; prefer ${3}", roles="Proposer, Skeptic\n Judge ,")
    + edges(("1", "3"), ("2", "4"), ("3", "4"))
)


# -- the three forms ------------------------------------------------------------------------------
def test_direct_answer():
    plan = parse_plan(DIRECT)
    assert plan == Plan(thinking="This is easy: 6 * 7.", direct_answer="42")
    assert plan.is_direct and plan.form == "direct" and plan.sink is None and plan.topological_order() == ()


def test_single_delegation_without_edge_block():
    plan = parse_plan(SINGLE)
    assert isinstance(plan, Plan), plan
    assert plan.form == "single" and not plan.is_direct
    assert plan.agents == (AgentSpec("1", "SCAgent", "Solve it step by step.", "", ()),)
    assert plan.edges == () and plan.sink == "1" and plan.topological_order() == ("1",)
    assert parse_plan(SINGLE + "<edge>\n</edge>") == plan


def test_four_agent_dag_with_fan_in_and_debate_roles():
    plan = parse_plan(FAN_IN)
    assert isinstance(plan, Plan), plan
    assert plan.form == "dag"
    assert plan.agent_ids == ("1", "2", "3", "4")
    assert plan.edges == (("1", "3"), ("2", "4"), ("3", "4"))
    debate = plan.agent("4")
    assert debate.agent_name == "DebateAgent"
    assert debate.debate_roles == ("Proposer", "Skeptic", "Judge")
    assert debate.references == ("2", "3")  # in order, deduplicated
    assert plan.agent("1").references == ()
    assert plan.sink == "4"
    assert plan.topological_order() == ("1", "2", "3", "4")
    assert validate_plan(plan) is None


def test_topological_order_breaks_ties_by_appearance():
    text = (agent("b") + agent("a") + agent("c", agent_input="${a} ${b}") + agent("z", agent_input="${c}")
            + edges(("a", "c"), ("b", "c"), ("c", "z")))
    plan = parse_plan(text)
    assert plan.topological_order() == ("b", "a", "c", "z")
    # agents listed after their consumers are fine too
    text = agent("3", agent_input="${1} ${2}") + agent("2") + agent("1") + edges(("2", "3"), ("1", "3"))
    plan = parse_plan(text)
    assert plan.topological_order() == ("2", "1", "3") and plan.sink == "3"


def test_tolerates_chatter_fences_and_whitespace():
    noisy = (
        "Sure! Here is my orchestration plan:\n\n```xml\n"
        "<thinking>\n   Search, solve, then debate the two results.   \n</thinking>\n\n"
        "Some words between blocks.\n"
        + agent(" 1\n", " WebSearchAgent ", "  ", description="\n  Solve it step by step.\n")
        + "\n\n" + agent("2", "CoTAgent\t")
        + "<agent>\n  <agent_name>SCAgent</agent_name>  <agent_id>3</agent_id>\n"  # any sub-tag order
          "<agent_description>Solve it step by step.</agent_description>\n"
          "<agent_input>\nCheck the facts in ${ 1 }\n</agent_input></agent>\n"  # no <required_arguments>
        + agent("4", "DebateAgent", "Combine ${2} and ${3}; prefer ${3}", roles="Proposer,Skeptic,Judge")
        + "<edge>\n  <from> 1 </from>\n  <to>3</to>\n<from>2</from><to>4</to><from>3</from><to>4</to>"
          "<from>3</from><to>4</to></edge>\n```\nLet me know if you want changes! <answer>ignored</answer>"
    )
    plan = parse_plan(noisy)
    expected = parse_plan(FAN_IN)
    assert isinstance(plan, Plan), plan
    assert plan.agents[2].agent_input == "Check the facts in ${ 1 }"
    assert plan.agents[2].references == ("1",)
    assert plan.thinking == expected.thinking
    assert plan.edges == expected.edges  # duplicate edge counted once
    assert [a.agent_name for a in plan.agents] == [a.agent_name for a in expected.agents]
    assert plan.agents[3] == expected.agents[3]


def test_thinking_may_mention_tags():
    text = "<thinking>I will write <agent> blocks and no <answer> yet.</thinking>\n" + agent("1")
    plan = parse_plan(text)
    assert isinstance(plan, Plan) and plan.thinking.startswith("I will write <agent>")


def test_missing_thinking_is_allowed():
    plan = parse_plan("<answer>B</answer>")
    assert plan == Plan(thinking="", direct_answer="B")


def test_known_agents_and_limits_are_parameters():
    text = agent("1", name="MyAgent")
    assert parse_plan(text).code == "unknown_agent"
    assert parse_plan(text, known_agents=("MyAgent",)).agents[0].agent_name == "MyAgent"
    assert isinstance(parse_plan(text, known_agents=None), Plan)
    assert parse_plan(DIRECT, max_chars=None) == parse_plan(DIRECT)


def test_non_string_input_is_an_error_not_an_exception():
    for value in (None, b"<answer>1</answer>", 3):
        assert isinstance(parse_plan(value), PlanError)


# -- every error code ----------------------------------------------------------------------------
ERROR_CASES = [
    ("empty", ""),
    ("empty", "  \n\t "),
    ("empty", "<thinking>x</thinking><answer>   </answer>"),
    ("too_long", "x" * 300_001),
    ("missing_tag", "<agent><agent_id>1</agent_id><agent_input></agent_input></agent>"),
    ("missing_tag", "<agent><agent_name>CoTAgent</agent_name><agent_input></agent_input></agent>"),
    ("missing_tag", "<agent><agent_id>1</agent_id><agent_name>CoTAgent</agent_name>"
                    "<required_arguments></required_arguments></agent>"),
    ("missing_tag", agent("1") + agent("2", agent_input="${1}")),  # two agents, no <edge>
    ("missing_tag", agent("1") + agent("2", agent_input="${1}") + "<edge><from>1</from></edge>"),
    ("missing_tag", agent("1") + agent("2", agent_input="${1}") + "<edge><to>2</to></edge>"),
    ("unclosed_tag", "<thinking>never closed " + agent("1")),
    ("unclosed_tag", "<agent><agent_id>1</agent_id>"),
    ("unclosed_tag", "<agent><agent_id>1</agent_id>" + agent("2")),
    ("unclosed_tag", "<agent><agent_id>1<agent_name>CoTAgent</agent_name><agent_input></agent_input></agent>"),
    ("unclosed_tag", agent("1") + agent("2", agent_input="${1}") + "<edge><from>1</from><to>2</edge>"),
    ("unclosed_tag", agent("1") + "<edge>"),
    ("unclosed_tag", "<answer>42"),
    ("no_agents", "I think the answer is 42, but I forgot the tags."),
    ("no_agents", "<thinking>Let me think.</thinking>"),
    ("duplicate_agent_id", agent("1") + agent("1") + edges()),
    ("unknown_agent", agent("1", name="GPT5Agent")),
    ("unknown_agent", agent("1", name="cotagent")),
    ("bad_agent_id", agent("agent one")),
    ("bad_agent_id", agent("")),
    ("bad_agent_id", agent("x" * 65)),
    ("cycle", agent("1", agent_input="${2}") + agent("2", agent_input="${1}") + edges(("1", "2"), ("2", "1"))),
    ("cycle", agent("1", agent_input="${1}") + edges(("1", "1"))),
    ("multiple_sinks", agent("1") + agent("2") + edges()),
    ("multiple_sinks", agent("1") + agent("2", agent_input="${1}") + agent("3", agent_input="${1}")
     + edges(("1", "2"), ("1", "3"))),
    ("dangling_reference", agent("1", agent_input="${7}")),
    ("dangling_reference", agent("1") + agent("2", agent_input="${1} ${9}") + edges(("1", "2"))),
    ("edge_without_reference", agent("1") + agent("2", agent_input="no reference") + edges(("1", "2"))),
    ("reference_without_edge", agent("1") + agent("2", agent_input="${1}") + edges()),
    ("reference_without_edge", agent("1", agent_input="${1}")),
    ("unknown_edge_endpoint", agent("1") + agent("2", agent_input="${1}") + edges(("1", "2"), ("5", "2"))),
    ("unknown_edge_endpoint", agent("1") + agent("2", agent_input="${1}") + edges(("1", "2"), ("", "2"))),
]


@pytest.mark.parametrize(("code", "text"), ERROR_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(ERROR_CASES)])
def test_error_codes(code, text):
    result = parse_plan(text, max_chars=300_000)
    assert isinstance(result, PlanError), result
    assert result.code == code, result
    assert result.message


def test_every_error_code_is_covered():
    assert {c for c, _ in ERROR_CASES} == set(PLAN_ERROR_CODES)


def test_plan_error_rejects_unknown_codes():
    with pytest.raises(ValueError):
        PlanError("oops", "not a code")


def test_direct_plan_cannot_have_agents():
    with pytest.raises(ValueError):
        Plan(thinking="", agents=(AgentSpec("1", "CoTAgent"),), direct_answer="4")


def test_invalid_hand_built_plan_methods_raise():
    plan = Plan(agents=(AgentSpec("1", "CoTAgent", agent_input="${2}"), AgentSpec("2", "CoTAgent", agent_input="${1}")),
                edges=[("1", "2"), ("2", "1")])
    assert plan.edges == (("1", "2"), ("2", "1"))  # lists coerced to tuples
    assert validate_plan(plan).code == "cycle"
    with pytest.raises(ValueError):
        plan.topological_order()
    with pytest.raises(ValueError):
        Plan(agents=(AgentSpec("1", "CoTAgent"), AgentSpec("2", "CoTAgent"))).sink


# -- rendering -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [DIRECT, SINGLE, FAN_IN])
def test_render_round_trip(text):
    plan = parse_plan(text)
    assert isinstance(plan, Plan)
    rendered = render_plan(plan)
    assert parse_plan(rendered) == plan
    assert render_plan(parse_plan(rendered)) == rendered


def test_render_canonical_layout():
    rendered = render_plan(parse_plan(FAN_IN))
    assert rendered.startswith("<thinking>\nSearch, solve, then debate the two results.\n</thinking>\n<agent>\n")
    assert rendered.endswith("</agent>\n<edge>\n<from>1</from><to>3</to>\n<from>2</from><to>4</to>\n"
                             "<from>3</from><to>4</to>\n</edge>")
    assert "<debate_roles>Proposer, Skeptic, Judge</debate_roles>\n</required_arguments>" in rendered
    assert render_plan(parse_plan(DIRECT)) == "<thinking>\nThis is easy: 6 * 7.\n</thinking>\n<answer>42</answer>"


def test_synthetic_generator_plans_parse():
    from orchrm_dagster.synthetic import random_plan, random_plan_text

    for seed in range(50):
        text = random_plan_text(random.Random(seed), random.Random(-seed).randint(1, 6))
        plan = parse_plan(text)
        assert isinstance(plan, Plan), plan
        assert plan == random_plan(random.Random(seed), len(plan.agents))
        assert {a.agent_name for a in plan.agents} <= set(KNOWN_AGENTS)


# -- linear time ---------------------------------------------------------------------------------
N = 200_000
_valid_agents = "".join(agent(str(i), agent_input=f"${{{i - 1}}}" if i > 1 else "") for i in range(1, 1200))
ADVERSARIAL = {
    "agent-opens": "<agent>" * (N // 7),
    "agent-open-close-pairs": "<agent><agent_id>" * (N // 17),
    "thinking-opens": "<thinking>" * (N // 10),
    "answer-opens": "<answer>" * (N // 8),
    "lt": "<" * N,
    "dollar-brace": agent("1", agent_input="${" * (N // 2)),
    "dollar-brace-id": agent("1", agent_input="${" + "a" * N),
    "dollar-brace-space": agent("1", agent_input="${" + " " * N + "1"),
    "many-refs": agent("1") + agent("2", agent_input="${1}" * (N // 4)) + edges(("1", "2")),
    "edge-from-opens": agent("1") + agent("2", agent_input="${1}") + "<edge>" + "<from>" * (N // 6) + "</edge>",
    "edge-pairs": agent("1") + agent("2", agent_input="${1}") + edges(*[("1", "2")] * (N // 24)),
    "edge-from-only": agent("1") + "<edge>" + "<from>1</from>" * (N // 14) + "</edge>",
    "nested-sub-tags": "<agent>" + "<agent_id><agent_name><agent_input>" * (N // 36) + "</agent>",
    "chain-of-agents": _valid_agents + edges(*[(str(i - 1), str(i)) for i in range(2, 1200)]),
    "closing-tags": "</agent></thinking></edge></to></from>" * (N // 39),
    "mixed": ("<agent>${<edge><from>1<to>" * (N // 26)),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_input_is_fast(name):
    text = ADVERSARIAL[name]
    assert len(text) >= 150_000
    start = time.perf_counter()
    result = parse_plan(text, max_chars=None)
    elapsed = time.perf_counter() - start
    assert isinstance(result, (Plan, PlanError))
    assert elapsed < 1.0, f"{name}: {elapsed:.2f}s"


def test_long_valid_chain_parses():
    plan = parse_plan(ADVERSARIAL["chain-of-agents"], max_chars=None)
    assert isinstance(plan, Plan), plan
    assert plan.sink == "1199" and plan.topological_order()[:3] == ("1", "2", "3")
