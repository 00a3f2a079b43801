import os

import orjson
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Every test gets its own storage root and Dagster instance."""
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "storage"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
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
