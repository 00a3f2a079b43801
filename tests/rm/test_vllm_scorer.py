"""The vLLM pooling scorer's contract, against a fake /pooling server on loopback."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchrm_dagster.rm.score import RewardScorer
from orchrm_dagster.rm.template import encode
from orchrm_dagster.rm.vllm_scorer import VLLMPoolingScorer, pooled_score


def _fake_score(ids: list[int]) -> float:
    return sum(ids) % 997 / 100 + len(ids)


@pytest.fixture
def fake_vllm():
    """A /pooling server answering each input's score per token ([[s], ...], the last row the score), in reverse
    order of index; it records every request and answers 400 to model "broken"."""
    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            requests.append((self.path, body))
            if body["model"] == "broken":
                self.send_response(400)
                self.end_headers()
                self.wfile.write(b'{"error": "no such model"}')
                return
            data = [{"index": i, "object": "pooling", "data": [[0.0]] * (len(ids) - 1) + [[_fake_score(ids)]]}
                    for i, ids in enumerate(body["input"])]
            answer = json.dumps({"object": "list", "data": data[::-1]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    server.shutdown()
    server.server_close()


def test_scores_come_back_in_input_order_from_token_ids(fake_vllm, tiny_backbone):
    url, requests = fake_vllm
    questions = [f"question {i}" for i in range(7)]
    plans = ["<agent> step" * (1 + (i * 5) % 7) for i in range(7)]
    scorer = VLLMPoolingScorer(url, "rm", tiny_backbone, batch_size=3)
    scores, lengths = scorer.score_with_lengths(questions, plans)
    ids = encode(scorer.tokenizer, questions, plans, scorer.spec)
    assert scores == pytest.approx([_fake_score(row) for row in ids])
    assert lengths == [len(row) for row in ids] == RewardScorer(tiny_backbone, "cpu").score_with_lengths(
        questions, plans)[1]
    assert [path for path, _ in requests] == ["/pooling"] * 3  # 7 inputs, 3 a request
    assert all(body["model"] == "rm" and len(body["input"]) <= 3 for _, body in requests)
    assert sorted(row for _, body in requests for row in body["input"]) == sorted(ids)
    assert scorer.score([], []) == []


def test_a_refusal_names_the_server_and_its_answer(fake_vllm, tiny_backbone):
    url, _ = fake_vllm
    with pytest.raises(RuntimeError, match="answered 400.*no such model"):
        VLLMPoolingScorer(url, "broken", tiny_backbone).score(["q"], ["p"])


def test_pooled_outputs():
    assert pooled_score(1.5, 4) == 1.5
    assert pooled_score([1.5], 4) == 1.5
    assert pooled_score([0.1, 0.2, 0.3], 3) == 0.3
    assert pooled_score([[0.1], [0.2], [0.3]], 3) == 0.3
    with pytest.raises(ValueError, match="not one score"):
        pooled_score([0.1, 0.2], 3)
