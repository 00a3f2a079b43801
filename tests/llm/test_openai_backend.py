"""OpenAICompatibleBackend against a real HTTP server on 127.0.0.1 that speaks the chat-completions shape."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchrm_dagster.llm import ChatRequest, SamplingSettings
from orchrm_dagster.llm.openai_backend import OpenAICompatibleBackend


@dataclass
class Scripted:
    """One canned answer; requests beyond the script get the default echo answer."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


class FakeServer:
    def __init__(self):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.script: deque[Scripted] = deque()
        self.delay_for = lambda content: 0.0
        self.status_for = lambda content: 200
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def next_scripted(self) -> Scripted | None:
        with self._lock:
            return self.script.popleft() if self.script else None

    def record(self, body: dict, headers: dict) -> None:
        with self._lock:
            self.bodies.append(body)
            self.headers.append(headers)

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def echo_answer(body: dict) -> dict:
    content = body["messages"][-1]["content"]
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": f"echo: {content}"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": len(content.split()) + 5, "completion_tokens": 3,
                  "total_tokens": len(content.split()) + 8},
    }
    if body.get("logprobs"):
        answer["choices"][0]["logprobs"] = {"content": [{"token": t, "logprob": lp, "top_logprobs": []}
                                                        for t, lp in (("echo", -0.5), (":", -0.25), ("x", -1.0))]}
    return answer


def make_handler(server: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server.record(body, dict(self.headers))
            server.enter()
            try:
                self._answer(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)
            finally:
                server.leave()

        def _answer(self, body: dict) -> None:
            assert self.path == "/v1/chat/completions"
            content = body["messages"][-1]["content"]
            scripted = server.next_scripted() or Scripted(status=server.status_for(content))
            time.sleep(scripted.delay_s or server.delay_for(content))
            payload = json.dumps(echo_answer(body) if scripted.status == 200
                                 else {"error": {"message": f"status {scripted.status}"}}).encode()
            self.send_response(scripted.status)
            for name, value in scripted.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@pytest.fixture
def server():
    fake = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    fake.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield fake
    httpd.shutdown()
    httpd.server_close()


def backend_for(server: FakeServer, **kwargs) -> OpenAICompatibleBackend:
    kwargs.setdefault("backoff_s", 0.001)
    return OpenAICompatibleBackend(server.base_url, "test-model", **kwargs)


def ask(content: str, **kwargs) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": content},), **kwargs)


def test_texts_token_counts_and_logprobs(server):
    backend = backend_for(server, api_key="sk-test")
    first, second = backend.generate([ask("one two three", want_logprobs=True), ask("four")])
    assert first.error is None and first.text == "echo: one two three"
    assert (first.prompt_tokens, first.completion_tokens) == (8, 3)
    assert first.token_logprobs == (-0.5, -0.25, -1.0)
    assert second.text == "echo: four" and second.token_logprobs is None and second.finish_reason == "stop"
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert backend.model_id == "test-model"


def test_request_body_carries_sampling_and_grammar(server):
    grammar = 'root ::= "yes" | "no"'
    sampling = SamplingSettings(temperature=0.7, top_p=0.9, max_new_tokens=12, seed=5, stop=("\n\n",))
    [completion] = backend_for(server).generate([ask("q", sampling=sampling, want_logprobs=True, grammar=grammar)])
    assert completion.error is None
    [body] = server.bodies
    assert body["model"] == "test-model" and body["messages"] == [{"role": "user", "content": "q"}]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.7, 0.9, 12, 5)
    assert body["stop"] == ["\n\n"] and body["logprobs"] is True
    assert body["structured_outputs"] == {"grammar": grammar}
    assert body["guided_grammar"] == grammar


def test_no_grammar_no_seed_sends_no_extra_fields(server):
    backend_for(server).generate([ask("q")])
    assert not {"seed", "stop", "logprobs", "structured_outputs", "guided_grammar"} & set(server.bodies[0])


def test_order_preserved_under_concurrency(server):
    server.delay_for = lambda content: 0.02 * (16 - int(content))  # the first requests answer last
    requests = [ask(str(i)) for i in range(16)]
    completions = backend_for(server, max_concurrency=8).generate(requests)
    assert [c.text for c in completions] == [f"echo: {i}" for i in range(16)]
    assert server.max_in_flight > 1


def test_retries_after_two_503s(server):
    server.script.extend([Scripted(status=503), Scripted(status=503)])
    [completion] = backend_for(server).generate([ask("hello")])
    assert completion.error is None and completion.text == "echo: hello"
    assert len(server.bodies) == 3


def test_retry_after_honoured_on_429(server):
    server.script.append(Scripted(status=429, headers={"Retry-After": "0.3"}))
    started = time.monotonic()
    [completion] = backend_for(server, backoff_s=0.001).generate([ask("hello")])
    assert completion.error is None
    assert time.monotonic() - started >= 0.3
    assert len(server.bodies) == 2


def test_gives_up_after_max_retries(server):
    server.script.extend([Scripted(status=500)] * 3)
    [completion] = backend_for(server, max_retries=2).generate([ask("hello")])
    assert completion.finish_reason == "error" and "500" in completion.error
    assert len(server.bodies) == 3


def test_timeout_becomes_completion_error(server):
    server.script.extend([Scripted(delay_s=1.0)] * 2)
    [completion] = backend_for(server, timeout_s=0.2, max_retries=1).generate([ask("slow")])
    assert completion.finish_reason == "error" and completion.text == ""
    assert "Timeout" in completion.error
    assert len(server.bodies) == 2


def test_400_is_not_retried_and_spoils_only_its_request(server):
    server.status_for = lambda content: 400 if content == "bad" else 200
    bad, good = backend_for(server).generate([ask("bad"), ask("good")])
    assert bad.finish_reason == "error" and "400" in bad.error
    assert good.error is None and good.text == "echo: good"
    assert sorted(body["messages"][-1]["content"] for body in server.bodies) == ["bad", "good"]


def test_connect_error_becomes_completion_error():
    backend = OpenAICompatibleBackend("http://127.0.0.1:9/v1", "m", max_retries=1, backoff_s=0.001, timeout_s=2)
    [completion] = backend.generate([ask("anyone?")])
    assert completion.finish_reason == "error" and "Connect" in completion.error
