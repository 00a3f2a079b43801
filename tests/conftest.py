import os
import socket
import time
import urllib.request

import orjson
import psutil
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def no_settings_file(tmp_path_factory) -> str:
    """An empty settings file: not the orchrm.yaml of whatever folder the tests run from."""
    empty = tmp_path_factory.mktemp("settings") / "orchrm.yaml"
    empty.write_text("")
    return str(empty)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch, no_settings_file):
    """Every test gets its own storage root and Dagster instance, and no settings file but its own."""
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "storage"))
    monkeypatch.setenv("ORCHRM_CONFIG", no_settings_file)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("ORCHRM_CACHE", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def storage_root(tmp_path):
    from orchrm_dagster.storage.root import StorageRoot

    return StorageRoot(str(tmp_path / "storage"))


@pytest.fixture
def good_records():
    from orchrm_dagster.synthetic import generate_runs

    return list(generate_runs(12, seed=3, benchmarks=("gsm8k_test", "hotpotqa_dev"), samples_per_problem=3))


def write_lines(path, lines) -> str:
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else orjson.dumps(line) for line in lines) + b"\n")
    return str(path)


def drop(root, path) -> str:
    """Put a file into a local root's landing zone as a fleet's writer does (a hidden copy, then a rename), not as
    `storage.land` does (which makes it a batch of its own): the loop cuts it into a batch. Returns its name."""
    import os
    import shutil
    from pathlib import Path

    name = Path(path).name
    os.makedirs(root.landing_path(), exist_ok=True)
    os.replace(shutil.copyfile(path, root.landing_path(f".{name}.part")), root.landing_path(name))
    return name


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory) -> str:
    """A randomly initialised 2-layer BERT with the packaged MiniLM tokenizer: trains and scores in milliseconds."""
    from tests.tiny_models import make_tiny_backbone

    return make_tiny_backbone(tmp_path_factory.mktemp("tiny_backbone"))


@pytest.fixture
def s3_endpoint(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto's backends live in the process, not in the server: each test starts from no buckets
    import httpx

    httpx.post(f"{endpoint}/moto-api/reset").raise_for_status()
    yield endpoint
    server.stop()


def gone(process: psutil.Process) -> bool:
    """Whether `process` has ended (a zombie, dead but not yet reaped, has)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def orchrm_instance_settings() -> dict:
    """What orchrm writes into dagster.yaml that the loop needs (assets/instance_settings.py): a test instance without
    it is a user's instance without run monitoring or pool limits, on which the loop's sensors request nothing."""
    import yaml

    from assets.instance_settings import DAGSTER_YAML

    written = yaml.safe_load(DAGSTER_YAML)
    return {key: written[key] for key in ("run_monitoring", "concurrency")}


def orchrm_instance_for_test():
    import dagster as dg

    return dg.instance_for_test(overrides=orchrm_instance_settings())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(url: str, server, what: str, timeout_s: float = 180) -> None:
    """Until `url` answers 200; fails at once if `server` (a Popen) exits, or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"{what} exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{what} did not answer at {url} within {timeout_s} s")
