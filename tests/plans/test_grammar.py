import itertools
import re

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string as is_grammar_accept_string

from orchrm_dagster.plans import KNOWN_AGENTS, AgentSpec, Plan, parse_plan, plan_grammar_ebnf, render_plan
from orchrm_dagster.plans.grammar import EXACT_GRAPH_MAX_AGENTS

_RULE_DEF = re.compile(r"^([A-Za-z_][\w.-]*)\s*::=(.*)$")
# things in a rule body that are not rule names: string literals, character classes
_NON_NAMES = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')
_NAME = re.compile(r"[A-Za-z_][\w.-]*")


def rules_of(grammar: str) -> tuple[list[str], set[str]]:
    defined, referenced = [], set()
    body = None
    for line in grammar.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _RULE_DEF.match(line)
        if m:
            defined.append(m.group(1))
            body = m.group(2)
        else:
            assert body is not None, f"continuation line before any rule: {line!r}"
            body = line
        stripped = _NON_NAMES.sub(" ", body)
        assert '"' not in stripped, f"unbalanced string literal in {line!r}"
        referenced.update(_NAME.findall(stripped))
    return defined, referenced


@pytest.mark.parametrize("max_agents", [1, 2, 4, 9])
def test_grammar_rules_are_closed(max_agents):
    grammar = plan_grammar_ebnf(max_agents=max_agents)
    defined, referenced = rules_of(grammar)
    assert "root" in defined
    assert len(defined) == len(set(defined)), "a rule is defined twice"
    assert referenced <= set(defined), f"undefined rules: {referenced - set(defined)}"
    assert set(defined) - {"root"} <= referenced, f"unused rules: {set(defined) - referenced - {'root'}}"
    agent_ids = {int(m.group(1)) for m in map(re.compile(r"agent_(\d+)").match, defined) if m}
    assert max(agent_ids) == max_agents


def test_grammar_lists_known_agents():
    grammar = plan_grammar_ebnf()
    for name in KNOWN_AGENTS:
        assert f'"{name}"' in grammar
    custom = plan_grammar_ebnf(known_agents=("Solver", 'Odd"Name'), max_agents=2)
    assert '"Solver" | "Odd\\"Name"' in custom
    assert "CoTAgent" not in custom


@pytest.mark.parametrize("kwargs", [{"max_agents": 0}, {"known_agents": ()}, {"known_agents": ("<x>",)}])
def test_grammar_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        plan_grammar_ebnf(**kwargs)


def graph_plan_text(refs_by_agent) -> str:
    """A canonical plan whose agent k uses ${i} for every i in refs_by_agent[k-1], with edges to match."""
    agents = [AgentSpec(str(k), "CoTAgent", "solve", " ".join(["step"] + ["${%d}" % r for r in refs] + ["done"]))
              for k, refs in enumerate(refs_by_agent, start=1)]
    edges = tuple((str(i), str(k)) for k, refs in enumerate(refs_by_agent, start=1) for i in refs)
    return render_plan(Plan(thinking="split the work", agents=tuple(agents), edges=edges))


def every_forward_graph(n: int):
    """Every way agents 1..n can reference earlier agents (valid plans and ones with several sinks)."""
    return itertools.product(*[[tuple(x for x in range(1, k) if mask >> (x - 1) & 1) for mask in range(2 ** (k - 1))]
                               for k in range(1, n + 1)])


@pytest.mark.parametrize("max_agents", [3, 4])
def test_grammar_admits_exactly_the_single_sink_graphs(max_agents):
    grammar = xgr.Grammar.from_ebnf(plan_grammar_ebnf(max_agents=max_agents))
    seen = {True: 0, False: 0}
    for n in range(1, max_agents + 1):
        for graph in every_forward_graph(n):
            text = graph_plan_text(graph)
            valid = isinstance(parse_plan(text), Plan)
            assert is_grammar_accept_string(grammar, text) == valid, (graph, parse_plan(text))
            seen[valid] += 1
    assert seen[True] and seen[False]


def test_grammar_rejects_an_edge_block_that_differs_from_the_references():
    grammar = xgr.Grammar.from_ebnf(plan_grammar_ebnf(max_agents=3))
    text = graph_plan_text(((), (1,), (2,)))
    assert is_grammar_accept_string(grammar, text)
    extra_edge = text.replace("</edge>", "<from>1</from><to>3</to>\n</edge>")
    assert parse_plan(extra_edge).code == "edge_without_reference"
    assert not is_grammar_accept_string(grammar, extra_edge)


def test_grammar_above_the_exact_limit_still_bounds_edges_forward():
    grammar = xgr.Grammar.from_ebnf(plan_grammar_ebnf(max_agents=EXACT_GRAPH_MAX_AGENTS + 1))
    assert is_grammar_accept_string(grammar, graph_plan_text(((), (1,), (2,), (3,), (4,))))
    backward = graph_plan_text(((), (1,))).replace("<from>1</from><to>2</to>", "<from>2</from><to>1</to>")
    assert not is_grammar_accept_string(grammar, backward)
