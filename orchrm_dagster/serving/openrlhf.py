"""OpenRLHF's remote reward-model protocol, answered by the champion: `POST /v1/openrlhf/get_reward`.

OpenRLHF (`--reward.remote_url URL`, `--remote_rm_url URL` before v0.10.2) posts to the URL it is given, with no
header but the content type:

    {"query": [str, ...], "prompts": [str, ...], "labels": [...]}      one entry per sample, in the same order
 -> {"rewards": [float, ...], "scores": [float, ...], ...}             one reward per query, in request order

`query` is the whole sample as OpenRLHF decodes it (the prompt, then the response; special tokens kept), `prompts`
the prompt alone, `labels` the dataset's label column (`--data.label_key`). The champion reads, for each sample:
- the question: the prompt (`?question=label`: the label, for a dataset whose label column holds the bare question);
- the plan: the query after its prompt (the whole query when the prompt is not in it: a prompt OpenRLHF truncated);
- the domain: `?domain=math` or `?benchmark=gsm8k` on the URL; without either, the one champion of every domain.
`scores` repeats `rewards` (OpenRLHF reads it for dynamic filtering, as its own `serve_rm` answers); `rm_versions`
and `domain` say which champion scored. Samples of one prompt are scored together; every request goes through the
service's batcher, behind the same bearer token as `/v1/score` (OpenRLHF's client sends none: see
docs/guide/reward-for-trainers.md). A domain without a champion is answered 503 with the reason, like `/v1/score`.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from orchrm_dagster.rm import all_domains, domain_of
from orchrm_dagster.serving.settings import ServeSettings

PATH = "/v1/openrlhf/get_reward"


class OpenRLHFResponse(BaseModel):
    rewards: list[float]  # one per query, in request order: the champion's score of its response
    scores: list[float]  # the same (OpenRLHF's dynamic filtering reads `scores`)
    rm_versions: list[int]  # the champion versions that scored them
    domain: str | None  # the domain whose champion scored them (null: the one champion of every domain)


def openrlhf_request_model(settings: ServeSettings) -> type[BaseModel]:
    text = Annotated[StrictStr, Field(max_length=settings.max_text_chars)]

    class OpenRLHFRequest(BaseModel):
        model_config = ConfigDict(extra="ignore")  # a newer OpenRLHF may send more

        query: list[text] = Field(min_length=1)
        prompts: list[text]
        labels: list[Any] | None = None

        @model_validator(mode="after")
        def aligned(self):
            if len(self.prompts) != len(self.query):
                raise ValueError(f"{len(self.query)} queries but {len(self.prompts)} prompts: OpenRLHF sends one "
                                 f"prompt per query")
            if self.labels is not None and len(self.labels) != len(self.query):
                raise ValueError(f"{len(self.query)} queries but {len(self.labels)} labels")
            return self

    return OpenRLHFRequest


def response_text(query: str, prompt: str) -> str:
    """The response in OpenRLHF's query: what follows the prompt (the decoded query may begin with a token the prompt
    text lacks); the whole query when the prompt is not in it."""
    if query.startswith(prompt):
        return query[len(prompt):]
    at = query.find(prompt) if prompt else -1
    return query[at + len(prompt):] if at >= 0 else query


def add_openrlhf_route(app: FastAPI, settings: ServeSettings, watcher,
                       submit: Callable[[str, list[str], str | None], Awaitable[Any]],
                       refused: Callable[[str | None], Exception]) -> None:
    """`POST PATH` on `app`: `submit(question, plans, domain)` scores through the service's batcher (a `Scored`),
    `refused(domain)` is the NoChampion the service answers 503."""
    Body = openrlhf_request_model(settings)

    @app.post(PATH, response_model=OpenRLHFResponse)
    async def openrlhf_reward(request: Body,  # type: ignore[valid-type]
                              domain: str | None = None, benchmark: str | None = None,
                              question: Literal["prompt", "label"] = Query("prompt")):
        if domain is not None and domain not in all_domains():
            return JSONResponse({"error": f"domain: unknown domain {domain!r}; known domains: "
                                          f"{', '.join(all_domains())}"}, status_code=422)
        if domain and benchmark and domain_of(benchmark) != domain:
            return JSONResponse({"error": f"benchmark {benchmark!r} is of the {domain_of(benchmark)} domain, not "
                                          f"{domain}: give one of them"}, status_code=422)
        if question == "label" and (request.labels is None or not all(isinstance(x, str) and x
                                                                      for x in request.labels)):
            return JSONResponse({"error": "question=label: every label must be a non-empty string (the question); "
                                          "set --data.label_key to the column that holds it"}, status_code=422)
        domain = domain or (domain_of(benchmark) if benchmark else None)
        loaded = watcher.current
        if loaded is None or loaded.scoring_domain(domain) is None:  # DomainRequired: 422, as /v1/score
            raise await asyncio.to_thread(refused, domain)
        questions = request.labels if question == "label" else request.prompts
        plans = [response_text(q, p) for q, p in zip(request.query, request.prompts)]
        groups: list[tuple[str, list[str]]] = []  # consecutive samples of one question: one job
        for asked, plan in zip(questions, plans):
            if groups and groups[-1][0] == asked:
                groups[-1][1].append(plan)
            else:
                groups.append((asked, [plan]))
        scored = await asyncio.gather(*(submit(asked, group, domain) for asked, group in groups))
        rewards = [score for result in scored for score in result.scores]
        return OpenRLHFResponse(rewards=rewards, scores=rewards, domain=domain,
                                rm_versions=sorted({result.version for result in scored}))
