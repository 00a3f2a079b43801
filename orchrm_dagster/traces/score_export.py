"""Scores back in the team's tool: each imported run's correctness label (`labels`) and its champion's score
(`rm_scores`, with the version and the domain) sent to the tool its trace came from, in the form the tool ingests.

- Langfuse: two scores on the trace, `POST {host}/api/public/scores` (basic auth: public key, secret key), one body
  `{id, traceId, name, value, dataType, comment, metadata}` each: the label a BOOLEAN (1 / 0), the champion's score a
  NUMERIC. Their ids are fixed per (trace, name): Langfuse upserts a score sent again by its id, so a new label or a
  new champion's score replaces the old one.
- LangSmith: two feedbacks on the trace's root run (its id is the trace id), `POST {endpoint}/api/v1/feedback`
  (header `x-api-key`), `{id, run_id, trace_id, key, score, value, comment, feedback_source}` each; their ids are
  fixed per (trace, key) too, and a feedback this destination got before is updated in place
  (`PATCH .../feedback/{id}`), as is one the API says exists already (409).
- OpenTelemetry: OTLP JSON, `POST {endpoint}/v1/traces`: a span with the imported orchestrator span's trace id and
  span id (`meta.trace_span_id`; a run imported before it was kept gets a span of its own in its trace) carrying the
  label and the score as attributes (`orchrm.label.is_correct`, `orchrm.rm.score`, `orchrm.rm.version`,
  `orchrm.rm.domain`), and a `gen_ai.evaluation.result` event each (the GenAI conventions' evaluation event:
  `gen_ai.evaluation.name`, `.score.value`, `.score.label`, `.explanation`).

A tool whose URL and key are not both set gets files instead, one line a request body (OTLP: a document a line), in
`out_dir` (default `exports/scores/` under the storage root). What was sent is recorded in the `score_exports` table,
one row per (run, tool, destination) with a fingerprint of what was sent; the next export sends only the runs whose
label or score changed (or that are new), and a failing request stops the export with the tool, URL, status and
response text, what was sent before it recorded. No Dagster here: `orchrm export-scores` and the scoring step call
`export_scores`.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson

from orchrm_dagster.contract import SCORE_EXPORTS
from orchrm_dagster.storage import StorageRoot, root_lock, writing
from orchrm_dagster.traces.otlp import otlp_attributes
from orchrm_dagster.traces.settings import EXPORT_TOOLS, ScoreExportSettings

LEDGER = "score_exports"  # the table of what was sent (contract.SCORE_EXPORTS), and its root lock's name
# score and feedback ids are uuid5s in this namespace: a run's score has the same id at every export
ID_NAMESPACE = uuid.UUID("6d1f4f5e-3c0b-5d8e-9a51-0c2b7e4d9f13")
SCOPE = "orchrm_dagster.traces.score_export"
EVALUATION_EVENT = "gen_ai.evaluation.result"  # GenAI semantic conventions: an evaluation of the span's output
RM_VERSION_ATTRIBUTE = "orchrm.rm.version"
RM_DOMAIN_ATTRIBUTE = "orchrm.rm.domain"
_SHOWN_RESPONSE_CHARS = 1000


class ScoreExportFailed(RuntimeError):
    """A tool refused (or could not be reached by) a request: which tool, the URL, the status and the response."""


@dataclass(frozen=True)
class RunScore:
    """What goes back for one imported run: where its trace is, its label and its champion's score (None: none)."""

    run_id: str
    trace_id: str
    tool: str  # the run's trace format: langfuse | langsmith | otel
    span_id: str | None = None  # the orchestrator's span as imported (meta.trace_span_id)
    started_ns: int = 0  # the run's created_at
    is_correct: bool | None = None
    labeler: str | None = None
    label_source: str | None = None
    label_reason: str | None = None
    score: float | None = None
    rm_version: int | None = None
    domain: str | None = None

    def fingerprint(self, settings: ScoreExportSettings) -> str:
        """Of what is sent: a run whose label, score, champion or names change is sent again."""
        sent = [self.trace_id, self.span_id, self.is_correct, self.score, self.rm_version, self.domain,
                settings.label_name, settings.score_name]
        return hashlib.blake2b(orjson.dumps(sent), digest_size=8).hexdigest()

    @property
    def verdict(self) -> str:
        return "correct" if self.is_correct else "incorrect"


@dataclass
class ToolExport:
    """One tool's part of an export."""

    tool: str
    destination: str  # the URL posted to, or the folder the files went to
    pushed: bool
    runs: int = 0  # sent now (new, or changed since they were sent)
    unchanged: int = 0  # sent before as they are now: not sent again
    requests: int = 0
    files: list[str] = field(default_factory=list)
    why_files: str | None = None  # why it got files, not requests


@dataclass
class ExportReport:
    tools: list[ToolExport] = field(default_factory=list)
    imported: int = 0  # imported runs with a label or a champion's score
    without_score: int = 0  # of those, runs without a score of their domain's champion (none, or not scored yet)


# ---------------------------------------------------------------- what goes back

def imported_scores(root: StorageRoot, champions: Mapping[str, int] | None = None,
                    domain_of: Callable[[str], str] | None = None,
                    tools: Sequence[str] = EXPORT_TOOLS) -> list[RunScore]:
    """Each run imported from a trace of `tools` with a label or a score, in run_id order: its label (`labels`) and
    its score (`rm_scores`) when that is the score of its domain's champion (`champions`: domain -> version; None:
    whatever scored it). Its domain: `domain_of(benchmark)` (the reward model's), else its label's answer type."""
    import polars as pl

    from orchrm_dagster.storage import scan_table

    meta = pl.col("meta")
    runs = (scan_table(root, "runs").select("run_id", "benchmark", "meta", "created_at")
            .with_columns(meta.str.json_path_match("$.trace_format").alias("tool"),
                          meta.str.json_path_match("$.trace_id").alias("trace_id"),
                          meta.str.json_path_match("$.trace_span_id").alias("span_id"),
                          pl.col("created_at").dt.epoch("ns").alias("started_ns"))
            .filter(pl.col("tool").is_in(list(tools)) & pl.col("trace_id").is_not_null())
            .unique("run_id", keep="first").drop("meta", "created_at"))
    labels = (scan_table(root, "labels")
              .select("run_id", "is_correct", "labeler", "label_source", pl.col("reason").alias("label_reason"),
                      "answer_type")
              .join(runs.select("run_id"), on="run_id", how="semi").unique("run_id", keep="last"))
    scores = (scan_table(root, "rm_scores").select("run_id", "rm_version", "score")
              .join(runs.select("run_id"), on="run_id", how="semi").unique("run_id", keep="last"))
    joined = (runs.join(labels, on="run_id", how="left").join(scores, on="run_id", how="left")
              .sort("run_id").collect())
    found = []
    domains: dict[str, str] = {}  # domain_of once per benchmark: it reads the settings file's answer types
    for row in joined.iter_rows(named=True):
        benchmark = row["benchmark"]
        if domain_of is not None and benchmark and benchmark not in domains:
            domains[benchmark] = domain_of(benchmark)
        domain = domains[benchmark] if domain_of is not None and benchmark else row["answer_type"]
        scored = row["score"] is not None and (champions is None or champions.get(domain) == row["rm_version"])
        if row["is_correct"] is None and not scored:
            continue
        found.append(RunScore(
            run_id=row["run_id"], trace_id=row["trace_id"], tool=row["tool"], span_id=row["span_id"],
            started_ns=row["started_ns"] or 0, is_correct=row["is_correct"], labeler=row["labeler"],
            label_source=row["label_source"], label_reason=row["label_reason"],
            score=row["score"] if scored else None, rm_version=row["rm_version"] if scored else None,
            domain=domain))
    return found


_LABEL_SOURCES = {"reference": " (against the reference answer)", "run": " (the run's own verdict)"}


def label_comment(run: RunScore) -> str:
    """`orchrm: correct by math (against the reference answer): <the labeler's reason>`."""
    return (f"orchrm: {run.verdict}" + (f" by {run.labeler}" if run.labeler else "")
            + _LABEL_SOURCES.get(run.label_source or "", "") + (f": {run.label_reason}" if run.label_reason else ""))


def score_comment(run: RunScore) -> str:
    return f"orchrm: the {run.domain} domain's champion reward model, v{run.rm_version}"


def _score_id(tool: str, trace_id: str, name: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"{tool}:{trace_id}:{name}"))


def langfuse_scores(run: RunScore, settings: ScoreExportSettings) -> list[dict]:
    """The bodies of `POST /api/public/scores` for one run: its label (BOOLEAN) and its champion's score (NUMERIC)."""
    bodies = []
    if run.is_correct is not None:
        bodies.append({"id": _score_id("langfuse", run.trace_id, settings.label_name), "traceId": run.trace_id,
                       "name": settings.label_name, "value": 1 if run.is_correct else 0, "dataType": "BOOLEAN",
                       "comment": label_comment(run),
                       "metadata": _dropped_none({"orchrm_run_id": run.run_id, "labeler": run.labeler,
                                                  "label_source": run.label_source})})
    if run.score is not None:
        bodies.append({"id": _score_id("langfuse", run.trace_id, settings.score_name), "traceId": run.trace_id,
                       "name": settings.score_name, "value": run.score, "dataType": "NUMERIC",
                       "comment": score_comment(run),
                       "metadata": {"orchrm_run_id": run.run_id, "rm_version": run.rm_version,
                                    "domain": run.domain}})
    return bodies


def langsmith_feedback(run: RunScore, settings: ScoreExportSettings) -> list[dict]:
    """The bodies of `POST /api/v1/feedback` for one run, on its trace's root run: its label (score 1 / 0, value
    correct / incorrect) and its champion's score (value: the version and domain)."""
    source = {"type": "api", "metadata": {"source": "orchrm", "orchrm_run_id": run.run_id}}
    bodies = []
    if run.is_correct is not None:
        bodies.append({"id": _score_id("langsmith", run.trace_id, settings.label_name), "run_id": run.trace_id,
                       "trace_id": run.trace_id, "key": settings.label_name, "score": 1 if run.is_correct else 0,
                       "value": run.verdict, "comment": label_comment(run), "feedback_source": source})
    if run.score is not None:
        bodies.append({"id": _score_id("langsmith", run.trace_id, settings.score_name), "run_id": run.trace_id,
                       "trace_id": run.trace_id, "key": settings.score_name, "score": run.score,
                       "value": f"v{run.rm_version} ({run.domain})", "comment": score_comment(run),
                       "feedback_source": source})
    return bodies


def otlp_scores(runs: Iterable[RunScore], settings: ScoreExportSettings, now_ns: int | None = None) -> dict:
    """One OTLP JSON document (`POST /v1/traces`'s body) holding each run's scores on its orchestrator's span."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    return {"resourceSpans": [{
        "resource": {"attributes": otlp_attributes({"service.name": "orchrm"})},
        "scopeSpans": [{"scope": {"name": SCOPE}, "spans": [_score_span(run, settings, now_ns) for run in runs]}],
    }]}


def score_span_id(run: RunScore) -> str:
    """The span the scores go on: the orchestrator's as imported, else (a run imported before its span was kept)
    one of its own, the same at every export."""
    if run.span_id and len(run.span_id) == 16 and all(c in "0123456789abcdef" for c in run.span_id):
        return run.span_id
    return hashlib.blake2b(f"orchrm-scores:{run.run_id}".encode(), digest_size=8).hexdigest()


def _score_span(run: RunScore, settings: ScoreExportSettings, now_ns: int) -> dict:
    attributes: dict[str, Any] = {"orchrm.run_id": run.run_id}
    events = []
    if run.is_correct is not None:
        attributes[settings.label_name] = run.is_correct
        events.append(_evaluation(now_ns, settings.label_name, 1.0 if run.is_correct else 0.0, run.verdict,
                                  label_comment(run)))
    if run.score is not None:
        attributes |= {settings.score_name: run.score, RM_VERSION_ATTRIBUTE: run.rm_version,
                       RM_DOMAIN_ATTRIBUTE: run.domain}
        events.append(_evaluation(now_ns, settings.score_name, run.score, f"v{run.rm_version}", score_comment(run)))
    start = str(run.started_ns or now_ns)
    return {"traceId": run.trace_id, "spanId": score_span_id(run), "parentSpanId": "", "name": "orchrm.scores",
            "kind": 1, "startTimeUnixNano": start, "endTimeUnixNano": start,
            "attributes": otlp_attributes(attributes), "events": events, "status": {}}


def _evaluation(now_ns: int, name: str, value: float, label: str, explanation: str) -> dict:
    return {"timeUnixNano": str(now_ns), "name": EVALUATION_EVENT, "attributes": otlp_attributes({
        "gen_ai.evaluation.name": name, "gen_ai.evaluation.score.value": float(value),
        "gen_ai.evaluation.score.label": label, "gen_ai.evaluation.explanation": explanation})}


def _dropped_none(values: dict) -> dict:
    return {key: value for key, value in values.items() if value is not None}


# ---------------------------------------------------------------- where it goes

@dataclass(frozen=True)
class Destination:
    tool: str
    url: str | None  # the endpoint requests go to; None: files
    headers: dict[str, str] = field(default_factory=dict)
    auth: tuple[str, str] | None = None
    why_files: str | None = None


def destination(tool: str, settings: ScoreExportSettings, env: Mapping[str, str]) -> Destination:
    """Where `tool`'s scores go: its API, where its URL (the setting, else the tool's own environment variable) and
    its key (the environment's) are both set; else files, and why."""
    if tool == "langfuse":
        host = settings.langfuse_host or env.get("LANGFUSE_HOST") or env.get("LANGFUSE_BASE_URL")
        public, secret = env.get("LANGFUSE_PUBLIC_KEY"), env.get("LANGFUSE_SECRET_KEY")
        if not host:
            return Destination(tool, None, why_files="no Langfuse host (export_scores.langfuse_host, LANGFUSE_HOST)")
        if not (public and secret):
            return Destination(tool, None, why_files="LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are not both set")
        return Destination(tool, host.rstrip("/") + "/api/public/scores", auth=(public, secret))
    if tool == "langsmith":
        endpoint = settings.langsmith_endpoint or env.get("LANGSMITH_ENDPOINT") or env.get("LANGCHAIN_ENDPOINT")
        key = env.get("LANGSMITH_API_KEY") or env.get("LANGCHAIN_API_KEY")
        if not endpoint:
            return Destination(tool, None, why_files="no LangSmith endpoint (export_scores.langsmith_endpoint, "
                                                     "LANGSMITH_ENDPOINT)")
        if not key:
            return Destination(tool, None, why_files="LANGSMITH_API_KEY is not set")
        base = endpoint.rstrip("/")
        return Destination(tool, base + ("/feedback" if base.endswith("/api/v1") else "/api/v1/feedback"),
                           headers={"x-api-key": key})
    if tool == "otel":
        headers = _otlp_headers(env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS"))
        if settings.otlp_endpoint:
            url = _traces_url(settings.otlp_endpoint)
        elif env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):  # the signal's own: its full URL (the OTLP exporter spec)
            url = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            url = _traces_url(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        else:
            return Destination(tool, None, why_files="no OTLP endpoint (export_scores.otlp_endpoint, "
                                                     "OTEL_EXPORTER_OTLP_ENDPOINT)")
        return Destination(tool, url, headers=headers)
    raise ValueError(f"unknown tool {tool!r}: one of {', '.join(EXPORT_TOOLS)}")


def _traces_url(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def _otlp_headers(text: str | None) -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_HEADERS: `key=value` pairs, comma-separated, values URL-encoded."""
    found = {}
    for pair in (text or "").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            found[key.strip()] = unquote(value.strip())
    return found


# ---------------------------------------------------------------- the export

def export_scores(root: StorageRoot, settings: ScoreExportSettings = ScoreExportSettings(),
                  champions: Mapping[str, int] | None = None, domain_of: Callable[[str], str] | None = None,
                  env: Mapping[str, str] | None = None, out_dir: str | None = None,
                  on_tool: Callable[[ToolExport], None] | None = None) -> ExportReport:
    """Sends each imported run's label and champion's score (`imported_scores`) that this destination has not got
    as it is now to its tool (`destination`: the API, or files in `out_dir`, else `settings.out_dir`, else
    exports/scores under the root), and records what was sent in `score_exports`. ScoreExportFailed when a tool
    refuses a request (or cannot be reached): what was sent before it is recorded, the next export sends the rest.
    One export at a time per root (its lock)."""
    import httpx

    env = os.environ if env is None else env
    report = ExportReport()
    with root_lock(root, LEDGER, timeout_s=120):
        runs = imported_scores(root, champions, domain_of, settings.tools)
        report.imported = len(runs)
        report.without_score = sum(1 for run in runs if run.score is None)
        ledger = _Ledger(root)
        try:
            with httpx.Client(timeout=settings.timeout_s) as client:
                for tool in settings.tools:
                    mine = [run for run in runs if run.tool == tool]
                    where = destination(tool, settings, env)
                    part = ToolExport(tool, where.url or _folder_uri(root, settings, out_dir), where.url is not None,
                                      why_files=where.why_files)
                    report.tools.append(part)
                    due = [run for run in mine
                           if ledger.fingerprint(run.run_id, tool, part.destination) != run.fingerprint(settings)]
                    part.unchanged = len(mine) - len(due)
                    if due and where.url is not None:
                        _push(client, where, due, settings, ledger, part)
                    elif due:
                        _write_files(root, settings, out_dir, tool, due, ledger, part)
                    if on_tool is not None:
                        on_tool(part)
        finally:
            ledger.save()
    return report


def _push(client, where: Destination, runs: list[RunScore], settings: ScoreExportSettings, ledger: _Ledger,
          part: ToolExport) -> None:
    """An OTLP request per `batch_size` runs, recorded once it is accepted; a Langfuse or LangSmith run's requests
    one by one (their scores and feedback endpoints take one each), the run recorded once its last is accepted."""
    if where.tool == "otel":
        for chunk in _chunks(runs, settings.batch_size):
            _check_otlp(where, _request(client, where, "POST", where.url, otlp_scores(chunk, settings)))
            part.requests += 1
            ledger.record(chunk, where.tool, where.url, settings)
            part.runs += len(chunk)
        return
    bodies_of = langfuse_scores if where.tool == "langfuse" else langsmith_feedback
    for run in runs:
        before = ledger.fingerprint(run.run_id, where.tool, where.url) is not None
        for body in bodies_of(run, settings):
            part.requests += _send_one(client, where, body, before)
        ledger.record([run], where.tool, where.url, settings)
        part.runs += 1


def _send_one(client, where: Destination, body: dict, sent_before: bool) -> int:
    """One score (Langfuse: upserted by its id) or feedback (LangSmith: created, or updated where this destination
    got it before or the API says it exists); returns the requests made."""
    if where.tool == "langfuse":
        _ok(where, "POST", where.url, _request(client, where, "POST", where.url, body))
        return 1
    update = {key: body[key] for key in ("score", "value", "comment")}
    item = f"{where.url}/{body['id']}"
    if sent_before:
        response = _request(client, where, "PATCH", item, update)
        if response.status_code != 404:  # 404: gone (deleted in LangSmith): created again
            _ok(where, "PATCH", item, response)
            return 1
    response = _request(client, where, "POST", where.url, body)
    if response.status_code == 409:  # it exists (sent by an export whose record was lost): updated
        _ok(where, "PATCH", item, _request(client, where, "PATCH", item, update))
        return 2
    _ok(where, "POST", where.url, response)
    return 1


def _request(client, where: Destination, method: str, url: str, body: dict):
    import httpx

    headers = {"Content-Type": "application/json", **where.headers}
    try:
        return client.request(method, url, content=orjson.dumps(body), headers=headers, auth=where.auth)
    except httpx.HTTPError as err:
        raise ScoreExportFailed(f"{where.tool}: {method} {url} failed: {type(err).__name__}: {err}") from err


def _ok(where: Destination, method: str, url: str, response) -> None:
    if not response.is_success:
        text = response.text
        shown = text[:_SHOWN_RESPONSE_CHARS] + ("..." if len(text) > _SHOWN_RESPONSE_CHARS else "")
        raise ScoreExportFailed(f"{where.tool}: {method} {url} answered {response.status_code} "
                                f"{response.reason_phrase}: {shown or '(no body)'}")


def _check_otlp(where: Destination, response) -> None:
    """A 2xx whose `partialSuccess` rejected spans is a failure too (the OTLP/HTTP spec's partial success)."""
    _ok(where, "POST", where.url, response)
    try:
        answer = response.json()
    except ValueError:  # an empty or non-JSON body: accepted
        return
    partial = (answer.get("partialSuccess") or {}) if isinstance(answer, dict) else {}
    rejected = int(partial.get("rejectedSpans") or 0) if isinstance(partial, dict) else 0
    if rejected:
        raise ScoreExportFailed(f"{where.tool}: POST {where.url} rejected {rejected} span(s): "
                                f"{partial.get('errorMessage') or '(no message)'}")


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# ---------------------------------------------------------------- files

def _folder(root: StorageRoot, settings: ScoreExportSettings, out_dir: str | None):
    """(file system, folder path) the files go to."""
    chosen = out_dir or settings.out_dir
    if chosen is None:
        return root.fs, root.path("exports", "scores")
    if "://" not in chosen:
        import fsspec

        return fsspec.filesystem("file"), str(Path(chosen).expanduser().resolve())
    import fsspec

    return fsspec.core.url_to_fs(chosen)


def _folder_uri(root: StorageRoot, settings: ScoreExportSettings, out_dir: str | None) -> str:
    return _uri(*_folder(root, settings, out_dir))


def _uri(fs, path: str) -> str:
    """A path of `fs` as a person finds it: a local path as it is, a remote one with its protocol."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if protocol in ("file", "local") else f"{protocol}://{path}"


FILE_NAMES = {"langfuse": "langfuse-scores-{stamp}.jsonl", "langsmith": "langsmith-feedback-{stamp}.jsonl",
              "otel": "otel-scores-{stamp}.otlp.jsonl"}


def _write_files(root: StorageRoot, settings: ScoreExportSettings, out_dir: str | None, tool: str,
                 runs: list[RunScore], ledger: _Ledger, part: ToolExport) -> None:
    """One file of the tool's request bodies, a line each (OTLP: a document of `batch_size` spans a line)."""
    if tool == "otel":
        lines = [orjson.dumps(otlp_scores(chunk, settings)) for chunk in _chunks(runs, settings.batch_size)]
    else:
        bodies = langfuse_scores if tool == "langfuse" else langsmith_feedback
        lines = [orjson.dumps(body) for run in runs for body in bodies(run, settings)]
    fs, folder = _folder(root, settings, out_dir)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
    path = f"{folder}/{FILE_NAMES[tool].format(stamp=stamp)}"
    with writing(f"the {tool} scores", path):
        fs.makedirs(folder, exist_ok=True)
        fs.pipe_file(path, b"".join(line + b"\n" for line in lines))
    part.files.append(_uri(fs, path))
    ledger.record(runs, tool, part.destination, settings)
    part.runs += len(runs)


# ---------------------------------------------------------------- what was sent

class _Ledger:
    """The `score_exports` table: (run, tool, destination) -> what was sent last; rewritten whole when saved (at the
    end of an export, failed or not, and every `SAVE_EVERY_S` seconds of a long one, so that a killed export sends
    again at most that much)."""

    SAVE_EVERY_S = 30.0

    def __init__(self, root: StorageRoot):
        self.root, self.path = root, root.table_file(LEDGER)
        self.rows: dict[tuple[str, str, str], dict] = {}
        self.changed = False
        self.saved_at = time.monotonic()
        if root.exists(self.path):
            for row in root.read_table(self.path).cast(SCORE_EXPORTS).to_pylist():
                self.rows[(row["run_id"], row["tool"], row["destination"])] = row

    def fingerprint(self, run_id: str, tool: str, where: str) -> str | None:
        row = self.rows.get((run_id, tool, where))
        return None if row is None else row["fingerprint"]

    def record(self, runs: Iterable[RunScore], tool: str, where: str, settings: ScoreExportSettings) -> None:
        now = datetime.now(timezone.utc)
        for run in runs:
            self.rows[(run.run_id, tool, where)] = {
                "run_id": run.run_id, "trace_id": run.trace_id, "tool": tool, "destination": where,
                "is_correct": run.is_correct, "rm_version": run.rm_version, "domain": run.domain, "score": run.score,
                "fingerprint": run.fingerprint(settings), "exported_at": now}
        self.changed = True
        if time.monotonic() - self.saved_at > self.SAVE_EVERY_S:
            self.save()

    def save(self) -> None:
        if not self.changed:
            return
        import pyarrow as pa

        table = pa.Table.from_pylist(sorted(self.rows.values(), key=lambda r: (r["tool"], r["destination"],
                                                                               r["run_id"])), schema=SCORE_EXPORTS)
        with writing(f"the {LEDGER} table", self.path):
            self.root.write_table(table, self.path)
        self.changed, self.saved_at = False, time.monotonic()
