"""OpenRLHF's reward-function file, for a service behind a token: `--reward.remote_url /path/orchrm_openrlhf.py`,
whose one line is `from orchrm_reward.openrlhf import reward_func`.

OpenRLHF posts to a URL with no `Authorization` header; given a file instead, it calls its `reward_func(queries,
prompts, labels)` and reads back `{"rewards": tensor, "scores": tensor, "extra_logs": {}}`. This one posts OpenRLHF's
own request to `orchrm serve`'s `/v1/openrlhf/get_reward` with the service's bearer token:
- ORCHRM_OPENRLHF_URL: the endpoint, with its query (`http://rm-host:8000/v1/openrlhf/get_reward?domain=math`);
- ORCHRM_SERVE_TOKEN: the token (none: no header);
- ORCHRM_OPENRLHF_TIMEOUT: seconds per request (180).
torch is OpenRLHF's own, imported when called (this package does not depend on it)."""

from __future__ import annotations

import os

URL_ENV = "ORCHRM_OPENRLHF_URL"
TIMEOUT_ENV = "ORCHRM_OPENRLHF_TIMEOUT"


def reward_func(queries, prompts, labels, **kwargs) -> dict:
    import httpx
    import torch

    from orchrm_reward.trl import TOKEN_ENV, ChampionRewardError, refusal

    url = os.environ.get(URL_ENV)
    if not url:
        raise ChampionRewardError(f"set {URL_ENV} to orchrm serve's OpenRLHF endpoint, e.g. "
                                  "http://rm-host:8000/v1/openrlhf/get_reward?domain=math")
    token = os.environ.get(TOKEN_ENV)
    body = {"query": list(queries), "prompts": list(prompts),
            "labels": list(labels) if labels is not None else None}
    try:
        answer = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"} if token else {},
                            timeout=float(os.environ.get(TIMEOUT_ENV, 180)))
    except httpx.TransportError as error:
        raise ChampionRewardError(f"cannot reach orchrm serve at {url}: {type(error).__name__}: {error}") from error
    if answer.status_code != 200:
        raise refusal(answer, f"orchrm serve at {url}")
    rewards = torch.tensor(answer.json()["rewards"], dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {}}
