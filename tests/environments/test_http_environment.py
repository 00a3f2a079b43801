"""The http environment against a real HTTP server on 127.0.0.1 (no mock of httpx): each plan is POSTed, the answer
comes back as the run; transient failures are retried, and a request that still fails or an answer that breaks the
shape is a failed run with its cause, never a wrong answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchrm_dagster.contract import RunErrorKind, RunRecord
from orchrm_dagster.environments import PlanJob, execute_and_label, executor_for
from orchrm_dagster.orchestration import ExecutionSettings

PLAN = ("<thinking>Think first.</thinking>\n<agent><agent_id>1</agent_id><agent_name>CoTAgent</agent_name>"
        "<agent_description>Solve it.</agent_description><input></input></agent>\n<edge></edge>")
ANSWER = {"final_answer": "So the answer is <answer>42</answer>",
          "subagents": [{"agent_id": "1", "agent_name": "CoTAgent", "input": "What is 6 x 7?", "output": "6 x 7 = 42",
                         "prompt_tokens": 30, "completion_tokens": 12, "model": "team-model"},
                        {"agent_id": "2", "agent_name": "ReflexionAgent", "input": "6 x 7 = 42",
                         "output": "<answer>42</answer>", "prompt_tokens": 40, "completion_tokens": 5}]}
# what the server does at each hit: (status, JSON-able body or raw bytes, headers, seconds it waits first)
Reply = tuple[int, object, dict, float]


@dataclass
class Endpoint:
    """A local server answering every POST as `script(hit)` says (hit 1 first); it keeps each request body."""

    script: Callable[[int], Reply]
    bodies: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    @property
    def hits(self) -> int:
        return len(self.bodies)


@pytest.fixture
def endpoint():
    servers = []

    def start(script: Callable[[int], Reply]) -> Endpoint:
        served = Endpoint(script)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with served.lock:
                    served.bodies.append(body)
                    served.headers.append(dict(self.headers))
                    hit = served.hits
                status, answer, headers, delay = served.script(hit)
                time.sleep(delay)
                content = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    for name, value in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        served.url = f"http://127.0.0.1:{server.server_address[1]}/run"
        return served

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def ok(answer: object = ANSWER) -> Reply:
    return 200, answer, {}, 0.0


def execution(url: str, **http) -> ExecutionSettings:
    """The settings a user writes: `environment: http` and its section under `environment_settings`."""
    section = {"url": url, "timeout_s": 2.0, "max_retries": 2, "backoff_s": 0.01, **http}
    return ExecutionSettings(environment="http", environment_settings={"http": section})


def no_backend():
    raise AssertionError("the http environment must not build an LLM backend")


def run_one(url: str, job: PlanJob | None = None, **http):
    [result] = executor_for(execution(url, **http), no_backend).execute([job or JOB])
    return result


JOB = PlanJob("What is 6 x 7?", PLAN, "math", seed=7, reference="42")


def test_a_plan_executed_at_the_endpoint_comes_back_with_its_answer_and_trajectory(endpoint):
    served = endpoint(lambda hit: ok())
    choice_job = PlanJob("Which is prime?", PLAN, "choice", seed=3, choices=("4", "7"), reference="B")
    result = run_one(served.url)
    assert result.error is None and result.error_kind is None
    assert result.final_answer == ANSWER["final_answer"]
    assert [(c.agent_id, c.agent_name, c.input, c.output) for c in result.calls] == [
        (s["agent_id"], s["agent_name"], s["input"], s["output"]) for s in ANSWER["subagents"]]
    assert [c.model for c in result.calls] == ["team-model", served.url]  # a call naming no model: the endpoint
    assert (result.prompt_tokens, result.completion_tokens) == (70, 17)
    assert result.outputs == {"1": "6 x 7 = 42", "2": "<answer>42</answer>"}

    run_one(served.url, choice_job)
    first, second = served.bodies
    assert first == {"version": 1, "question": "What is 6 x 7?", "question_text": "What is 6 x 7?", "choices": None,
                     "plan": PLAN, "answer_type": "math", "seed": 7,
                     "execution": {"subagent_temperature": 0.0, "subagent_max_new_tokens": 192,
                                   "plan_timeout_s": 300.0}}
    assert second["choices"] == ["4", "7"] and "A. 4" in second["question_text"] and second["seed"] == 3
    assert set(second) == set(first)  # no reference answer: the system is never handed it


def test_tokens_the_answer_gives_replace_its_calls_sums(endpoint):
    served = endpoint(lambda hit: ok({**ANSWER, "tokens": {"subagent_prompt": 500, "subagent_completion": 60}}))
    result = run_one(served.url)
    assert (result.prompt_tokens, result.completion_tokens) == (500, 60)


def test_a_server_slower_than_timeout_s_is_a_failed_run_after_the_configured_retries(endpoint):
    served = endpoint(lambda hit: (200, ANSWER, {}, 1.0))
    started = time.perf_counter()
    result = run_one(served.url, timeout_s=0.2, max_retries=2)
    assert served.hits == 3  # the first attempt and 2 retries
    assert time.perf_counter() - started < 3
    assert result.error_kind == RunErrorKind.TIMEOUT and result.final_answer is None
    assert "timeout" in result.error and "0.2 s" in result.error and "after 3 attempts" in result.error
    [labeled] = execute_and_label([JOB], executor_for(execution(served.url, timeout_s=0.2, max_retries=0),
                                                      no_backend))
    assert labeled.correct is False and labeled.result.error is not None  # failed: its error says so


def test_a_500_is_retried_then_fails_with_its_status_and_a_503_then_200_succeeds(endpoint):
    failing = endpoint(lambda hit: (500, b"the team's system fell over", {}, 0.0))
    result = run_one(failing.url, max_retries=3)
    assert failing.hits == 4 and result.error_kind == RunErrorKind.AGENT_FAILED and result.final_answer is None
    assert "HTTP 500" in result.error and "fell over" in result.error and "after 4 attempts" in result.error

    # Retry-After is honoured: a backoff of a minute would otherwise fail the test's time
    recovering = endpoint(lambda hit: (503, b"busy", {"Retry-After": "0"}, 0.0) if hit == 1 else ok())
    started = time.perf_counter()
    result = run_one(recovering.url, backoff_s=60.0)
    assert recovering.hits == 2 and time.perf_counter() - started < 5
    assert result.error is None and result.final_answer == ANSWER["final_answer"]

    refused = endpoint(lambda hit: (400, b"no such agent", {}, 0.0))
    result = run_one(refused.url, max_retries=3)
    assert refused.hits == 1 and "HTTP 400" in result.error and "no such agent" in result.error  # never retried


def test_an_unreachable_endpoint_is_a_failed_run():
    result = run_one("http://127.0.0.1:1/run", max_retries=1)  # port 1: nothing listens
    assert result.error_kind == RunErrorKind.AGENT_FAILED and "unreachable" in result.error
    assert "after 2 attempts" in result.error


@pytest.mark.parametrize("answer, cause", [
    ({"subagents": ANSWER["subagents"]}, "response field 'final_answer' is missing"),
    ({"final_answer": None}, "response field 'final_answer' is null and no 'error' says why"),
    ({"final_answer": 42}, "response field 'final_answer': Input should be a valid string"),
    ({"final_answer": "42", "subagents": [{"agent_name": "CoTAgent"}]}, "response field 'subagents.0.agent_id' is "
                                                                        "missing"),
    ({"final_answer": "42", "subagents": [{"agent_id": "1", "prompt_tokens": "30"}]},
     "response field 'subagents.0.prompt_tokens': Input should be a valid integer"),
    ({"final_answer": "42", "trajectory": []}, "response field 'subagents' is missing"),
    ({"final_answer": "42", "tokens": {"subagents": 9}}, "'subagent_prompt' and 'subagent_completion'"),
    (b"<html>oops</html>", "the response is not JSON"),
    ([ANSWER], "the response must be a JSON object"),
])
def test_an_answer_that_breaks_the_shape_is_a_failed_run_naming_the_field(endpoint, answer, cause):
    served = endpoint(lambda hit: ok(answer))
    result = run_one(served.url)
    assert served.hits == 1  # a malformed answer is not retried
    assert result.final_answer is None and result.error_kind == RunErrorKind.AGENT_FAILED
    assert cause in result.error and result.error.startswith("http environment: ")


def test_an_error_the_system_reports_is_a_failed_run_of_its_kind_with_its_tokens(endpoint):
    served = endpoint(lambda hit: ok({"final_answer": None, "error": "agent 2 looped", "error_kind": "timeout",
                                      "subagents": ANSWER["subagents"][:1]}))
    result = run_one(served.url)
    assert result.error == "agent 2 looped" and result.error_kind == RunErrorKind.TIMEOUT
    assert (result.prompt_tokens, result.completion_tokens) == (30, 12)  # what it spent is counted
    served = endpoint(lambda hit: ok({"final_answer": None, "error": "bad plan", "error_kind": "plan_unparseable",
                                      "plan_error": "no_sink"}))
    result = run_one(served.url)
    assert result.error_kind == RunErrorKind.PLAN_UNPARSEABLE and result.plan_error == "no_sink"


def test_the_settings_a_user_writes_choose_the_http_executor_through_the_registry(endpoint, monkeypatch, tmp_path):
    from orchrm_dagster.orchestration import PlanSample, execute_samples

    served = endpoint(lambda hit: ok() if hit % 2 else (500, b"down", {}, 0.0))
    monkeypatch.setenv("TEAM_TOKEN", "s3cret")
    settings = execution(served.url, headers_env="TEAM_TOKEN", max_retries=0, concurrent_plans=1)
    executor = executor_for(settings, no_backend)
    assert type(executor).__name__ == "HttpExecutor" and executor.environment == "http"
    [right, wrong] = execute_and_label([JOB, PlanJob("What is 6 x 7?", PLAN, "math", seed=8, reference="41")],
                                       executor)
    assert right.correct and right.result.error is None
    assert not wrong.correct and wrong.result.error_kind == RunErrorKind.AGENT_FAILED  # the 500: failed, not wrong
    assert {h["Authorization"] for h in served.headers} == {"Bearer s3cret"}

    samples = [PlanSample(run_id=f"run-{i}", problem_id="p1", benchmark="gsm8k", question="What is 6 x 7?",
                          reference_answer="42", answer_type="math", policy_name="base", policy_kind="base",
                          policy_step=None, orchestrator_model="m", sample_index=i, seed=i, plan=PLAN,
                          plan_logprob=None, plan_parses=True, plan_error=None, plan_error_code=None,
                          plan_error_kind=None, grammar=True, orchestrator_prompt_tokens=10,
                          orchestrator_completion_tokens=20) for i in range(2)]
    report = execute_samples(samples, no_backend, tmp_path / "out.partial", settings)
    records = [json.loads(line) for line in (tmp_path / "out.partial").read_text().splitlines()]
    assert report.environment == "http" and report.failed == 1 and report.subagent_model == served.url
    by_error = {record["error"] is None: record for record in records}
    assert by_error[True]["final_answer"] == ANSWER["final_answer"] and len(by_error[True]["subagents"]) == 2
    assert by_error[True]["tokens"]["subagent_prompt"] == 70
    assert "HTTP 500" in by_error[False]["error"] and by_error[False]["meta"]["error_kind"] == "agent_failed"
    assert all(r["environment"] == "http" and r["meta"]["http_endpoint"] == served.url for r in records)
    for record in records:
        RunRecord.model_validate_json(json.dumps(record))  # each a valid contract record


def test_choosing_http_without_a_url_or_with_an_unset_token_variable_is_refused_clearly(monkeypatch):
    assert ExecutionSettings().environment_settings.http.url is None  # the default config is valid
    with pytest.raises(ValueError, match=r"needs a url: set environment_settings.http.url"):
        executor_for(ExecutionSettings(environment="http"), no_backend)
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    with pytest.raises(ValueError, match="headers_env names 'NO_SUCH_TOKEN', which is unset"):
        executor_for(execution("http://127.0.0.1:9/run", headers_env="NO_SUCH_TOKEN"), no_backend)
    with pytest.raises(ValueError, match="http:// or https://"):
        execution("ftp://example.org/run")
    named = executor_for(execution("https://team:pw@mas.example:8443/run?key=k"), no_backend)
    assert named.model_id == named.record_meta["http_endpoint"] == "https://mas.example:8443/run"  # no credentials
