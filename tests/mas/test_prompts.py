from __future__ import annotations

import re

import pytest

from orchrm_dagster.mas.prompts import PROMPT_DIR, load_prompt, placeholders, prompt_names, render_prompt
from orchrm_dagster.plans import parse_plan

REQUIRED = {
    "cot": {"question", "answer_format"},
    "sc": {"question", "answer_format"},
    "debate_turn": {"role", "question", "transcript", "answer_format"},
    "debate_judge": {"question", "transcript", "answer_format"},
    "reflexion_critic": {"question", "attempt"},
    "reflexion_refine": {"question", "attempt", "critique", "answer_format"},
    "websearch_query": {"question"},
    "websearch_summarize": {"question", "passages", "answer_format"},
    "orchestrator": {"question", "max_agents"},
}


def documented_placeholders(name: str) -> set[str]:
    header = (PROMPT_DIR / f"{name}.txt").read_text().splitlines()[0]
    assert header.startswith("# placeholders:"), name
    return set(re.findall(r"\{(\w+)\}", header))


def test_the_required_prompts_exist_with_their_placeholders():
    for name, expected in REQUIRED.items():
        assert placeholders(name) == expected, name


@pytest.mark.parametrize("name", prompt_names())
def test_every_prompt_renders_with_its_documented_placeholders(name):
    assert placeholders(name) == documented_placeholders(name)
    values = {field: f"<<{field} value>>" for field in placeholders(name)}
    text = render_prompt(name, **values)
    assert not text.startswith("#") and text.strip() == text
    for value in values.values():
        assert value in text
    assert "{{" not in text and "}}" not in text


def test_values_with_braces_are_kept_as_they_are():
    assert "\\boxed{x} ${1} {placeholder}" in render_prompt("websearch_query", question="\\boxed{x} ${1} {placeholder}")


def test_missing_placeholder_names_prompt_and_placeholder():
    with pytest.raises(KeyError, match=r"prompt 'debate_turn' needs a value for placeholder 'role'"):
        render_prompt("debate_turn", question="q", transcript="t", answer_format="f")


def test_unknown_prompt_is_a_key_error():
    with pytest.raises(KeyError, match="no prompt named 'nonesuch'"):
        load_prompt("nonesuch")


def test_orchestrator_prompt_explains_the_format_and_its_example_parses():
    text = render_prompt("orchestrator", question="What is 6 * 7?", max_agents=4)
    for agent in ("CoTAgent", "SCAgent", "DebateAgent", "ReflexionAgent", "WebSearchAgent"):
        assert agent in text
    for tag in ("<edge>", "<answer>", "<debate_roles>", "${ID}", "at most 4 agents"):
        assert tag in text
    example = text[text.rindex("<thinking>\n"):text.rindex("</edge>") + len("</edge>")]
    plan = parse_plan(example)
    assert plan.form == "dag" and plan.sink == "3" and plan.agent("3").references == ("1", "2")
