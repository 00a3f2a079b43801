"""`http`: the plan runs on a team's own multi-agent system, elsewhere, behind an HTTP endpoint.

For each plan orchrm POSTs one JSON object (`request_body`) to `url` and reads back the run in the artifact
contract's shape (docs/artifact-format.md: `final_answer`, `subagents`, `tokens`, `error`), validated by the
contract's own field types. Connection errors, timeouts, HTTP 429 and 5xx are retried (`max_retries`, exponential
backoff with jitter from `backoff_s`, or as the server's `Retry-After` says); other statuses are not. A request that
still fails, or an answer that breaks the shape, is a failed run: its cause in the result's `error`, its
`error_kind` one that held-out accuracy counts as failed (never a wrong answer the system gave). Correctness is
labeled by orchrm from the final answer, as with the `agents` environment."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import ConfigDict, ValidationError, create_model

from orchrm_dagster.contract import RunErrorKind, RunRecord
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.environments import Environment, EnvironmentContext, Executor, PlanJob, register_environment
from orchrm_dagster.llm import MAX_RETRY_AFTER_S, retry_after_s
from orchrm_dagster.mas import CallRecord, ExecutionResult, question_text

if TYPE_CHECKING:
    import httpx

REQUEST_VERSION = 1  # the request body's `version`: a change of its shape changes it
_SHOWN_ERRORS = 3  # validation errors named in one failed run's cause


@engine_config
class HttpEnvironmentSettings:
    url: str | None = Field(default=None, description="The endpoint each plan is POSTed to (http:// or https://); "
                                                      "required when `environment` is http")
    timeout_s: float = Field(default=60.0, description="Seconds a request may take to connect, to send and to get "
                                                       "each part of the answer; past it the attempt times out")
    max_retries: int = Field(default=3, description="Retries of a request after a transient failure (connection "
                                                    "error, timeout, HTTP 429 or 5xx); then the run fails")
    backoff_s: float = Field(default=1.0, description="Wait before the first retry in seconds, doubled at each "
                                                      "retry, with jitter (x 0.5-1.5); a Retry-After header replaces "
                                                      "it")
    concurrent_plans: int = Field(default=4, description="Plans in flight at once (concurrent requests)")
    headers_env: str | None = Field(default=None, description="Environment variable holding a bearer token, read "
                                                              "when the executor is built and sent as "
                                                              "`Authorization: Bearer <token>` (unset: no header)")

    def __post_init__(self) -> None:
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"url must be an http:// or https:// address, got {self.url!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_retries < 0 or self.backoff_s < 0:
            raise ValueError("max_retries and backoff_s must be >= 0")
        if self.concurrent_plans < 1:
            raise ValueError(f"concurrent_plans must be >= 1, got {self.concurrent_plans}")


# The answer: the run record's own fields and types where the contract has them (its sub-agent calls and token
# counts, strict: "3" is not an int), unknown fields kept and ignored
HttpResponse = create_model(
    "HttpResponse", __config__=ConfigDict(strict=True, extra="allow", frozen=True),
    final_answer=(str | None, ...),
    **{name: (RunRecord.model_fields[name].annotation, None) for name in ("subagents", "tokens", "error")},
    error_kind=(RunErrorKind | None, None), plan_error=(str | None, None))


class HttpFailure(Exception):
    """A request that failed, or an answer that breaks the response's shape: the run's cause and its kind."""

    def __init__(self, cause: str, kind: RunErrorKind = RunErrorKind.AGENT_FAILED):
        super().__init__(cause)
        self.kind = kind


def request_body(job: PlanJob, execution) -> dict:
    """What is POSTed for one plan: the problem (its question as given, and as orchrm's own sub-agents read it, its
    choices listed), the plan text, the answer type the labeler reads, the run's seed, and the execution's sub-agent
    budgets (`execution`: an `orchestration.ExecutionSettings`). The reference answer is never sent."""
    return {
        "version": REQUEST_VERSION, "question": job.question, "question_text": question_text(job.question, job.choices),
        "choices": list(job.choices) if job.choices else None, "plan": job.plan, "answer_type": job.answer_type,
        "seed": job.seed,
        "execution": {"subagent_temperature": execution.subagent_temperature,
                      "subagent_max_new_tokens": execution.subagent_max_new_tokens,
                      "plan_timeout_s": execution.plan_timeout_s},
    }


def result_of(content: bytes, model: str) -> ExecutionResult:
    """The execution the answer `content` reports (each call's `model`, when it names none, is `model`); HttpFailure
    naming the field for an answer that is not JSON, not an object, or misses or mistypes a field."""
    try:
        response = HttpResponse.model_validate_json(content)
    except ValidationError as error:
        raise HttpFailure(_invalid(error)) from None
    extra = response.model_extra or {}
    if response.subagents is None and ("trajectory" in extra or "steps" in extra):
        raise HttpFailure("response field 'subagents' is missing: the trajectory goes in 'subagents', a list of "
                          "calls (the artifact contract's name), not in 'trajectory' or 'steps'")
    if response.error is None and response.final_answer is None:
        raise HttpFailure("response field 'final_answer' is null and no 'error' says why")
    if response.error is None and (response.error_kind or response.plan_error):
        raise HttpFailure("response fields 'error_kind' and 'plan_error' need an 'error'")
    calls = [CallRecord(c.agent_id, c.agent_name or "", c.input or "", c.output or "", c.prompt_tokens or 0,
                        c.completion_tokens or 0, c.model or model, _note(c.model_extra))
             for c in response.subagents or []]
    prompt, completion = _tokens(response.tokens, calls)
    outputs = {call.agent_id: call.output for call in calls if call.output}
    kind = (response.error_kind or RunErrorKind.AGENT_FAILED) if response.error is not None else None
    return ExecutionResult(response.final_answer, outputs, calls, prompt, completion, response.error,
                           response.plan_error, kind)


def _invalid(error: ValidationError) -> str:
    errors = error.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        return f"the response is not JSON: {first.get('ctx', {}).get('error', first['msg'])}"
    if not first["loc"]:
        return f"the response must be a JSON object, got {type(first['input']).__name__}"
    more = f" (and {len(errors) - _SHOWN_ERRORS} more)" if len(errors) > _SHOWN_ERRORS else ""
    return "; ".join(_one_invalid(e) for e in errors[:_SHOWN_ERRORS]) + more


def _one_invalid(error: dict) -> str:
    field = ".".join(str(part) for part in error["loc"])
    if error["type"] == "missing":
        return f"response field '{field}' is missing"
    shown = repr(error.get("input"))
    return f"response field '{field}': {error['msg']} (got {shown if len(shown) <= 60 else shown[:57] + '...'})"


def _note(extra: dict | None) -> str:
    note = (extra or {}).get("note")
    return note if isinstance(note, str) else ""


def _tokens(tokens, calls: list[CallRecord]) -> tuple[int, int]:
    """Sub-agent (prompt, completion) tokens: the answer's `tokens` split where given, else its calls' sums."""
    prompt = sum(call.prompt_tokens for call in calls)
    completion = sum(call.completion_tokens for call in calls)
    if tokens is None:
        return prompt, completion
    if tokens.subagents is not None and None in (tokens.subagent_prompt, tokens.subagent_completion):
        raise HttpFailure("response field 'tokens': 'subagents' needs its split, 'subagent_prompt' and "
                          "'subagent_completion' (a run counts both)")
    return (prompt if tokens.subagent_prompt is None else tokens.subagent_prompt,
            completion if tokens.subagent_completion is None else tokens.subagent_completion)


def endpoint(url: str) -> str:
    """The endpoint as run records and causes name it: without credentials or query."""
    parts = urlsplit(url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname  # an IPv6 address
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def bearer_token(headers_env: str | None) -> dict[str, str]:
    """The Authorization header of the token in environment variable `headers_env` (None: no header); ValueError
    naming the variable when it is unset or empty."""
    if headers_env is None:
        return {}
    token = os.environ.get(headers_env, "").strip()
    if not token:
        raise ValueError(f"the http environment's headers_env names {headers_env!r}, which is unset or empty")
    return {"Authorization": f"Bearer {token}"}


class HttpExecutor(Executor):
    environment = "http"

    def __init__(self, config: HttpEnvironmentSettings, execution):
        if not config.url:
            raise ValueError("the http environment needs a url: set environment_settings.http.url to the endpoint "
                             "each plan is POSTed to")
        self.config = config
        self.execution = execution
        self.endpoint = self.model_id = endpoint(config.url)
        self.record_meta = {"http_endpoint": self.endpoint}
        self.headers = bearer_token(config.headers_env)

    def completed(self, jobs: Sequence[PlanJob]) -> Iterator[tuple[int, ExecutionResult]]:
        import httpx  # when plans execute, not when the settings that name this environment are read

        workers = self.config.concurrent_plans
        with (httpx.Client(timeout=self.config.timeout_s, headers=self.headers,
                           limits=httpx.Limits(max_connections=workers)) as client,
              ThreadPoolExecutor(workers) as pool):
            running = {pool.submit(self.run, client, job): index for index, job in enumerate(jobs)}
            for finished in as_completed(running):
                yield running[finished], finished.result()

    def run(self, client: httpx.Client, job: PlanJob) -> ExecutionResult:
        """One plan executed at the endpoint; never raises (a failure is the result's `error`)."""
        try:
            return result_of(self.post(client, request_body(job, self.execution)), self.model_id)
        except HttpFailure as failure:
            return _failed(f"http environment: {failure}", failure.kind)
        except Exception as error:  # a bug of this executor: the run fails, the batch goes on
            return _failed(f"http environment: {type(error).__name__}: {error}", RunErrorKind.EXECUTOR_FAILED)

    def post(self, client: httpx.Client, body: dict) -> bytes:
        """The answer's body; transient failures retried, HttpFailure for the last one (its attempts said)."""
        import httpx

        transient = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
        attempts = self.config.max_retries + 1
        for attempt in range(1, attempts + 1):
            retry_after = None
            try:
                response = client.post(self.config.url, json=body)
            except httpx.TimeoutException as error:
                failure = HttpFailure(f"timeout: {self.endpoint} did not answer within {self.config.timeout_s:g} s "
                                      f"({type(error).__name__})", RunErrorKind.TIMEOUT)
            except transient as error:
                failure = HttpFailure(f"{self.endpoint} unreachable: {type(error).__name__}: {error}")
            else:
                if response.is_success:
                    return response.content
                failure = HttpFailure(f"HTTP {response.status_code} from {self.endpoint}: {response.text[:500]}")
                if response.status_code != 429 and response.status_code < 500:
                    raise failure  # the request itself is refused: retrying sends the same
                retry_after = retry_after_s(response)
            if attempt < attempts:
                time.sleep(self.wait_s(attempt, retry_after))
        raise HttpFailure(f"{failure} (after {attempts} attempts)", failure.kind)

    def wait_s(self, attempt: int, retry_after: float | None) -> float:
        """The wait before retry `attempt` (1 first): the server's Retry-After (at most MAX_RETRY_AFTER_S), else
        backoff_s doubled at each retry, with jitter."""
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_S)
        return self.config.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)


def _failed(error: str, kind: RunErrorKind) -> ExecutionResult:
    return ExecutionResult(None, {}, [], 0, 0, error, None, kind)


def build(config: HttpEnvironmentSettings, context: EnvironmentContext) -> HttpExecutor:
    return HttpExecutor(config, context.execution)


ENVIRONMENT = register_environment(Environment(
    name="http", description="each plan is POSTed to a team's own multi-agent system at `url`, which answers the run "
                             "(final answer, sub-agent calls, tokens) in the artifact contract's shape; its final "
                             "answer is labeled",
    config=HttpEnvironmentSettings, build=build, simulated=False))
