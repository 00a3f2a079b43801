"""The runner's batched decoding (each distinct prompt forwarded once, a KV cache that grows in place, finished rows
leaving the batch) gives each request what it gets decoded alone: the same plans for the same seeds, grammar on. The
static cache (an option for a GPU, its rows kept to the end, its batch filled up to a bucketed size with ghost rows)
samples the same plans as the growing one, and a model keeps a few of them, one per shape."""

import pytest

from orchrm_dagster.llm import ChatRequest, SamplingSettings, release_static_caches, unload_model
from orchrm_dagster.llm.cache_kind import resolved_cache_kind
from orchrm_dagster.llm.kv_cache import STATIC_CACHES_KEPT, held_static_caches
from orchrm_dagster.llm.transformers_decoding import load_model, sample_rows
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


@pytest.mark.parametrize("rows", [3, 5])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_ghost_rows_fill_a_static_batch_without_changing_the_real_rows_tokens(tiny, rows, temperature):
    requests = [request(QUESTIONS[i % 3], temperature, max_new_tokens=12 + 4 * i, seed=30 + i) for i in range(rows)]
    release_static_caches(tiny.model)
    growing = sample_rows(tiny, requests, max_batch_size=8, decoding_cache="growing")
    static = sample_rows(tiny, requests, max_batch_size=8, decoding_cache="static")
    assert [row.tokens for row in static] == [row.tokens for row in growing]
    assert [row.finish_reason for row in static] == [row.finish_reason for row in growing]
    assert [batch for batch, *_ in held_static_caches(tiny.model)] == [4 if rows == 3 else 8]  # ghosts filled it


def test_a_model_keeps_a_few_static_caches_one_per_shape_and_releases_them(tiny):
    def decode(rows: int) -> None:
        requests = [request(QUESTIONS[0], 0.0, max_new_tokens=2, seed=None)] * rows
        sample_rows(tiny, requests, max_batch_size=32, decoding_cache="static")

    release_static_caches()
    decode(3)
    (first_shape, first_cache), = held_static_caches(tiny.model).items()
    decode(4)  # the same bucket: the same cache, reset
    decode(5)
    assert held_static_caches(tiny.model)[first_shape] is first_cache and len(held_static_caches(tiny.model)) == 2
    for rows in (1, 2, 9, 17, 32):
        decode(rows)
    assert len(held_static_caches(tiny.model)) == STATIC_CACHES_KEPT  # the least recently used were dropped
    assert first_shape not in held_static_caches(tiny.model)
    release_static_caches(tiny.model)
    assert held_static_caches(tiny.model) == {}


def test_an_unloaded_model_folder_is_loaded_again_and_its_static_caches_are_dropped(tmp_path):
    from tests.tiny_models import make_tiny_policy

    folder = make_tiny_policy(tmp_path / "policy")
    lm = load_model(folder, device="cpu")
    sample_rows(lm, [request(QUESTIONS[0], 0.0, max_new_tokens=2, seed=None)], 1, decoding_cache="static")
    assert held_static_caches(lm.model)
    unload_model(folder)
    assert held_static_caches(lm.model) == {} and load_model(folder, device="cpu") is not lm


def test_the_cache_grows_on_every_device_unless_static_is_named():
    assert resolved_cache_kind("auto", "cuda") == "growing"  # static has not run on a GPU here
    assert resolved_cache_kind("auto", "cpu") == "growing"
    assert resolved_cache_kind("growing", "cuda") == "growing" and resolved_cache_kind("static", "cpu") == "static"
