from __future__ import annotations

import pytest

from orchrm_dagster.llm.base import SamplingSettings
from orchrm_dagster.mas.agents import (
    AGENTS,
    NO_RETRIEVER_NOTE,
    AgentContext,
    AgentError,
    AgentSettings,
    CoTAgent,
    DebateAgent,
    ReflexionAgent,
    SCAgent,
    WebSearchAgent,
    clean_query,
    critic_accepts,
)
from orchrm_dagster.mas.retrieval import BM25Retriever
from orchrm_dagster.plans import KNOWN_AGENTS, AgentSpec

from .scripted import COT, CRITIC, DEBATE_TURN, JUDGE, QUERY, REFINE, SC, SUMMARIZE, ScriptedBackend, failed, words

QUESTION = "Janet has 16 eggs, eats 3 and bakes 4. She sells the rest at $2. How much does she make?"


def spec(name: str, agent_id: str = "1", roles: tuple[str, ...] = ()) -> AgentSpec:
    return AgentSpec(agent_id=agent_id, agent_name=name, debate_roles=roles)


def run(agent, backend, agent_input: str = "", **ctx_fields):
    ctx = AgentContext(backend=backend, **ctx_fields)
    return agent.run(QUESTION, agent_input, spec(agent.name), ctx)


def assert_tokens_match(output, backend):
    assert [c.prompt_tokens for c in output.calls] == [words(p) for p in backend.prompts]
    assert [c.input for c in output.calls] == backend.prompts
    assert all(c.model == "scripted-model" for c in output.calls)


def test_registry_covers_the_plan_agent_names():
    assert tuple(AGENTS) == KNOWN_AGENTS
    assert all(AGENTS[name].name == name for name in KNOWN_AGENTS)


def test_cot_is_one_call_with_the_question_and_answer_format():
    backend = ScriptedBackend([(COT, "16 - 3 - 4 = 9, 9 * 2 = 18. \\boxed{18}")])
    output = run(CoTAgent(), backend)
    assert output.text.endswith("\\boxed{18}")
    assert len(backend.batches) == 1 and len(output.calls) == 1
    prompt = backend.prompts[0]
    assert QUESTION in prompt and "\\boxed{}" in prompt
    call = output.calls[0]
    assert (call.agent_id, call.agent_name, call.output) == ("1", "CoTAgent", output.text)
    assert call.completion_tokens == words(output.text)
    assert_tokens_match(output, backend)


def test_agent_input_is_added_to_the_question():
    backend = ScriptedBackend([(COT, "\\boxed{18}")])
    run(CoTAgent(), backend, agent_input="Check this solution: 9 * 2 = 18")
    prompt = backend.prompts[0]
    assert QUESTION in prompt and "Check this solution: 9 * 2 = 18" in prompt


@pytest.mark.parametrize("answer_format,expected", [("qa", "Answer: <short answer>"), ("choice", "Answer: <letter>")])
def test_answer_format_picks_the_instruction(answer_format, expected):
    backend = ScriptedBackend()
    run(CoTAgent(), backend, answer_format=answer_format)
    assert expected in backend.prompts[0] and "boxed" not in backend.prompts[0]


def test_unknown_answer_format_is_refused():
    with pytest.raises(ValueError, match="answer_format"):
        AgentContext(backend=ScriptedBackend(), answer_format="essay")


def test_sc_sends_k_samples_in_one_batch_and_returns_the_majority():
    answers = {0: "17", 1: "18", 2: "20", 3: "18", 4: "17", 5: "18"}

    def sample(request):
        seed = request.sampling.seed
        return f"reasoning {seed}\n\\boxed{{{answers[seed]}}}"

    backend = ScriptedBackend([(SC, sample)])
    output = run(SCAgent(AgentSettings(sc_samples=6)), backend)
    assert len(backend.batches) == 1 and len(backend.batches[0]) == 6
    assert [r.sampling.seed for r in backend.requests] == [0, 1, 2, 3, 4, 5]
    assert output.text == "reasoning 1\n\\boxed{18}"  # the first sample with the majority answer
    assert len(output.calls) == 6
    assert sum(c.completion_tokens for c in output.calls) == sum(words(c.output) for c in output.calls)
    assert_tokens_match(output, backend)


def test_sc_samples_even_when_the_context_is_greedy():
    backend = ScriptedBackend()
    run(SCAgent(AgentSettings(sc_temperature=0.9)), backend, sampling=SamplingSettings(temperature=0.0), seed=40)
    assert len(backend.requests) == 5
    assert {r.sampling.temperature for r in backend.requests} == {0.9}
    assert [r.sampling.seed for r in backend.requests] == [40, 41, 42, 43, 44]
    backend = ScriptedBackend()
    run(SCAgent(), backend, sampling=SamplingSettings(temperature=0.5))
    assert {r.sampling.temperature for r in backend.requests} == {0.5}


def test_no_seed_means_unseeded_requests():
    backend = ScriptedBackend()
    run(SCAgent(AgentSettings(sc_samples=2)), backend, seed=None, sampling=SamplingSettings(temperature=1.0, seed=7))
    assert [r.sampling.seed for r in backend.requests] == [None, None]


def test_sc_tie_goes_to_the_answer_seen_first():
    replies = iter(["Answer: 7", "Answer: 9", "Answer: 9", "Answer: 7"])
    backend = ScriptedBackend([(SC, lambda request: next(replies))])
    assert run(SCAgent(AgentSettings(sc_samples=4)), backend).text == "Answer: 7"


def test_debate_runs_roles_times_rounds_in_batches_then_a_judge():
    backend = ScriptedBackend([
        (DEBATE_TURN, lambda r: "I say 18." if "You are the Proposer" in r.messages[0]["content"] else "Check: 18."),
        (JUDGE, "Both agree. \\boxed{18}"),
    ])
    output = run(DebateAgent(AgentSettings(debate_rounds=3)), backend)
    assert [len(batch) for batch in backend.batches] == [2, 2, 2, 1]
    assert output.text == "Both agree. \\boxed{18}" and len(output.calls) == 7
    first_round, last_round, judge = backend.prompts[0], backend.prompts[4], backend.prompts[6]
    assert "You are the Proposer" in first_round and "No turns yet" in first_round
    assert "You are the Skeptic" in backend.prompts[1]
    assert "[Round 2] Skeptic: Check: 18." in last_round and "[Round 3]" not in last_round
    assert "[Round 3] Proposer: I say 18." in judge
    assert_tokens_match(output, backend)


def test_debate_uses_the_plan_roles():
    backend = ScriptedBackend()
    agent = DebateAgent(AgentSettings(debate_rounds=1))
    agent.run(QUESTION, "", spec("DebateAgent", roles=("Physicist", "Chemist", "Biologist")),
              AgentContext(backend=backend))
    assert [len(batch) for batch in backend.batches] == [3, 1]
    assert "You are the Biologist" in backend.prompts[2]


def test_reflexion_attempts_then_critic_and_refine():
    backend = ScriptedBackend([
        (COT, "9 * 2 = 19. \\boxed{19}"),
        (CRITIC, "9 * 2 is 18, not 19.\nVerdict: incorrect"),
        (REFINE, "9 * 2 = 18. \\boxed{18}"),
    ])
    output = run(ReflexionAgent(AgentSettings(reflexion_rounds=2)), backend)
    assert output.text == "9 * 2 = 18. \\boxed{18}"
    assert len(output.calls) == 5  # attempt, then (critic, refine) x 2
    assert [len(batch) for batch in backend.batches] == [1, 1, 1, 1, 1]
    critic, refine = backend.prompts[1], backend.prompts[2]
    assert "\\boxed{19}" in critic
    assert "9 * 2 is 18, not 19." in refine and "\\boxed{19}" in refine
    assert_tokens_match(output, backend)


def test_reflexion_stops_when_the_critic_accepts():
    backend = ScriptedBackend([(COT, "\\boxed{18}"), (CRITIC, "All steps check out.\nVerdict: **correct**")])
    output = run(ReflexionAgent(AgentSettings(reflexion_rounds=3)), backend)
    assert output.text == "\\boxed{18}" and len(output.calls) == 2


@pytest.mark.parametrize("critique,accepted", [
    ("Verdict: correct", True), ("verdict: Correct.", True), ("Verdict: incorrect", False),
    ("Verdict: correct\nOn second thought...\nVerdict: incorrect", False), ("Looks fine.", False),
])
def test_critic_verdict(critique, accepted):
    assert critic_accepts(critique) is accepted


CORPUS = {
    "eiffel": "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, completed in 1889.",
    "wall": "The Great Wall of China is a series of fortifications built across northern China.",
    "everest": "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
    "amazon": "The Amazon River in South America is the largest river by discharge volume of water.",
    "python": "Python is a programming language created by Guido van Rossum, first released in 1991.",
}


def test_websearch_queries_retrieves_and_summarizes():
    retriever = BM25Retriever(list(CORPUS.values()), list(CORPUS))
    backend = ScriptedBackend([
        (QUERY, "Query: \"Eiffel Tower city\"\n(extra line)"),
        (SUMMARIZE, "Per [1], Paris.\nAnswer: Paris"),
    ])
    ctx = AgentContext(backend=backend, answer_format="qa", retriever=retriever)
    output = WebSearchAgent(AgentSettings(search_k=2)).run("In which city is the Eiffel Tower?", "",
                                                           spec("WebSearchAgent"), ctx)
    assert output.text == "Per [1], Paris.\nAnswer: Paris"
    assert len(output.calls) == 2 and [len(b) for b in backend.batches] == [1, 1]
    summarize = backend.prompts[1]
    assert f"[1] (eiffel) {CORPUS['eiffel']}" in summarize
    assert "[2]" not in summarize  # no other document shares a query term
    assert output.calls[1].note == "query: 'Eiffel Tower city'; retrieved: eiffel"
    assert_tokens_match(output, backend)


def test_websearch_with_no_hit_says_so_in_the_prompt():
    retriever = BM25Retriever(list(CORPUS.values()), list(CORPUS))
    backend = ScriptedBackend([(QUERY, "zebra migration")])
    ctx = AgentContext(backend=backend, retriever=retriever)
    output = WebSearchAgent().run("Where do zebras migrate?", "", spec("WebSearchAgent"), ctx)
    assert "found no passage" in backend.prompts[1]
    assert output.calls[1].note.endswith("retrieved: nothing")


def test_websearch_without_retriever_degrades_to_cot():
    backend = ScriptedBackend([(COT, "\\boxed{18}")])
    output = run(WebSearchAgent(), backend)
    assert output.text == "\\boxed{18}" and len(output.calls) == 1
    assert output.calls[0].note == NO_RETRIEVER_NOTE
    assert output.calls[0].to_record()["note"] == NO_RETRIEVER_NOTE
    assert "note" not in run(CoTAgent(), ScriptedBackend()).calls[0].to_record()


@pytest.mark.parametrize("text,query", [
    ("Query: Eiffel Tower", "Eiffel Tower"), ("\n  \"Great Wall length\"  \nbecause...", "Great Wall length"),
    ("Search query: **Everest height**", "Everest height"), ("", ""),
])
def test_clean_query(text, query):
    assert clean_query(text) == query


def test_failed_completion_raises_with_the_calls_made_so_far():
    backend = ScriptedBackend([(DEBATE_TURN, "I say 18."), (JUDGE, failed("model overloaded"))])
    with pytest.raises(AgentError, match="model overloaded") as raised:
        run(DebateAgent(), backend)
    assert len(raised.value.calls) == 4


def test_backend_exception_becomes_agent_error():
    class Broken(ScriptedBackend):
        def generate(self, requests):
            raise ConnectionError("server went away")

    with pytest.raises(AgentError, match="ConnectionError: server went away"):
        run(CoTAgent(), Broken())


def test_wrong_number_of_completions_is_an_agent_error():
    class Short(ScriptedBackend):
        def generate(self, requests):
            return super().generate(requests)[:-1]

    with pytest.raises(AgentError, match="4 completions for 5 requests"):
        run(SCAgent(), Short())


@pytest.mark.parametrize("field", ["sc_samples", "debate_rounds", "search_k"])
def test_settings_refuse_zero(field):
    with pytest.raises(ValueError, match=field):
        AgentSettings(**{field: 0})
