"""The champion reward model as a TRL reward function: `GRPOTrainer(reward_funcs=ChampionReward(url))`, scoring
through a running `orchrm serve` over HTTP. This module needs httpx and nothing else (no orchrm, torch or TRL), so it
installs beside any trainer's stack (`pip install orchrm-reward`); orchrm's own `orchrm_dagster.integrations.trl`
extends it with `root=` (the champion loaded in the trainer's process).

TRL (1.16) calls a reward function as `f(prompts=..., completions=..., completion_ids=..., **columns)`, the dataset's
other columns arriving as keyword lists (one value per completion, with `trainer_state`, `log_extra` and `log_metric`
beside them), and wants one float per completion back (None: this function does not reward that completion). A
callable whose `__call__` is `async` is awaited on the trainer's event loop (`trl.trainer.utils.is_async_callable`);
`AsyncGRPOTrainer` also pickles its reward functions into a rollout process, so these instances pickle (their HTTP
clients are rebuilt on first use). TRL logs the reward under the instance's `__name__`.

What is scored, for each completion (every choice explicit in the constructor):
- the plan: the completion's text (a conversational completion: its assistant messages' contents, joined by newlines);
- the question: `question_column`'s value when set, else the prompt (a conversational prompt: its last user
  message's content);
- the domain, whose champion scores: `domain` (or `benchmark`, whose domain it is) when fixed, else the row's
  `domain_column` (or `benchmark_column`) value when the dataset has that column, else none: the one champion of
  every domain scores, when one version is champion of every domain that has one.

`ChampionReward("http://rm-host:8000")` posts to `POST /v1/score` with the bearer token `token` (default: the
ORCHRM_SERVE_TOKEN environment variable); the completions of one prompt go in one request (in chunks of `batch_size`
plans, at most the service's `max_plans`), `concurrency` requests at a time, so that the service batches them
together; each request times out after `timeout` seconds, and a connection that fails is retried `retries` times.

A domain without a champion stops training with `NoChampionError`, whose message is the service's reason; any other
failure (the service unreachable, a timeout, a 4xx) raises `ChampionRewardError` saying what and where. The reward is
the champion's raw score (a Bradley-Terry logit: higher is better, comparable between completions scored by the same
champion version, not a probability), the same number `POST /v1/score` answers.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

DEFAULT_NAME = "orchrm_champion"
TOKEN_ENV = "ORCHRM_SERVE_TOKEN"  # the variable `orchrm serve` reads its token from

__all__ = ["AsyncChampionReward", "ChampionReward", "ChampionRewardError", "NoChampionError", "completion_text",
           "prompt_question"]


class ChampionRewardError(RuntimeError):
    """The champion could not score: the service refused or could not be reached, or answered out of protocol."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the service's HTTP status, None when none came back


class NoChampionError(ChampionRewardError):
    """A domain has no champion reward model (the service's 503; `rm.NoChampion` in process): the message says why."""


def refusal(response, where: str) -> ChampionRewardError:
    """The error of `orchrm serve`'s answer other than 200, with the reason it gave: `NoChampionError` for its 503 (a
    domain without a champion), `ChampionRewardError` otherwise."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
    said = answer.get("error") if isinstance(answer, dict) else None
    said = said or (response.text[:300] or response.reason_phrase)
    kind = NoChampionError if response.status_code == 503 else ChampionRewardError
    return kind(f"{where} refused to score ({response.status_code}): {said}", response.status_code)


@dataclass(frozen=True)
class Item:
    """One completion to score."""
    question: str
    plan: str
    domain: str | None
    benchmark: str | None


def message_text(content: Any) -> str:
    """A chat message's content as text: a string, or the text parts of a list of content blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(part.get("text", "") if isinstance(part, Mapping) else str(part) for part in content
                       if not isinstance(part, Mapping) or part.get("type", "text") == "text")
    return str(content)


def completion_text(completion: Any) -> str:
    """A TRL completion as the plan's text: a string as it is; a conversational completion (a list of messages) as
    its assistant messages' contents, joined by newlines (tool messages are left out)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    return "\n".join(message_text(m.get("content")) for m in completion if m.get("role", "assistant") == "assistant")


def prompt_question(prompt: Any) -> str:
    """A TRL prompt as the question: a string as it is; a conversational prompt as its last user message's content
    (the whole conversation's text when it has no user message)."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    if users:
        return message_text(users[-1].get("content"))
    return "\n".join(message_text(m.get("content")) for m in prompt)


class _ChampionRewardBase:
    loads_in_process = False  # True where `root=` works (orchrm_dagster.integrations.trl)

    def __init__(self, url: str | None = None, *, root: Any = None, token: str | None = None,
                 domain: str | None = None, benchmark: str | None = None, domain_column: str | None = "domain",
                 benchmark_column: str | None = "benchmark", question_column: str | None = None,
                 batch_size: int = 64, concurrency: int = 8, timeout: float = 60.0, retries: int = 2,
                 empty_reward: float | None = None, scoring: Any = None, name: str = DEFAULT_NAME):
        """`url`: a running `orchrm serve`'s base URL (http://host:8000). `root` (a storage root to load the
        champions from in this process) needs the orchrm package: `orchrm_dagster.integrations.trl` takes it.
        `empty_reward`: the reward of an empty completion, which is not sent (None: TRL leaves it out of this
        reward). `scoring`: in process, the `rm.ScoringSettings` (device, dtype...)."""
        if root is not None and not self.loads_in_process:
            raise ValueError("root= loads the champion in this process, which needs the orchrm package (use "
                             "orchrm_dagster.integrations.trl's ChampionReward there); this client scores through a "
                             "running `orchrm serve`: give url=http://host:8000")
        if (url is None) == (root is None):
            raise ValueError("give either url (a running `orchrm serve`, http://host:8000) or root (a storage root "
                             "to load the champion from in this process), not both or neither")
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http:// or https:// base URL of `orchrm serve`, not {url!r}")
        if domain is not None and benchmark is not None:
            raise ValueError("give domain or benchmark, not both (a benchmark names its domain)")
        for field, value, least in (("batch_size", batch_size, 1), ("concurrency", concurrency, 1),
                                    ("retries", retries, 0)):
            if value < least:
                raise ValueError(f"{field} must be at least {least}, not {value}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout}")
        self.url = url.rstrip("/") if url is not None else None
        self.root = root
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.domain, self.benchmark = domain, benchmark
        self.domain_column, self.benchmark_column, self.question_column = domain_column, benchmark_column, \
            question_column
        self.batch_size, self.concurrency, self.timeout, self.retries = batch_size, concurrency, timeout, retries
        self.empty_reward = empty_reward
        self.scoring = scoring
        self.__name__ = name
        self.last_versions: list[int] = []  # the champion versions that scored the last call's completions
        self._reset()

    def _score_in_process(self, items: Sequence[Item]) -> tuple[list[float | None], list[int]]:
        raise NotImplementedError  # orchrm_dagster.integrations.trl: the champion loaded in this process

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._client = None
        self._async_clients: dict[int, Any] = {}
        self._scorer = None

    def __getstate__(self) -> dict:
        # AsyncGRPOTrainer pickles reward functions into its rollout process: clients and models are made again there
        state = dict(self.__dict__)
        for name in ("_lock", "_client", "_async_clients", "_scorer"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # never the token
        where = f"url={self.url!r}" if self.url else f"root={str(getattr(self.root, 'url', self.root))!r}"
        fixed = f", domain={self.domain!r}" if self.domain else f", benchmark={self.benchmark!r}" \
            if self.benchmark else ""
        return f"{type(self).__name__}({where}{fixed}, name={self.__name__!r})"

    # ---------------------------------------------------------------- what is scored

    def items(self, prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Any]) -> list[Item]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions: TRL passes one prompt per "
                             "completion")
        questions = self._column(columns, self.question_column, len(prompts), required=True)
        domains = None if self.domain or self.benchmark else self._column(columns, self.domain_column, len(prompts))
        benchmarks = None if self.domain or self.benchmark or domains is not None else \
            self._column(columns, self.benchmark_column, len(prompts))
        items = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            question = str(questions[i]) if questions is not None else prompt_question(prompt)
            items.append(Item(question, completion_text(completion),
                              self.domain or (domains[i] if domains is not None else None),
                              self.benchmark or (benchmarks[i] if benchmarks is not None else None)))
        return items

    @staticmethod
    def _column(columns: Mapping[str, Any], name: str | None, rows: int, required: bool = False) -> list | None:
        if name is None:
            return None
        if name not in columns:
            if required:
                raise ChampionRewardError(f"question_column {name!r} is not a column of the dataset (TRL passed "
                                          f"{', '.join(sorted(k for k in columns if not k.startswith('log_')))})")
            return None
        values = list(columns[name])
        if len(values) != rows:
            raise ChampionRewardError(f"column {name!r} has {len(values)} values for {rows} completions")
        return values

    def requests(self, items: Sequence[Item]) -> list[tuple[list[int], dict]]:
        """(the items' indices, the /v1/score body) of each request: the non-empty completions of consecutive items
        with one question and domain (TRL's group of one prompt) together, `batch_size` plans at most."""
        groups: list[tuple[tuple, list[int]]] = []
        for index, item in enumerate(items):
            if not item.plan:
                continue
            key = (item.question, item.domain, item.benchmark)
            if groups and groups[-1][0] == key and len(groups[-1][1]) < self.batch_size:
                groups[-1][1].append(index)
            else:
                groups.append((key, [index]))
        bodies = []
        for (question, domain, benchmark), indices in groups:
            body = {"question": question, "plans": [items[i].plan for i in indices]}
            if domain is not None:
                body["domain"] = domain
            if benchmark is not None:
                body["benchmark"] = benchmark
            bodies.append((indices, body))
        return bodies

    # ---------------------------------------------------------------- over HTTP

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _timeout(self):
        import httpx

        return httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))

    def _answer(self, response, body: dict) -> tuple[list[float], int]:
        """The scores and version of a /v1/score answer; the error the service gave otherwise."""
        where = f"orchrm serve at {self.url}"
        if response.status_code != 200:
            raise refusal(response, where)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        scores = answer.get("scores") if isinstance(answer, dict) else None
        if not isinstance(scores, list) or len(scores) != len(body["plans"]):
            raise ChampionRewardError(f"{where} answered without one score per plan ({len(body['plans'])} sent): "
                                      f"{response.text[:300]}", response.status_code)
        return [float(s) for s in scores], int(answer.get("rm_version", -1))

    def _transport_error(self, error: Exception) -> ChampionRewardError:
        import httpx

        if isinstance(error, httpx.TimeoutException):
            return ChampionRewardError(f"orchrm serve at {self.url} did not answer within {self.timeout} s "
                                       f"({type(error).__name__}); raise `timeout`, or lower `batch_size`")
        return ChampionRewardError(f"cannot reach orchrm serve at {self.url} after {self.retries + 1} tries: "
                                   f"{type(error).__name__}: {error} (is `orchrm serve` running there?)")

    def _post(self, body: dict) -> tuple[list[float], int]:
        import httpx

        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self._timeout(), headers=self.headers)
            client = self._client
        for attempt in range(self.retries + 1):
            try:
                return self._answer(client.post(f"{self.url}/v1/score", json=body), body)
            except httpx.TimeoutException as error:
                raise self._transport_error(error) from error
            except httpx.TransportError as error:
                if attempt == self.retries:
                    raise self._transport_error(error) from error
                time.sleep(0.5 * 2 ** attempt)
        raise AssertionError("unreachable")

    async def _post_async(self, body: dict, limit: asyncio.Semaphore) -> tuple[list[float], int]:
        import httpx

        loop = asyncio.get_running_loop()
        client = self._async_clients.get(id(loop))
        if client is None:  # a client serves the event loop it was made on
            self._async_clients = {id(loop): httpx.AsyncClient(timeout=self._timeout(), headers=self.headers)}
            client = self._async_clients[id(loop)]
        async with limit:
            for attempt in range(self.retries + 1):
                try:
                    return self._answer(await client.post(f"{self.url}/v1/score", json=body), body)
                except httpx.TimeoutException as error:
                    raise self._transport_error(error) from error
                except httpx.TransportError as error:
                    if attempt == self.retries:
                        raise self._transport_error(error) from error
                    await asyncio.sleep(0.5 * 2 ** attempt)
        raise AssertionError("unreachable")

    # ---------------------------------------------------------------- both

    def _gathered(self, items: Sequence[Item], requests, answers) -> list[float | None]:
        rewards: list[float | None] = [self.empty_reward] * len(items)
        versions = set()
        for (indices, _), (scores, version) in zip(requests, answers):
            versions.add(version)
            for index, score in zip(indices, scores):
                rewards[index] = score
        self.last_versions = sorted(versions)
        return rewards

    def _log(self, columns: Mapping[str, Any]) -> None:
        log_metric = columns.get("log_metric")
        if callable(log_metric) and self.last_versions:
            log_metric(f"{self.__name__}/rm_version", float(max(self.last_versions)))


class ChampionReward(_ChampionRewardBase):
    """A synchronous TRL reward function: the champion's score of each completion (see the module's doc)."""

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns) -> list[float | None]:
        items = self.items(prompts, completions, columns)
        if self.url is None:
            rewards, self.last_versions = self._score_in_process(items)
        else:
            requests = self.requests(items)
            if len(requests) <= 1:
                answers = [self._post(body) for _, body in requests]
            else:
                with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
                    answers = list(pool.map(self._post, [body for _, body in requests]))
            rewards = self._gathered(items, requests, answers)
        self._log(columns)
        return rewards

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class AsyncChampionReward(_ChampionRewardBase):
    """An asynchronous TRL reward function (`async __call__`: TRL awaits it beside its other async rewards), otherwise
    `ChampionReward`."""

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns) -> list[float | None]:
        items = self.items(prompts, completions, columns)
        if self.url is None:
            rewards, self.last_versions = await asyncio.to_thread(self._score_in_process, items)
        else:
            requests = self.requests(items)
            limit = asyncio.Semaphore(self.concurrency)
            answers = await asyncio.gather(*(self._post_async(body, limit) for _, body in requests))
            rewards = self._gathered(items, requests, answers)
        self._log(columns)
        return rewards

    async def aclose(self) -> None:
        for client in self._async_clients.values():
            await client.aclose()
        self._async_clients = {}
