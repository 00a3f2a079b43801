"""The scoring service: `POST /v1/score` asks the champion reward model which of N plans to run.

    POST /v1/score   {"question": str, "plans": [str, ...], "domain"?: str, "benchmark"?: str}
                  -> {"scores": [float, ...], "chosen": int, "unparseable": [{"index": int, "error": str}, ...],
                      "rm_version": int, "domain": str | null}
    GET  /v1/health  the champions loaded (503 before the first champion, saying why there is none)
    GET  /v1/stats   requests, scoring batches and reloads so far
    POST /v1/openrlhf/get_reward   OpenRLHF's remote reward-model protocol (`serving.openrlhf`)

Given a token, every request but `GET /v1/health` must carry it (`Authorization: Bearer <token>`) or is answered
401 before its body is read (`door.BearerToken`); health then tells a caller without it the status and the
champions, not the error texts (which may name storage paths).

A plan is scored by the champion of the request's domain (`domain`, or the domain of `benchmark` by the rule every
asset uses); a request naming neither is scored by the one champion of every domain, when there is one. `chosen` is
the plan the Best-of-N rule production runs picks (`rm.best_of_n_order`: plans that parse first, then the score,
then the lower plan hash); `unparseable` lists the plans that do not parse, and why. A domain without a champion
(none trained, or none that beat chance on its validation pairs) is refused with 503 and the reason. Every error
body has an `error` sentence; a 422 also lists each invalid field as FastAPI does (`detail`).
"""

import asyncio
import contextlib
import logging
from dataclasses import asdict, dataclass
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from orchrm_dagster.rm import all_domains, best_of_n_pick, domain_of
from orchrm_dagster.serving.batcher import Batcher
from orchrm_dagster.serving.champions import ChampionWatcher, DomainRequired, NoChampion, describe
from orchrm_dagster.serving.door import BearerToken, carries
from orchrm_dagster.serving.openrlhf import add_openrlhf_route
from orchrm_dagster.serving.settings import ServeSettings
from orchrm_dagster.storage import StorageRoot

log = logging.getLogger(__name__)


class Unparseable(BaseModel):
    index: int  # the plan's position in the request
    error: str  # why it is not a plan that can run


class ScoreResponse(BaseModel):
    scores: list[float]  # one per plan, in request order; higher is better
    chosen: int  # the index of the plan to run, by the Best-of-N rule (a plan that parses before one that does not)
    unparseable: list[Unparseable]  # the plans that do not parse
    rm_version: int  # the reward-model version that scored them
    domain: str | None  # the domain whose champion scored them (null: no domain asked, one champion of every domain)


@dataclass(frozen=True)
class ScoreJob:
    question: str
    plans: list[str]
    domain: str | None

    @property
    def size(self) -> int:
        return len(self.plans)


@dataclass(frozen=True)
class Scored:
    scores: list[float]
    version: int


def request_model(settings: ServeSettings) -> type[BaseModel]:
    """The request body, with the limits of `settings`."""
    text = Annotated[StrictStr, Field(min_length=1, max_length=settings.max_text_chars)]

    class ScoreRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")

        question: text
        plans: list[text] = Field(min_length=1, max_length=settings.max_plans)
        domain: str | None = None
        benchmark: str | None = None

        @field_validator("domain")
        @classmethod
        def known_domain(cls, domain: str | None) -> str | None:
            if domain is not None and domain not in all_domains():
                raise ValueError(f"unknown domain {domain!r}; known domains: {', '.join(all_domains())}")
            return domain

        @model_validator(mode="after")
        def one_domain(self):
            if self.domain and self.benchmark and domain_of(self.benchmark) != self.domain:
                raise ValueError(f"benchmark {self.benchmark!r} is of the {domain_of(self.benchmark)} domain, not "
                                 f"{self.domain}: send one of them")
            return self

        def scoring_domain(self) -> str | None:
            return self.domain or (domain_of(self.benchmark) if self.benchmark else None)

    return ScoreRequest


def create_app(root: StorageRoot, settings: ServeSettings = ServeSettings(), token: str | None = None) -> FastAPI:
    """The service; with `token`, every request but health must carry it. `serve` reads the token (`door.serve_token`)
    and refuses to listen beyond loopback without one: an app served otherwise is as open as its caller makes it."""
    watcher = ChampionWatcher(root, settings.scoring, settings.poll_seconds)

    def refused(domain: str | None) -> NoChampion:
        return NoChampion(watcher.refusal(domain))

    def score_jobs(jobs: list[ScoreJob]) -> list[Scored | Exception]:
        loaded = watcher.current  # one snapshot for the whole batch, even if a reload swaps in another meanwhile
        if loaded is None:
            return [refused(job.domain) for job in jobs]
        resolved: list[str | Exception] = []
        for job in jobs:
            try:
                domain = loaded.scoring_domain(job.domain)
            except DomainRequired as error:
                domain = error
            resolved.append(refused(job.domain) if domain is None else domain)
        scorable = [(job, domain) for job, domain in zip(jobs, resolved) if isinstance(domain, str)]
        questions = [job.question for job, _ in scorable for _ in job.plans]
        plans = [plan for job, _ in scorable for plan in job.plans]
        domains = [domain for job, domain in scorable for _ in job.plans]
        scores, _, versions = loaded.scorer.score_with_lengths(questions, plans, domains)
        results, start = [], 0
        for job, domain in zip(jobs, resolved):
            if isinstance(domain, Exception):
                results.append(domain)
                continue
            results.append(Scored(scores[start:start + job.size], versions[start]))
            start += job.size
        return results

    batcher: Batcher[ScoreJob, Scored] = Batcher(score_jobs, settings.max_batch_plans, settings.max_wait_ms / 1000)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            await asyncio.to_thread(watcher.check)
        except Exception as error:  # serve 503s and keep polling rather than refuse to start
            watcher.last_error = f"{type(error).__name__}: {error}"
            log.error("could not load the champions: %s", watcher.last_error)
        if watcher.current is None:
            log.warning("every request is refused (503) until a champion is crowned: %s",
                        await asyncio.to_thread(watcher.refusal, None))
        watcher.start()
        batcher.start()
        yield
        watcher.stop()
        await batcher.stop()

    app = FastAPI(title="orchrm scoring", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    if token is not None:  # added last, so outermost: a request without the token is refused before BodyLimit reads it
        app.add_middleware(BearerToken, token=token)
    ScoreRequest = request_model(settings)

    @app.post("/v1/score", response_model=ScoreResponse)
    async def score(request: ScoreRequest) -> ScoreResponse:
        domain = request.scoring_domain()
        loaded = watcher.current
        # a request no champion can score is answered before it queues (DomainRequired: 422)
        if loaded is None or loaded.scoring_domain(domain) is None:
            raise await asyncio.to_thread(refused, domain)
        scored = await batcher.submit(ScoreJob(request.question, request.plans, domain))
        pick = best_of_n_pick(request.plans, scored.scores)
        return ScoreResponse(scores=scored.scores, chosen=pick.chosen, rm_version=scored.version, domain=domain,
                             unparseable=[Unparseable(index=i, error=e) for i, e in pick.unparseable.items()])

    async def submit(question: str, plans: list[str], domain: str | None) -> Scored:
        return await batcher.submit(ScoreJob(question, plans, domain))

    add_openrlhf_route(app, settings, watcher, submit, refused)  # POST /v1/openrlhf/get_reward: OpenRLHF's protocol

    @app.get("/v1/health")
    async def health(request: Request):
        loaded = watcher.current
        body = ({"status": "ok", "champions": loaded.champions, "rm_versions": sorted(set(loaded.champions.values()))}
                if loaded else {"status": "no_champion"})
        if token is None or carries(request.scope, token):
            if loaded is None:
                body["error"] = await asyncio.to_thread(watcher.refusal, None)
            body["reload_error"] = watcher.last_error
        return JSONResponse(body, status_code=200 if loaded else 503)

    @app.get("/v1/stats")
    async def stats():
        loaded = watcher.current
        return {**asdict(batcher.stats), "reloads": watcher.reloads,
                "champions": loaded.champions if loaded else {}}

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, error: RequestValidationError):
        # FastAPI's detail without each error's `input`, which can be the whole (large) body
        problems = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in error.errors()]
        return JSONResponse({"error": "; ".join(_problem_text(e) for e in error.errors()), "detail": problems},
                            status_code=422)

    @app.exception_handler(DomainRequired)
    async def domain_required(_: Request, error: DomainRequired):
        return JSONResponse({"error": f"{error} (one of {', '.join(all_domains())})"}, status_code=422)

    @app.exception_handler(NoChampion)
    async def unavailable(_: Request, error: NoChampion):
        return JSONResponse({"error": str(error), "champions": describe(watcher.current.champions)
                             if watcher.current else "none"}, status_code=503)

    app.state.watcher, app.state.batcher = watcher, batcher
    return app


NOT_AN_OBJECT = ('expected a JSON object {"question": str, "plans": [str, ...], "domain"?: str} sent as '
                 'Content-Type: application/json')


def _problem_text(error: dict) -> str:
    """`plans.2: Input should be a valid string`: the field's path in the body, then what is wrong with it."""
    loc = [str(part) for part in error["loc"]]
    where = ".".join(loc[1:] if loc[:1] == ["body"] else loc) or "body"
    if error["type"] == "model_attributes_type" and where == "body":
        return f"body: {NOT_AN_OBJECT}"
    message = error["msg"].removeprefix("Value error, ")
    detail = error.get("ctx", {}).get("error") if error["type"] == "json_invalid" else None
    return f"{where}: {message}" + (f" ({detail})" if detail else "")


class BodyLimit:
    """Answers 413 to a body larger than `max_bytes` (declared or streamed), before anything parses it."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._too_large(scope, receive, send)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send):
        response = JSONResponse({"error": f"request body larger than {self.max_bytes} bytes"}, status_code=413)
        await response(scope, receive, send)
