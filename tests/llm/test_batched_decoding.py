"""The runner's batched decoding (each distinct prompt forwarded once, a KV cache that grows in place, finished rows
leaving the batch) gives each request what it gets decoded alone: the same plans for the same seeds, grammar on. The
static cache (a GPU's, its rows kept to the end) samples the same plans as the growing one."""

import pytest

from orchrm_dagster.llm import ChatRequest, SamplingSettings
from orchrm_dagster.llm.kv_cache import resolved_cache_kind
from orchrm_dagster.llm.transformers_backend import load_model, sample_rows
from orchrm_dagster.plans import TextBounds, plan_grammar_ebnf

pytestmark = pytest.mark.filterwarnings("ignore")

GRAMMAR = plan_grammar_ebnf(max_agents=1, bounds=TextBounds.fit(200, max_agents=1))
QUESTIONS = ("Plan for: what is 12 + 30?", "Plan for: name a prime above 40.", "Plan for: 7 x 8?")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.tiny_models import make_tiny_policy

    return load_model(make_tiny_policy(tmp_path_factory.mktemp("tiny_policy")), device="cpu")


def request(question: str, temperature: float, max_new_tokens: int, seed: int | None) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": question},), grammar=GRAMMAR,
                       sampling=SamplingSettings(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_batch_decodes_what_each_request_decodes_alone(tiny, temperature):
    # three problems' samples in one batch, budgets that end rows at different steps (rows leave the batch)
    requests = [request(QUESTIONS[i % 3], temperature, max_new_tokens=40 + 17 * i, seed=100 + i) for i in range(9)]
    together = sample_rows(tiny, requests, max_batch_size=len(requests))
    alone = [sample_rows(tiny, [r], max_batch_size=1)[0] for r in requests]
    assert [row.tokens for row in together] == [row.tokens for row in alone]
    assert [row.finish_reason for row in together] == [row.finish_reason for row in alone]
    assert len({len(row.tokens) for row in together}) > 1  # the rows did end at different steps
    for row, theirs in zip(together, alone):
        assert row.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_static_cache_samples_what_the_growing_cache_samples(tiny, temperature):
    # a GRPO group (one prompt, several seeds) and other problems' samples, rows ending at different steps
    requests = [request(QUESTIONS[i // 3], temperature, max_new_tokens=24 + 11 * i, seed=7 + i) for i in range(6)]
    growing = sample_rows(tiny, requests, max_batch_size=len(requests), decoding_cache="growing")
    static = sample_rows(tiny, requests, max_batch_size=len(requests), decoding_cache="static")
    again = sample_rows(tiny, requests, max_batch_size=len(requests), decoding_cache="static")  # the cache reused
    assert [row.tokens for row in static] == [row.tokens for row in growing] == [row.tokens for row in again]
    assert [row.finish_reason for row in static] == [row.finish_reason for row in growing]
    assert len({len(row.tokens) for row in static}) > 1
    for row, theirs in zip(static, growing):
        assert row.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)


def test_the_cache_is_static_on_cuda_and_grows_elsewhere_unless_named():
    assert resolved_cache_kind("auto", "cuda") == "static"
    assert resolved_cache_kind("auto", "cpu") == "growing"  # the CPU's decoding is unchanged
    assert resolved_cache_kind("growing", "cuda") == "growing" and resolved_cache_kind("static", "cpu") == "static"
