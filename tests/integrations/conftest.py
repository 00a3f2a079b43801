"""A storage root whose math domain has a tiny trained champion and whose other domains have none, and fake
`orchrm serve` apps that record what a client sends."""

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchrm_dagster.serving import create_app
from orchrm_dagster.storage import StorageRoot
from tests.serving.conftest import TEST_SETTINGS, running, train_champion


@pytest.fixture(scope="session")  # read only
def math_root(tmp_path_factory, tiny_backbone) -> StorageRoot:
    """v1, champion of the math domain only (qa and choice have none)."""
    root = StorageRoot(str(tmp_path_factory.mktemp("integrations") / "storage"))
    train_champion(root, tiny_backbone, domains=("math",))
    return root


TOKEN = "grpo-test-token"  # the token of `orchrm_serve`


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def orchrm_serve(math_root, tmp_path_factory):
    """A real `orchrm serve` process over `math_root`, behind TOKEN; yields its base URL."""
    port, logs = _free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    orchrm = Path(sys.executable).with_name("orchrm")
    with open(logs, "wb") as log:
        server = subprocess.Popen([str(orchrm), "--storage", math_root.url, "serve", "--port", str(port), "--device",
                                   "cpu", "--max-wait-ms", "20"], stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "ORCHRM_SERVE_TOKEN": TOKEN})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                assert server.poll() is None, logs.read_text()
                assert time.monotonic() < deadline, "orchrm serve did not answer"
                try:
                    if httpx.get(f"{url}/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory) -> str:
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


@pytest.fixture(scope="module")
def math_service(math_root):
    """The base URL of a service scoring with `math_root`'s champion."""
    with running(create_app(math_root, TEST_SETTINGS)) as url:
        yield url


class FakeService:
    """Answers POST /v1/score with each plan's length as its score (or `status` and `error`), after `delay` s,
    recording each request's body and Authorization header."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.authorizations: list[str | None] = []
        self.status, self.error, self.delay = 200, None, 0.0
        self.app = FastAPI()

        @self.app.post("/v1/score")
        async def score(request: Request):
            body = await request.json()
            self.bodies.append(body)
            self.authorizations.append(request.headers.get("authorization"))
            await asyncio.sleep(self.delay)
            if self.status != 200:
                return JSONResponse({"error": self.error}, status_code=self.status)
            return {"scores": [float(len(p)) for p in body["plans"]], "chosen": 0, "unparseable": [],
                    "rm_version": 7, "domain": body.get("domain")}


@pytest.fixture
def fake_service():
    fake = FakeService()
    with running(fake.app) as url:
        yield url, fake
