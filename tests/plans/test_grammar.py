import re

import pytest

from orchrm_dagster.plans import KNOWN_AGENTS, plan_grammar_ebnf

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
    assert f"agent_{max_agents}" in defined and f"agent_{max_agents + 1}" not in defined


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
