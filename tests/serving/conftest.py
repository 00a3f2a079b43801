"""A real uvicorn server on a free loopback port, in a thread, over a storage root with a tiny trained champion."""

import contextlib
import threading
import time

import pytest
import uvicorn

from orchrm_dagster.rm import RMTrainConfig, train_new_version
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.serving import ServeSettings, create_app
from orchrm_dagster.storage import StorageRoot
from tests.rm.toy import NO_FLOOR, toy_pairs

# small limits, so that the tests reach them with small bodies
TEST_SETTINGS = ServeSettings(max_plans=8, max_text_chars=2000, max_body_bytes=20_000, max_wait_ms=20,
                              poll_seconds=0.1)


def train_champion(root: StorageRoot, backbone: str, seed: int = 0, domains=None) -> int:
    """A new version, crowned champion of `domains` (None: every domain): the floor's test is off (a tiny model on
    toy pairs shows nothing significant) and no champion can be ahead of it by more than the margin."""
    config = RMTrainConfig(backbone=backbone, max_length=64, epochs=1, batch_size=4, seed=seed,
                           device="cpu", champion_margin=1.0, **NO_FLOOR)
    outcome = train_new_version(root, toy_pairs(8, seed), toy_pairs(4, seed + 100), config, ["p"], domains=domains)
    return outcome.version


@contextlib.contextmanager
def running(app):
    """The app served by uvicorn on 127.0.0.1 (a port the OS picks); yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="session")  # read only: the service modules share one training
def champion_root(tmp_path_factory, tiny_backbone) -> StorageRoot:
    root = StorageRoot(str(tmp_path_factory.mktemp("serving") / "storage"))
    train_champion(root, tiny_backbone)
    return root


@pytest.fixture(scope="module")
def service(champion_root):
    """(base URL, app) of a service scoring with the module's champion."""
    app = create_app(champion_root, TEST_SETTINGS)
    with running(app) as url:
        yield url, app
