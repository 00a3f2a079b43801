"""Imported traces' labels and champion scores go back to the tool each came from: Langfuse scores on the trace,
LangSmith feedback on the root run, an OTLP span on the orchestrator's span; in each tool's documented request
bodies, over HTTP to a real local server standing in for the tool's API (paths, headers, bodies checked), or as files;
a re-export sends only what changed, and a refused request says the tool, URL, status and response text and keeps
the record of what was sent before it."""

from __future__ import annotations

import base64
import json
import shutil
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orchrm_dagster.contract import RM_SCORES
from orchrm_dagster.traces import (RunScore, ScoreExportFailed, ScoreExportSettings, destination, export_scores,
                                   imported_scores, langfuse_scores, langsmith_feedback, otlp_scores, read_trace_file,
                                   score_span_id)
from orchrm_dagster.traces.otlp import otlp_spans
from tests.conftest import drop

from .test_importers import FIXTURES, LANGFUSE_RUN, LANGSMITH_RUN, OTEL_RUN

SETTINGS = ScoreExportSettings()
OTEL_SPAN = "051581bf3cb55c13"  # the fixture's orchestrator span
SCORES = {OTEL_RUN["run_id"]: 0.81, LANGFUSE_RUN["run_id"]: 0.27, LANGSMITH_RUN["run_id"]: 0.64}
DOMAINS = {OTEL_RUN["run_id"]: "math", LANGFUSE_RUN["run_id"]: "qa", LANGSMITH_RUN["run_id"]: "math"}


def _run(**changes) -> RunScore:
    return RunScore(**{"run_id": "r-1", "trace_id": "lf-trace-1", "tool": "langfuse", "is_correct": True,
                       "labeler": "qa_em_f1", "label_source": "reference", "score": 0.27, "rm_version": 3,
                       "domain": "qa", **changes})


# ---------------------------------------------------------------- each tool's request bodies


def test_langfuse_gets_a_boolean_and_a_numeric_score_on_the_trace_with_ids_fixed_per_trace_and_name():
    label, score = langfuse_scores(_run(), SETTINGS)
    # POST /api/public/scores: traceId, name, value, dataType, comment, and an id (an upsert when sent again)
    assert label == {"id": label["id"], "traceId": "lf-trace-1", "name": "orchrm.label.is_correct", "value": 1,
                     "dataType": "BOOLEAN", "comment": "orchrm: correct by qa_em_f1 (against the reference answer)",
                     "metadata": {"orchrm_run_id": "r-1", "labeler": "qa_em_f1", "label_source": "reference"}}
    assert score == {"id": score["id"], "traceId": "lf-trace-1", "name": "orchrm.rm.score", "value": 0.27,
                     "dataType": "NUMERIC", "comment": "orchrm: the qa domain's champion reward model, v3",
                     "metadata": {"orchrm_run_id": "r-1", "rm_version": 3, "domain": "qa"}}
    uuid.UUID(label["id"]), uuid.UUID(score["id"])
    # a new label or a new champion's score keeps the id: Langfuse replaces the score, never adds a second
    later = langfuse_scores(_run(is_correct=False, score=0.9, rm_version=4), SETTINGS)
    assert [b["id"] for b in later] == [label["id"], score["id"]] and later[0]["value"] == 0
    assert langfuse_scores(_run(score=None, rm_version=None), SETTINGS) == [label]  # no champion's score: the label
    assert langfuse_scores(_run(trace_id="lf-trace-2"), SETTINGS)[0]["id"] != label["id"]


def test_langsmith_gets_feedback_on_the_root_run_whose_id_is_the_trace_id():
    label, score = langsmith_feedback(_run(tool="langsmith", trace_id=LANGSMITH_RUN["run_id"]), SETTINGS)
    source = {"type": "api", "metadata": {"source": "orchrm", "orchrm_run_id": "r-1"}}
    # POST /api/v1/feedback: run_id, key, score, value, comment, id, trace_id
    assert label == {"id": label["id"], "run_id": LANGSMITH_RUN["run_id"], "trace_id": LANGSMITH_RUN["run_id"],
                     "key": "orchrm.label.is_correct", "score": 1, "value": "correct",
                     "comment": "orchrm: correct by qa_em_f1 (against the reference answer)", "feedback_source": source}
    assert score == {"id": score["id"], "run_id": LANGSMITH_RUN["run_id"], "trace_id": LANGSMITH_RUN["run_id"],
                     "key": "orchrm.rm.score", "score": 0.27, "value": "v3 (qa)",
                     "comment": "orchrm: the qa domain's champion reward model, v3", "feedback_source": source}
    assert uuid.UUID(label["id"]) != uuid.UUID(score["id"])
    named = ScoreExportSettings(label_name="correctness", score_name="reward")
    assert [b["key"] for b in langsmith_feedback(_run(), named)] == ["correctness", "reward"]


def test_the_otlp_scores_read_back_by_the_importer_sit_on_the_imported_orchestrator_span():
    imported = read_trace_file(FIXTURES / "team.otlp.jsonl", "otel")[0].record
    meta = imported["meta"]
    run = _run(run_id=imported["run_id"], trace_id=meta["trace_id"], tool="otel", span_id=meta["trace_span_id"],
               labeler="math_verify", domain="math", score=0.81)
    document = otlp_scores([run], SETTINGS, now_ns=1_800_000_000_000_000_000)
    line = orjson.dumps(document)  # JSON as sent
    [(trace_id, span, problem, raw)] = list(otlp_spans(orjson.loads(line)))
    assert (trace_id, span.span_id, problem) == (OTEL_RUN["run_id"], OTEL_SPAN, None)
    assert span.attributes == {"orchrm.run_id": OTEL_RUN["run_id"], "orchrm.label.is_correct": True,
                               "orchrm.rm.score": 0.81, "orchrm.rm.version": 3, "orchrm.rm.domain": "math"}
    assert span.resource == {"service.name": "orchrm"}
    # the GenAI conventions' evaluation event, one per score
    events = [({a["key"]: next(iter(a["value"].values())) for a in e["attributes"]}, e["name"]) for e in raw["events"]]
    assert events == [
        ({"gen_ai.evaluation.name": "orchrm.label.is_correct", "gen_ai.evaluation.score.value": 1.0,
          "gen_ai.evaluation.score.label": "correct",
          "gen_ai.evaluation.explanation": "orchrm: correct by math_verify (against the reference answer)"},
         "gen_ai.evaluation.result"),
        ({"gen_ai.evaluation.name": "orchrm.rm.score", "gen_ai.evaluation.score.value": 0.81,
          "gen_ai.evaluation.score.label": "v3",
          "gen_ai.evaluation.explanation": "orchrm: the math domain's champion reward model, v3"},
         "gen_ai.evaluation.result")]
    # a run imported before its span was kept: a span of its own in its trace, the same at every export
    older = _run(tool="otel", trace_id=meta["trace_id"], span_id=None)
    assert score_span_id(older) == score_span_id(older) != OTEL_SPAN and len(score_span_id(older)) == 16


def test_each_tool_is_pushed_where_its_url_and_key_are_set_else_gets_files():
    assert destination("langfuse", SETTINGS, {"LANGFUSE_PUBLIC_KEY": "pk"}).url is None
    assert "LANGFUSE_HOST" in destination("langfuse", SETTINGS, {}).why_files
    langfuse = destination("langfuse", SETTINGS, {"LANGFUSE_HOST": "https://lf.example/", "LANGFUSE_PUBLIC_KEY": "pk",
                                                  "LANGFUSE_SECRET_KEY": "sk"})
    assert (langfuse.url, langfuse.auth) == ("https://lf.example/api/public/scores", ("pk", "sk"))
    assert destination("langsmith", SETTINGS, {"LANGSMITH_API_KEY": "k"}).why_files.startswith("no LangSmith endpoint")
    for endpoint in ("https://api.smith.langchain.com", "https://smith.example/api/v1/"):
        langsmith = destination("langsmith", ScoreExportSettings(langsmith_endpoint=endpoint),
                                {"LANGSMITH_API_KEY": "k"})
        assert langsmith.url == endpoint.rstrip("/").removesuffix("/api/v1") + "/api/v1/feedback"
        assert langsmith.headers == {"x-api-key": "k"}
    otel = destination("otel", SETTINGS, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
                                          "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b,tenant=t1"})
    assert (otel.url, otel.headers) == ("http://collector:4318/v1/traces", {"api-key": "a b", "tenant": "t1"})
    assert destination("otel", SETTINGS, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/custom"}).url == "http://c/custom"
    assert destination("otel", ScoreExportSettings(otlp_endpoint="http://lf/api/public/otel"), {}).url == \
        "http://lf/api/public/otel/v1/traces"


# ---------------------------------------------------------------- a root with imported, labeled, scored runs


def _scored_root(tmp_path, root):
    """The three fixtures' good traces imported as one batch, labeled, and scored by a champion of each domain (v1)."""
    from orchrm_dagster.ingest import ingest_files
    from orchrm_dagster.labels import label_batch
    from orchrm_dagster.storage import BatchFile, NewBatch, register_batches
    from tests.loop_roots import write_reward_model

    names = [drop(root, shutil.copy(FIXTURES / name, tmp_path / name))
             for name in ("team.otlp.jsonl", "team.langfuse.json", "team.langsmith.jsonl")]
    register_batches(root, [NewBatch("day-1", tuple(names), True)])
    ingest_files(root, "day-1", [BatchFile(n, root.landing_path(n), root.landed_file(n).fingerprint) for n in names])
    assert label_batch(root, "day-1", {}).labeled == 3
    write_reward_model(root, 1, 80, {"math": 40, "qa": 40})  # the real gate crowns it in every domain
    _write_scores(root, 1, SCORES)
    return root


def _write_scores(root, version: int, scores: dict[str, float]) -> None:
    """rm_scores as the scoring step writes them: the batch's runs, each scored by `version`."""
    ids = list(scores)
    table = pa.table({"batch_id": ["day-1"] * len(ids), "run_id": ids, "rm_version": [version] * len(ids),
                      "score": [scores[i] for i in ids], "tokens": [10] * len(ids)}, schema=RM_SCORES)
    path = Path(root.path("..", "scores.parquet"))
    pq.write_table(table, path)
    root.replace_batch("rm_scores", "day-1", [str(path)])


def _champions(version: int = 1) -> dict:
    return {"math": version, "qa": version, "choice": version}


def _domain_of(benchmark: str) -> str:
    from orchrm_dagster.rm import domain_of

    return domain_of(benchmark)


def _ledger(root) -> list[dict]:
    rows = pq.read_table(root.table_file("score_exports")).to_pylist()
    return sorted(((r["tool"], r["run_id"], r["is_correct"], r["rm_version"], r["domain"], r["score"]) for r in rows))


class _Recorder(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 standing in for the tools' APIs: it keeps each request, and answers `status` (a
    path prefix -> (status, text); 200 with `{}` else; 409 for a POST of a feedback id it has seen)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self.status: dict[str, tuple[int, str]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, method: str, path: str, body) -> tuple[int, str]:
        for prefix, answer in self.status.items():
            if path.startswith(prefix):
                return answer
        return 200, "{}"

    def of(self, prefix: str) -> list[dict]:
        return [r for r in self.requests if r["path"].startswith(prefix)]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx's client uses it

    def _answer(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = orjson.loads(data) if data else None
        self.server.requests.append({"method": self.command, "path": self.path, "body": body,
                                     "headers": {k.lower(): v for k, v in self.headers.items()}})
        status, text = self.server.answer(self.command, self.path, body)
        payload = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if text.startswith("{") else "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_POST = do_PATCH = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def api():
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _env(url: str) -> dict:
    return {"LANGFUSE_HOST": url, "LANGFUSE_PUBLIC_KEY": "pk-lf-1", "LANGFUSE_SECRET_KEY": "sk-lf-1",
            "LANGSMITH_ENDPOINT": url, "LANGSMITH_API_KEY": "ls-key", "OTEL_EXPORTER_OTLP_ENDPOINT": url + "/otel",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=team"}


def test_each_tool_gets_its_requests_over_http_and_a_re_export_sends_only_what_changed(tmp_path, storage_root, api):
    root = _scored_root(tmp_path, storage_root)
    runs = {r.run_id: r for r in imported_scores(root, _champions(), _domain_of)}
    assert {k: (r.tool, r.is_correct, r.score, r.rm_version, r.domain) for k, r in runs.items()} == {
        k: ({OTEL_RUN["run_id"]: "otel", LANGFUSE_RUN["run_id"]: "langfuse"}.get(k, "langsmith"), True, SCORES[k], 1,
            DOMAINS[k]) for k in SCORES}
    report = export_scores(root, SETTINGS, _champions(), _domain_of, env=_env(api.url))
    assert [(p.tool, p.pushed, p.runs, p.unchanged, p.requests) for p in report.tools] == [
        ("langfuse", True, 1, 0, 2), ("langsmith", True, 1, 0, 2), ("otel", True, 1, 0, 1)]

    langfuse = api.of("/api/public/scores")
    assert [r["method"] for r in langfuse] == ["POST", "POST"]
    basic = "Basic " + base64.b64encode(b"pk-lf-1:sk-lf-1").decode()  # public key : secret key
    assert {r["headers"]["authorization"] for r in langfuse} == {basic}
    assert [r["body"] for r in langfuse] == langfuse_scores(runs[LANGFUSE_RUN["run_id"]], SETTINGS)
    langsmith = api.of("/api/v1/feedback")
    assert [(r["method"], r["headers"]["x-api-key"]) for r in langsmith] == [("POST", "ls-key")] * 2
    assert [r["body"] for r in langsmith] == langsmith_feedback(runs[LANGSMITH_RUN["run_id"]], SETTINGS)
    assert {r["body"]["run_id"] for r in langsmith} == {LANGSMITH_RUN["meta"]["trace_id"]}
    [otel] = api.of("/otel")
    assert (otel["method"], otel["path"], otel["headers"]["content-type"], otel["headers"]["x-tenant"]) == \
        ("POST", "/otel/v1/traces", "application/json", "team")
    [(trace_id, span, _, _)] = list(otlp_spans(otel["body"]))
    assert (trace_id, span.span_id, span.attributes["orchrm.rm.score"]) == (OTEL_RUN["run_id"], OTEL_SPAN, 0.81)
    assert all(r["headers"]["content-type"] == "application/json" for r in api.requests)
    assert _ledger(root) == sorted((tool, run, True, 1, DOMAINS[run], SCORES[run]) for tool, run in (
        ("otel", OTEL_RUN["run_id"]), ("langfuse", LANGFUSE_RUN["run_id"]), ("langsmith", LANGSMITH_RUN["run_id"])))

    # nothing changed: nothing is sent
    sent = len(api.requests)
    again = export_scores(root, SETTINGS, _champions(), _domain_of, env=_env(api.url))
    assert [(p.runs, p.unchanged) for p in again.tools] == [(0, 1)] * 3 and len(api.requests) == sent

    # a new champion scored the runs again: its scores replace the old ones (Langfuse: the same ids, upserted;
    # LangSmith: the feedback updated in place)
    _write_scores(root, 2, {run: score / 2 for run, score in SCORES.items()})
    export_scores(root, SETTINGS, _champions(2), _domain_of, env=_env(api.url))
    changed = api.requests[sent:]
    assert [(r["method"], r["path"].split("/")[-1] if "feedback/" in r["path"] else r["path"]) for r in changed] == [
        ("POST", "/api/public/scores"), ("POST", "/api/public/scores"),
        ("PATCH", langsmith[0]["body"]["id"]), ("PATCH", langsmith[1]["body"]["id"]), ("POST", "/otel/v1/traces")]
    assert [r["body"]["id"] for r in changed[:2]] == [r["body"]["id"] for r in langfuse]
    assert changed[1]["body"]["value"] == 0.135 and changed[1]["body"]["metadata"]["rm_version"] == 2
    assert changed[3]["body"] == {"score": 0.32, "value": "v2 (math)",
                                  "comment": "orchrm: the math domain's champion reward model, v2"}
    assert {row[3] for row in _ledger(root)} == {2}

    # a champion not yet scoring the runs: the label alone, the stale score not sent as the champion's
    stale = imported_scores(root, _champions(3), _domain_of)
    assert {(r.is_correct, r.score, r.rm_version) for r in stale} == {(True, None, None)}


def test_a_refused_request_names_tool_url_status_and_text_and_what_was_sent_before_it_is_kept(tmp_path, storage_root,
                                                                                               api):
    root = _scored_root(tmp_path, storage_root)
    api.status["/api/v1/feedback"] = (403, "Forbidden: the API key has no write access to this workspace")
    with pytest.raises(ScoreExportFailed) as failed:
        export_scores(root, SETTINGS, _champions(), _domain_of, env=_env(api.url))
    assert str(failed.value) == (f"langsmith: POST {api.url}/api/v1/feedback answered 403 Forbidden: Forbidden: the "
                                 "API key has no write access to this workspace")
    assert [row[:2] for row in _ledger(root)] == [("langfuse", LANGFUSE_RUN["run_id"])]  # sent before it: recorded
    del api.status["/api/v1/feedback"]
    sent = len(api.requests)
    report = export_scores(root, SETTINGS, _champions(), _domain_of, env=_env(api.url))
    assert [(p.tool, p.runs, p.unchanged) for p in report.tools] == [("langfuse", 0, 1), ("langsmith", 1, 0),
                                                                     ("otel", 1, 0)]
    assert [r["path"] for r in api.requests[sent:]] == ["/api/v1/feedback"] * 2 + ["/otel/v1/traces"]
    # an OTLP endpoint that rejects spans in a 200 (partial success) is a failure too; one that cannot be reached
    api.status["/otel"] = (200, '{"partialSuccess": {"rejectedSpans": "1", "errorMessage": "span too old"}}')
    _write_scores(root, 1, {**SCORES, OTEL_RUN["run_id"]: 0.5})
    with pytest.raises(ScoreExportFailed, match=r"^otel: POST .*/otel/v1/traces rejected 1 span\(s\): span too old$"):
        export_scores(root, SETTINGS, _champions(), _domain_of, env=_env(api.url))
    closed = ScoreExportSettings(otlp_endpoint="http://127.0.0.1:9", tools=("otel",))
    with pytest.raises(ScoreExportFailed, match=r"^otel: POST http://127.0.0.1:9/v1/traces failed: ConnectError"):
        export_scores(root, closed, _champions(), _domain_of, env={})


def test_export_scores_writes_each_tools_bodies_as_files_without_urls_and_records_them(tmp_path, storage_root,
                                                                                        monkeypatch):
    from orchrm_dagster.app.cli import main

    root = _scored_root(tmp_path, storage_root)
    for name in ("LANGFUSE_HOST", "LANGSMITH_ENDPOINT", "LANGCHAIN_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["export-scores", "--out", str(out), "--tool", "langfuse,otel"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    files = sorted(out.iterdir())
    assert [f.name.split("-2")[0] for f in files] == ["langfuse-scores", "otel-scores"]
    assert files[1].name.endswith(".otlp.jsonl")
    runs = {r.tool: r for r in imported_scores(root, _champions(), _domain_of)}
    assert [orjson.loads(line) for line in files[0].read_bytes().splitlines()] == langfuse_scores(runs["langfuse"],
                                                                                                  SETTINGS)
    [document] = [orjson.loads(line) for line in files[1].read_bytes().splitlines()]
    assert [span.span_id for _, span, _, _ in otlp_spans(document)] == [OTEL_SPAN]
    assert "2 imported run(s) with a label or a champion's score" in result.output  # of the tools asked for
    listed = CliRunner().invoke(main, ["query", "--format", "json",
                                       "select tool, run_id, destination from score_exports order by tool"])
    assert json.loads(listed.output) == [
        {"tool": "langfuse", "run_id": LANGFUSE_RUN["run_id"], "destination": str(out)},
        {"tool": "otel", "run_id": OTEL_RUN["run_id"], "destination": str(out)}]
    # again: nothing new
    again = CliRunner().invoke(main, ["export-scores", "--out", str(out)], catch_exceptions=False)
    assert again.exit_code == 0 and len(list(out.iterdir())) == 3  # only LangSmith's, not sent before


def test_the_scoring_step_exports_after_it_scores_when_the_settings_say_so(tmp_path, storage_root, monkeypatch):
    from orchrm_dagster.app.cli import main

    root = _scored_root(tmp_path, storage_root)  # scored by the champion already: the step scores nothing again
    out = tmp_path / "exported"
    settings = tmp_path / "orchrm.yaml"
    settings.write_text(f"ingest:\n  traces:\n    export_scores:\n      after_scoring: true\n      out_dir: {out}\n")
    monkeypatch.setenv("ORCHRM_CONFIG", str(settings))
    result = CliRunner().invoke(main, ["materialize", "rm_scores"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert sorted(f.name.split("-2")[0] for f in out.iterdir()) == ["langfuse-scores", "langsmith-feedback",
                                                                   "otel-scores"]
    assert [row[:2] for row in _ledger(root)] == sorted(
        [("langfuse", LANGFUSE_RUN["run_id"]), ("langsmith", LANGSMITH_RUN["run_id"]), ("otel", OTEL_RUN["run_id"])])
