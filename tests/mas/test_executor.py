from __future__ import annotations

import time

import pytest

from orchrm_dagster.mas.agents import AgentContext, AgentSettings
from orchrm_dagster.mas.executor import SEED_STRIDE, execute_plan, fill_references

from .scripted import COT, DEBATE_TURN, JUDGE, SC, ScriptedBackend, failed, words

QUESTION = "What is 6 * 7?"


def agent_block(agent_id: str, name: str, agent_input: str = "", roles: str = "") -> str:
    roles_tag = f"<debate_roles>{roles}</debate_roles>" if roles else ""
    return (f"<agent><agent_id>{agent_id}</agent_id><agent_name>{name}</agent_name>"
            f"<agent_description>step {agent_id}</agent_description><required_arguments>"
            f"<agent_input>{agent_input}</agent_input>{roles_tag}</required_arguments></agent>")


def dag(*agents: str, edges: list[tuple[str, str]]) -> str:
    edge_text = "".join(f"<from>{a}</from><to>{b}</to>" for a, b in edges)
    return "<thinking>plan</thinking>\n" + "\n".join(agents) + f"\n<edge>{edge_text}</edge>"


def execute(plan_text: str, backend: ScriptedBackend, **kwargs):
    return execute_plan(QUESTION, plan_text, AgentContext(backend=backend), **kwargs)


def test_direct_answer_makes_no_call():
    backend = ScriptedBackend()
    result = execute("<thinking>easy</thinking>\n<answer> 42 </answer>", backend)
    assert result.ok and result.final_answer == "42"
    assert result.calls == [] and backend.batches == [] and result.outputs == {}
    assert (result.prompt_tokens, result.completion_tokens, result.plan_error) == (0, 0, None)


def test_single_delegation():
    backend = ScriptedBackend([(COT, "6 * 7 = 42. \\boxed{42}")])
    plan = """<thinking>One careful solver is enough.</thinking>
<agent>
<agent_id>1</agent_id>
<agent_name>CoTAgent</agent_name>
<agent_description>Solve it.</agent_description>
<required_arguments>
<agent_input></agent_input>
</required_arguments>
</agent>"""
    result = execute(plan, backend)
    assert result.ok and result.final_answer == "6 * 7 = 42. \\boxed{42}"
    assert result.outputs == {"1": result.final_answer}
    assert len(result.calls) == 1 and result.calls[0].agent_id == "1"
    assert result.prompt_tokens == words(backend.prompts[0])
    assert result.completion_tokens == words(result.final_answer)
    assert result.subagent_records()[0]["agent_name"] == "CoTAgent"


def fan_in_plan() -> str:
    return dag(
        agent_block("c", "DebateAgent", "Use the draft ${a} and the vote ${b}.", roles="Optimist, Pessimist"),
        agent_block("a", "CoTAgent"),
        agent_block("b", "SCAgent", "Double-check ${ a }."),
        edges=[("a", "c"), ("b", "c"), ("a", "b")],
    )


def test_dag_with_fan_in_fills_references_with_the_right_outputs():
    backend = ScriptedBackend([
        (COT, "draft: 42 \\boxed{42}"),
        (SC, lambda request: f"vote sample {request.sampling.seed} \\boxed{{42}}"),
        (DEBATE_TURN, "agreed: 42"),
        (JUDGE, "final \\boxed{42}"),
    ])
    result = execute(fan_in_plan(), backend, settings=AgentSettings(sc_samples=3, debate_rounds=1))
    assert result.ok, result.error
    assert result.final_answer == "final \\boxed{42}"
    assert [len(batch) for batch in backend.batches] == [1, 3, 2, 1]  # a, b (3 samples), c (2 roles, judge)
    sc_prompt, debate_prompt = backend.prompts[1], backend.prompts[4]
    assert "Double-check draft: 42 \\boxed{42}." in sc_prompt
    expected_vote = f"vote sample {SEED_STRIDE} \\boxed{{42}}"  # agent b is second: seeds start at SEED_STRIDE
    assert result.outputs == {"a": "draft: 42 \\boxed{42}", "b": expected_vote, "c": result.final_answer}
    assert f"Use the draft draft: 42 \\boxed{{42}} and the vote {expected_vote}." in debate_prompt
    assert "You are the Optimist" in debate_prompt and "${" not in debate_prompt
    assert [c.agent_id for c in result.calls] == ["a", "b", "b", "b", "c", "c", "c"]
    assert result.prompt_tokens == sum(words(p) for p in backend.prompts)
    assert result.completion_tokens == sum(c.completion_tokens for c in result.calls)


def test_reference_filling_is_one_literal_pass():
    outputs = {"1": "costs ${2} and \\1 \\g<0>", "2": "never"}
    assert fill_references("see ${1} / ${ 2 }", outputs) == "see costs ${2} and \\1 \\g<0> / never"


@pytest.mark.parametrize("plan_text,code", [
    ("", "empty"),
    ("<thinking>x</thinking><agent><agent_id>1</agent_id>", "unclosed_tag"),
    (dag(agent_block("1", "CoTAgent"), agent_block("2", "MagicAgent", "${1}"), edges=[("1", "2")]), "unknown_agent"),
    (dag(agent_block("1", "CoTAgent", "${2}"), agent_block("2", "CoTAgent", "${1}"),
         edges=[("1", "2"), ("2", "1")]), "cycle"),
])
def test_plan_that_does_not_parse_makes_no_call(plan_text, code):
    backend = ScriptedBackend()
    result = execute(plan_text, backend)
    assert result.plan_error == code and result.error.startswith(f"plan does not parse: {code}: ")
    assert result.final_answer is None and result.calls == [] and backend.batches == []


def chain_plan() -> str:
    return dag(agent_block("1", "CoTAgent"), agent_block("2", "DebateAgent", "${1}"),
               agent_block("3", "CoTAgent", "${2}"), edges=[("1", "2"), ("2", "3")])


def test_agent_failure_mid_dag_keeps_earlier_calls():
    backend = ScriptedBackend([(COT, "\\boxed{42}"), (DEBATE_TURN, "42"), (JUDGE, failed("out of memory"))])
    result = execute(chain_plan(), backend)
    assert result.error == "agent 2 (DebateAgent) failed: LLM call failed: out of memory"
    assert result.final_answer is None and result.plan_error is None
    assert [c.agent_id for c in result.calls] == ["1", "2", "2", "2", "2"]  # the judge call failed
    assert result.outputs == {"1": "\\boxed{42}"}
    assert result.prompt_tokens == sum(words(p) for p in backend.prompts[:5])


def test_backend_exception_never_escapes():
    class Broken(ScriptedBackend):
        def generate(self, requests):
            raise RuntimeError("CUDA error")

    result = execute(chain_plan(), Broken())
    assert result.error == "agent 1 (CoTAgent) failed: RuntimeError: CUDA error" and result.calls == []


def test_non_text_plan_is_a_plan_error():
    result = execute(None, ScriptedBackend())  # type: ignore[arg-type]
    assert result.plan_error == "empty"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(time, "monotonic", fake)
    return fake


def slow_backend(clock: FakeClock, seconds: float = 10.0) -> ScriptedBackend:
    def reply(request):
        clock.now += seconds
        return "\\boxed{42}"
    return ScriptedBackend(default=reply)


def test_timeout_between_agents_keeps_the_calls_made(clock):
    plan = dag(agent_block("1", "CoTAgent"), agent_block("2", "CoTAgent", "${1}"),
               agent_block("3", "CoTAgent", "${2}"), edges=[("1", "2"), ("2", "3")])
    result = execute(plan, slow_backend(clock), timeout_s=15)
    assert result.error == "timed out after 15 s at agent 3"
    assert [c.agent_id for c in result.calls] == ["1", "2"] and set(result.outputs) == {"1", "2"}
    assert result.final_answer is None


def test_timeout_inside_an_agent_stops_before_its_next_call(clock):
    plan = dag(agent_block("1", "CoTAgent"), agent_block("2", "DebateAgent", "${1}"), edges=[("1", "2")])
    backend = slow_backend(clock, seconds=1.0)  # one batch of 2 debate turns advances the clock by 2 s
    result = execute(plan, backend, timeout_s=2.5)
    assert result.error == "timed out after 2.5 s at agent 2"
    assert [c.agent_id for c in result.calls] == ["1", "2", "2"]  # agent 1, then debate round 1


def test_zero_timeout_makes_no_call(clock):
    backend = slow_backend(clock)
    result = execute(chain_plan(), backend, timeout_s=0)
    assert result.error == "timed out after 0 s at agent 1" and backend.batches == []


def test_no_timeout_finishes_however_long_it_takes(clock):
    result = execute(chain_plan(), slow_backend(clock))
    assert result.ok and result.final_answer == "\\boxed{42}" and len(result.calls) == 1 + 5 + 1
