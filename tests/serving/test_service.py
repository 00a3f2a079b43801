"""`orchrm serve` driven over real HTTP (httpx against uvicorn on a loopback port), scoring with a tiny trained
champion: scores, the chosen plan, batching of concurrent requests, reload on a new champion, and each bad input's
4xx."""

import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.rm import (RewardScorer, RMTrainConfig, best_of_n_pick, checkpoints_dir, train_new_version,
                               version_dir)
from orchrm_dagster.serving import create_app
from orchrm_dagster.storage import StorageRoot
from orchrm_dagster.synthetic import random_plan_text
from tests.rm.toy import toy_pairs
from tests.serving.conftest import TEST_SETTINGS, running, train_champion

QUESTION = "How many apples are left if 12 of 40 are eaten?"
PLANS = ["<agent_name>DebateAgent</agent_name> then <agent_name>CoTAgent</agent_name>",
         "<agent_name>CoTAgent</agent_name>",
         "<agent_name>SCAgent</agent_name> then <agent_name>ReflexionAgent</agent_name> then a long final check"]
VALID_PLAN = random_plan_text(random.Random(0), 2)  # the plans above are agent names in prose: none parses


def direct_scores(root: StorageRoot, version: int, question: str, plans: list[str]) -> list[float]:
    model = os.path.join(version_dir(str(checkpoints_dir(root)), version), "model")
    return RewardScorer(model, "cpu").score([question] * len(plans), plans)


def test_each_plan_is_scored_by_the_champion_and_the_best_is_chosen(service, champion_root):
    url, _ = service
    answer = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": PLANS, "domain": "math"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["rm_version"] == 1 and body["domain"] == "math"
    assert body["scores"] == pytest.approx(direct_scores(champion_root, 1, QUESTION, PLANS), abs=1e-5)
    assert body["chosen"] == max(range(len(PLANS)), key=body["scores"].__getitem__)
    # no domain: the one champion of every domain scores; a benchmark names its domain
    assert httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": PLANS}).json()["domain"] is None
    by_benchmark = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": PLANS, "benchmark": "hotpotqa"})
    assert by_benchmark.json()["domain"] == "qa"
    health = httpx.get(f"{url}/v1/health").json()
    assert health["status"] == "ok" and health["rm_versions"] == [1]


def test_a_single_plan_is_chosen(service):
    url, _ = service
    body = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": PLANS[:1]}).json()
    assert body["chosen"] == 0 and len(body["scores"]) == 1


def test_concurrent_requests_are_answered_each_with_its_own_scores_in_fewer_batches(service, champion_root):
    url, _ = service
    clients = 16
    requests = [{"question": f"{QUESTION} (client {i})", "plans": PLANS[: 1 + i % 3][::-1]} for i in range(clients)]
    before = httpx.get(f"{url}/v1/stats").json()
    answers: list = [None] * clients
    start = threading.Barrier(clients)

    def client(i: int) -> None:
        with httpx.Client(timeout=60) as http:
            start.wait()
            answers[i] = http.post(f"{url}/v1/score", json=requests[i])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for request, answer in zip(requests, answers):
        assert answer.status_code == 200, answer.text
        expected = direct_scores(champion_root, 1, request["question"], request["plans"])
        assert answer.json()["scores"] == pytest.approx(expected, abs=1e-5)
    after = httpx.get(f"{url}/v1/stats").json()
    assert after["requests"] - before["requests"] == clients
    assert after["batches"] - before["batches"] < clients
    assert after["largest_batch_requests"] > 1


def test_a_new_champion_is_loaded_without_a_restart(tmp_path, tiny_backbone):
    root = StorageRoot(str(tmp_path / "storage"))
    train_champion(root, tiny_backbone)
    app = create_app(root, TEST_SETTINGS)
    with running(app) as url:
        ask = {"question": QUESTION, "plans": PLANS}
        assert httpx.post(f"{url}/v1/score", json={**ask, "domain": "qa"}).json()["rm_version"] == 1
        in_flight = app.state.watcher.current  # what a batch scoring now holds
        train_champion(root, tiny_backbone, seed=1, domains=("qa",))  # qa's champion only
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/v1/stats").json()["reloads"] < 1:
            assert time.monotonic() < deadline, "the new champion was not loaded"
            time.sleep(0.05)
        qa = httpx.post(f"{url}/v1/score", json={**ask, "domain": "qa"}).json()
        assert qa["rm_version"] == 2
        assert qa["scores"] == pytest.approx(direct_scores(root, 2, QUESTION, PLANS), abs=1e-5)
        assert httpx.post(f"{url}/v1/score", json={**ask, "domain": "math"}).json()["rm_version"] == 1
        assert httpx.get(f"{url}/v1/health").json()["champions"] == {"choice": 1, "math": 1, "qa": 2}
        # a batch that started before the swap finishes on the old champion
        assert in_flight.scorer.score_with_lengths([QUESTION], PLANS[:1], ["qa"])[2] == [1]
        # the champions now differ: a request must say which domain it is of
        undecided = httpx.post(f"{url}/v1/score", json=ask)
        assert undecided.status_code == 422
        assert "choice: v1, math: v1, qa: v2" in undecided.json()["error"] and "domain" in undecided.json()["error"]


def test_before_the_first_champion_the_service_says_what_to_materialize(tmp_path):
    with running(create_app(StorageRoot(str(tmp_path / "empty")), TEST_SETTINGS)) as url:
        answer = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": PLANS})
        assert answer.status_code == 503 and "materialize `reward_model`" in answer.json()["error"]
        assert httpx.get(f"{url}/v1/health").status_code == 503


def test_a_version_that_did_not_beat_chance_serves_nothing_and_the_service_says_why(tmp_path, tiny_backbone):
    root = StorageRoot(str(tmp_path / "storage"))
    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4,
                           device="cpu", min_validation_pairs=50)
    assert train_new_version(root, toy_pairs(8, 0), toy_pairs(6, 1), config, ["p"]).champion_of == ()
    with running(create_app(root, TEST_SETTINGS)) as url:
        answer = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": PLANS, "domain": "math"})
        assert answer.status_code == 503
        assert answer.json()["error"].startswith("no champion reward model for the math domain: v1 had 6 validation "
                                                 "pairs there")
        assert "fewer than min_validation_pairs (50)" in answer.json()["error"]
        health = httpx.get(f"{url}/v1/health")
        assert health.status_code == 503 and "min_validation_pairs (50)" in health.json()["error"]


def test_the_chosen_plan_follows_the_best_of_n_rule_and_plans_that_do_not_parse_are_named(service):
    url, _ = service
    plans = [PLANS[0], VALID_PLAN, PLANS[2]]
    body = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": plans, "domain": "math"}).json()
    assert body["chosen"] == 1  # the one plan that parses, whatever the scores
    assert [u["index"] for u in body["unparseable"]] == [0, 2] and all(u["error"] for u in body["unparseable"])
    assert body["chosen"] == best_of_n_pick(plans, body["scores"]).chosen


@pytest.mark.parametrize("body, says", [
    ({"question": QUESTION, "plans": []}, "plans: List should have at least 1 item"),
    ({"question": QUESTION, "plans": ["a", 3]}, "plans.1: Input should be a valid string"),
    ({"question": QUESTION, "plans": "one plan"}, "plans: Input should be a valid list"),
    ({"question": QUESTION, "plans": ["a", ""]}, "plans.1: String should have at least 1 character"),
    ({"plans": ["a"]}, "question: Field required"),
    ({"question": QUESTION, "plans": ["a"] * 9}, "plans: List should have at most 8 items"),
    ({"question": QUESTION, "plans": ["a" * 2001]}, "plans.0: String should have at most 2000 characters"),
    ({"question": QUESTION, "plans": ["a"], "domain": "chess"}, "domain: unknown domain 'chess'; known domains: "
                                                                "choice, math, qa"),
    ({"question": QUESTION, "plans": ["a"], "domain": "math", "benchmark": "hotpotqa"},
     "benchmark 'hotpotqa' is of the qa domain, not math"),
    ({"question": QUESTION, "plan": ["a"]}, "plan: Extra inputs are not permitted"),
    ([QUESTION, ["a"]], "body: expected a JSON object"),
])
def test_bad_input_is_answered_422_saying_what_is_wrong(service, body, says):
    url, _ = service
    answer = httpx.post(f"{url}/v1/score", json=body)
    assert answer.status_code == 422
    assert says in answer.json()["error"]


def test_malformed_json_and_too_large_bodies_are_refused(service):
    url, _ = service
    broken = httpx.post(f"{url}/v1/score", content=b'{"question": "q", "plans": [',
                        headers={"content-type": "application/json"})
    assert broken.status_code == 422 and "JSON decode error" in broken.json()["error"]
    large = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": ["a" * 1500] * 16})
    assert large.status_code == 413 and "larger than 20000 bytes" in large.json()["error"]


def texts(max_size: int):
    return st.text(st.characters(exclude_categories=("Cs",)), max_size=max_size)  # what UTF-8 can carry


SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts(20)
JSON = st.recursive(SCALARS,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts(8), inner, max_size=4),
                    max_leaves=12)
BODIES = st.one_of(JSON, st.fixed_dictionaries(
    {"question": st.one_of(texts(40), JSON), "plans": st.one_of(st.lists(texts(60), max_size=10), JSON)},
    optional={"domain": st.one_of(st.sampled_from(["math", "qa", "choice", "chess"]), JSON)}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES)
def test_any_json_body_gets_scores_or_a_4xx_that_says_why(service, body):
    url, _ = service
    answer = httpx.post(f"{url}/v1/score", json=body, timeout=60)
    if answer.status_code == 200:
        assert answer.json()["chosen"] in range(len(body["plans"]))
    else:
        assert answer.status_code == 422 and answer.json()["error"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow  # ~25 s on a loaded 2-core machine: a fresh interpreter imports Dagster, torch and transformers
def test_the_serve_command_answers_over_http_behind_its_token(champion_root, tmp_path):
    port = _free_port()
    token = "subprocess-s3cret-token"
    orchrm = Path(sys.executable).with_name("orchrm")
    log = open(tmp_path / "serve.log", "wb")
    # every address, which the command allows only with a token (from its environment)
    server = subprocess.Popen([str(orchrm), "--storage", champion_root.url, "serve", "--host", "0.0.0.0", "--port",
                               str(port), "--device", "cpu"], stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "ORCHRM_SERVE_TOKEN": token})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "orchrm serve did not answer"
            try:
                health = httpx.get(f"{url}/v1/health")  # no token needed
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert health.json()["rm_versions"] == [1]
        ask = {"question": QUESTION, "plans": PLANS}
        assert httpx.post(f"{url}/v1/score", json=ask).status_code == 401
        assert httpx.post(f"{url}/v1/score", json=ask, headers={"Authorization": "Bearer guess"}).status_code == 401
        body = httpx.post(f"{url}/v1/score", json=ask, headers={"Authorization": f"Bearer {token}"}).json()
        assert body["rm_version"] == 1 and len(body["scores"]) == 3
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    output = (tmp_path / "serve.log").read_text()
    assert '"POST /v1/score HTTP/1.1" 401' in output and token not in output
