"""An S3 storage root as a team on one bucket runs it: a moto server over HTTP on loopback, reached through s3fs, a
settings file naming the bucket and its endpoint, and `orchrm loop` with its rounds on (the simulated environment,
tiny models, a small round). What a run leaves is read from the tables, the bucket and the Dagster instance.

- The loop through one round: a fleet's file landed in the bucket is ingested once, pairs, a crowned reward model,
  scores, round 1 (promoted: a reward-only gate that lets any reward through), its checkpoint in the bucket and in
  use, and its rollout's runs landed and ingested once.
- Planted secrets (the S3 keys, the sub-agents' API key) the loop ran with are nowhere it wrote: the run configs,
  tags and event logs Dagster stores, the compute logs, the machine's cache, the bucket, `orchrm status`.
- The server stopped mid-write (a loopback proxy in front of it stops: open connections reset, the port refusing
  new ones) and started again: of a batch (an ingest's runs, a batch of several parts) and of a checkpoint (a
  reward-model version). Readers see the whole previous state, the step fails naming the store's endpoint, and run
  again once the server is back it succeeds, with nothing landed twice.

The moto server's buckets live in this process (its state outlives a stop of the server), so the loop's own module
fixture keeps its bucket only until a test using `s3_endpoint` resets moto: the loop's tests come first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from tests.conftest import orchrm_instance_for_test

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.filterwarnings("ignore")]

BUCKET = "team-bucket"
ROOT_URL = f"s3://{BUCKET}/orchrm"
# distinctive values: a leak is found by searching for them (moto takes any key)
PLANTED_SECRETS = {"AWS_ACCESS_KEY_ID": "AKIAPLANTEDQ7X2W9ZKV",
                   "AWS_SECRET_ACCESS_KEY": "planted/S3+secret-Zq9xWv3Lk8Rt",
                   "OPENAI_API_KEY": "sk-planted-subagent-key-Hq7Rt2Mx5Vb"}
TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}
FLEET_RUNS = 80


def orchrm_command(*args: str, env: dict, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("orchrm")), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


SETTINGS = """\
storage:
  root: {root}
  s3_endpoint_url: {endpoint}
llm:                                   # the sub-agents' backend: its key by reference (never executed: simulated)
  backend:
    openai: {{base_url: "http://127.0.0.1:9/v1", model: subagents, api_key_env: OPENAI_API_KEY}}
policies:
  - {{name: tiny-base, kind: base, backend_kind: transformers, model: {policy}, max_new_tokens: 200, max_agents: 1}}
  - {{name: tiny-fewshot, kind: specialized, backend_kind: transformers, model: {policy}, max_new_tokens: 200,
      max_agents: 1, prompt: orchestrator_fewshot}}
loop:
  rounds: 1
  rollout_samples: 1
  rollout_base: false
  rollout_execution: {{environment: simulated}}
  reward_model: {{backbone: {backbone}, max_length: 64, epochs: 1, batch_size: 8, device: cpu, max_train_pairs: 64,
                  min_validation_pairs: 1, champion_level: 1.0}}
  round:
    policy: tiny-fewshot
    scratch_policy: tiny-base
    steps: 1
    group_size: 2
    train_problems: 1
    max_completion_tokens: 200
    heldout_problems: 1
    heldout_samples: 1
    heldout_execute: false             # promoted on the held-out reward alone, which may fall as far as it likes:
    policy_gate: reward_only           # the round is promoted, so its rollout runs
    policy_margin: 1000000000.0
    device: cpu
    scoring: {{device: cpu, max_length: 64}}
    execution: {{environment: simulated}}
"""


@pytest.fixture(scope="module")
def team_loop(tmp_path_factory):
    """One round of the loop on an S3 root, as `orchrm loop` runs it with the planted secrets in its environment."""
    from moto.server import ThreadedMotoServer

    from orchrm_dagster.storage import StorageRoot
    from orchrm_dagster.synthetic import generate_runs, write_jsonl
    from tests.tiny_models import make_tiny_backbone, make_tiny_policy

    work = tmp_path_factory.mktemp("team")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    patch = pytest.MonkeyPatch()
    for name, value in TEST_CREDENTIALS.items():  # this process's own reads: not the planted keys
        patch.setenv(name, value)
    try:
        root = StorageRoot(ROOT_URL, endpoint)
        root.fs.mkdir(BUCKET)
        policy, backbone = make_tiny_policy(work / "policy"), make_tiny_backbone(work / "backbone")
        (work / "orchrm.yaml").write_text(SETTINGS.format(root=ROOT_URL, endpoint=endpoint, policy=policy,
                                                          backbone=backbone))
        # a fleet's writer puts its file into the landing zone; the loop cuts it into a batch
        fleet = work / "fleet-0001.jsonl"
        write_jsonl(generate_runs(FLEET_RUNS, seed=1, benchmarks=("gsm8k_test",), plans_decide=True, first_problem=80,
                                  environment="simulated"), fleet)
        root.fs.put_file(str(fleet), root.landing_path(fleet.name))
        env = {key: value for key, value in os.environ.items()
               if key not in ("ORCHRM_STORAGE", "ORCHRM_CONFIG", "DAGSTER_HOME", "ORCHRM_CACHE")}
        env.update(PLANTED_SECRETS, AWS_DEFAULT_REGION="us-east-1", ORCHRM_CONFIG=str(work / "orchrm.yaml"),
                   DAGSTER_HOME=str(work / "dagster_home"), ORCHRM_CACHE=str(work / "cache"), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1")
        started = time.monotonic()
        loop = orchrm_command("loop", "--rounds", "1", env=env, cwd=work, timeout=840)
        took = time.monotonic() - started
        assert loop.returncode == 0, loop.stdout[-4000:] + loop.stderr[-4000:]
        print(f"orchrm loop on the S3 root: {took:.0f} s", flush=True)
        yield {"work": work, "endpoint": endpoint, "root": root, "env": env, "loop": loop}
    finally:
        server.stop()
        patch.undo()


def rows(team_loop, statement: str) -> list[dict]:
    from orchrm_dagster.storage import StorageSettings

    warehouse = StorageSettings(root=ROOT_URL, s3_endpoint_url=team_loop["endpoint"]).warehouse()
    warehouse.refresh_views()
    return warehouse.query(statement).to_pylist()


def test_the_loop_runs_one_round_on_an_s3_root(team_loop):
    root = team_loop["root"]
    [runs] = rows(team_loop, "select count(*) n, count(distinct run_id) ids from runs")
    [rollout] = rows(team_loop, "select count(*) n, count(distinct batch_id) batches from runs "
                                "where policy_name = 'grpo-r0001'")
    assert rollout == {"n": 1, "batches": 1}  # 1 training problem x 1 sample, landed and ingested once
    assert runs == {"n": FLEET_RUNS + 1, "ids": FLEET_RUNS + 1}  # the fleet's file once, and the rollout
    assert rows(team_loop, "select count(*) n from labels") == [{"n": FLEET_RUNS + 1}]
    assert rows(team_loop, "select count(*) n from pairs")[0]["n"] > 0
    assert rows(team_loop, "select version from rm_checkpoints where is_champion") == [{"version": 1}]
    assert rows(team_loop, "select count(distinct run_id) n from rm_scores") == [{"n": FLEET_RUNS + 1}]
    [round_] = rows(team_loop, "select * from grpo_rounds")
    assert round_["round"] == 1 and round_["verdict"] == "promoted" and round_["environment"] == "simulated"
    [checkpoint] = rows(team_loop, "select * from policy_checkpoints")
    assert checkpoint["name"] == "grpo-r0001" and checkpoint["promoted"] and checkpoint["in_use"]
    published = root.path("checkpoints", "policy", "r0001")
    root.fs.invalidate_cache()
    assert root.fs.exists(f"{published}/manifest.json")
    assert any(name.endswith(".safetensors") for name in root.fs.find(published))  # the weights are in the bucket
    # this machine has never seen the round: it reads the loop's state (which fetches the round's manifest alone),
    # then takes the checkpoint as a rollout does: weights and all
    from orchrm_dagster.grpo import checkpoint_policies, policy_manifest
    from orchrm_dagster.storage.checkpoints import WHOLE

    assert policy_manifest(root, 1)
    [policy] = checkpoint_policies(root)
    local = Path(policy.checkpoint_path)
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and p.name != WHOLE) \
        == sorted(p.removeprefix(f"{published}/") for p in root.fs.find(published))
    assert "the loop stopped: the loop has run its 1 rounds" in team_loop["loop"].stdout


# ------------------------------------------------------------------------------------------------ planted secrets


def places_holding(secrets: list[str], folder: Path) -> list[str]:
    """Every file under `folder` holding one of `secrets` (its bytes, and each SQLite value zlib-decompressed, as
    Dagster keeps its job snapshots), as 'path: secret'."""
    wanted = [secret.encode() for secret in secrets]
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        blobs = [path.read_bytes()]
        if blobs[0].startswith(b"SQLite format 3"):
            blobs += list(sqlite_values(path))
        found += [f"{path}: {secret.decode()}" for secret in wanted if any(secret in blob for blob in blobs)]
    return found


def sqlite_values(path: Path):
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        for (table,) in db.execute("select name from sqlite_master where type = 'table'").fetchall():
            for row in db.execute(f'select * from "{table}"'):
                for value in row:
                    if isinstance(value, str):
                        yield value.encode()
                    elif isinstance(value, bytes):
                        yield value
                        with contextlib.suppress(zlib.error):
                            yield zlib.decompress(value)


def test_no_planted_secret_is_in_run_configs_logs_metadata_status_or_the_bucket(team_loop):
    import dagster as dg
    from dagster._serdes import serialize_value

    secrets = list(PLANTED_SECRETS.values())
    work, root, env, loop = team_loop["work"], team_loop["root"], team_loop["env"], team_loop["loop"]
    assert not [s for s in secrets if s in loop.stdout + loop.stderr]  # the loop's own log
    statuses = {args: subprocess.Popen([str(Path(sys.executable).with_name("orchrm")), *args], env=env, cwd=work,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for args in (("status",), ("status", "--format", "json"))}  # at once: each is mostly its imports
    for args, status in statuses.items():
        out, err = status.communicate(timeout=300)
        assert status.returncode == 0, out[-2000:] + err[-2000:]
        assert not [s for s in secrets if s in out + err], args
    assert json.loads(out)["loop"]["rounds"][-1]["round"] == 1  # the JSON status, read whole
    with dg.DagsterInstance.from_config(str(work / "dagster_home")) as instance:
        runs = instance.get_runs()
        assert len(runs) >= 9  # ingest, pairs, reward model, scores, round, rollout, ingest, pairs, scores
        by_reference = 0
        for run in runs:  # what Dagster stores of each run: its config, tags, job snapshot and event log (metadata)
            stored = json.dumps(run.run_config, default=str) + json.dumps(run.tags)
            stored += serialize_value(instance.get_job_snapshot(run.job_snapshot_id))
            stored += "".join(serialize_value(entry) for entry in instance.all_logs(run.run_id))
            assert not [s for s in secrets if s in stored], run.job_name
            by_reference += "OPENAI_API_KEY" in stored
        assert by_reference  # the search looks where the key would be: its variable's name is stored, not its value
    # every file written on this machine: the instance's SQLite storages and compute logs, the cache (checkpoint
    # mirrors, work folders, the warehouse file, training logs), the settings file
    assert places_holding(secrets, work) == []
    assert any("runs.db" in place for place in places_holding(["OPENAI_API_KEY"], work / "dagster_home"))
    root.fs.invalidate_cache()
    objects = root.fs.find(BUCKET)
    assert len(objects) > 20
    assert not [(path, s) for path in objects for s in secrets if s.encode() in root.fs.cat_file(path)]


# ------------------------------------------------------------------------------- the server stopped mid-write


class StoppableEndpoint:
    """A loopback TCP proxy in front of the S3 server: the endpoint the code under test is given. `stop()` is the
    server going away as its clients see it: every open connection reset, the port refusing new ones; `start()`
    serves again on the same port. `stop_at(marker, body_bytes)` stops it in the middle of an upload: once a client
    sends `marker` (a part of a request line: b"PUT /bucket/key"), the request's headers and `body_bytes` bytes of its
    body reach the server, and the rest never does."""

    def __init__(self, upstream: str):
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = 0
        self.listener: socket.socket | None = None
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.marker: bytes | None = None
        self.body_bytes = 0
        self.stopped_mid_request = threading.Event()
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.listener is not None:
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))  # the same port again after a stop
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self.lock:
            listener, self.listener = self.listener, None
            connections, self.connections = self.connections, []
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):  # a reset, as from a server that is gone, not an orderly close
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def stop_at(self, marker: bytes, body_bytes: int) -> None:
        self.marker, self.body_bytes = marker, body_bytes
        self.stopped_mid_request.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                server = socket.create_connection(self.upstream)
            except OSError:
                if self.listener is not listener:
                    return
                continue
            with self.lock:
                if self.listener is not listener:
                    client.close()
                    server.close()
                    return
                self.connections += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        request, sent = None, 0  # the marked request as far as it came (None: none on this connection)
        try:
            while data := source.recv(65536):
                if from_client and request is None and self.marker is not None and self.marker in data:
                    start = data.index(self.marker)
                    target.sendall(data[:start])
                    request, data, self.marker = b"", data[start:], None
                if request is None:
                    target.sendall(data)
                    continue
                request += data
                headers_end = request.find(b"\r\n\r\n")
                if headers_end < 0:  # its headers are passed on whole, with the part of its body that may pass
                    continue
                passed = headers_end + 4 + self.body_bytes
                target.sendall(request[sent:passed])
                sent = min(len(request), passed)
                if sent == passed:
                    self.stopped_mid_request.set()
                    self.stop()
                    return
            target.shutdown(socket.SHUT_WR)
        except OSError:
            return


@pytest.fixture
def stoppable(s3_endpoint, monkeypatch):
    # botocore tries a request 5 times by default, about 8 s before it gives up on a store that refuses connections
    # (an ingest: about 16 s): 2 tries fail the same way, sooner
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    proxy = StoppableEndpoint(s3_endpoint)
    yield proxy
    proxy.stop()


def test_the_server_stopped_mid_batch_write_leaves_the_batch_whole_and_the_ingest_succeeds_again(
        stoppable, tmp_path):
    import dagster as dg

    from assets.resources import StorageResource
    from assets.runs import failure_cause
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.storage import StoreUnreachable, land
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    storage = StorageResource(root="s3://faults/team", s3_endpoint_url=stoppable.url,
                              warehouse_path=str(tmp_path / "wh.duckdb"))
    root = storage.storage_root()
    root.fs.mkdir("faults")
    job = build_definitions(storage).resolve_job_def("ingest_run_batch")
    fleet = tmp_path / "fleet.jsonl"

    def ingest(instance, runs: int):
        write_jsonl(generate_runs(runs, seed=1, benchmarks=("gsm8k_test",)), fleet)  # the same runs, and more
        batch_id = land(root, fleet).batch_id  # landed again: the same batch
        instance.add_dynamic_partitions("run_batches", [batch_id])
        return batch_id, job.execute_in_process(partition_key=batch_id, instance=instance, raise_on_error=False)

    def counted(table: str = "runs") -> tuple[int, int]:
        warehouse = storage.warehouse()
        warehouse.refresh_views()
        with warehouse.connect() as con:
            return con.execute(f"select count(*), count(distinct run_id) from {table}").fetchone()

    timings = {}
    with orchrm_instance_for_test() as instance:
        batch_id, first = ingest(instance, 40)
        assert first.success and counted() == (40, 40)
        before = root.batch_files("runs", batch_id)

        # (a) the ingest of 60 runs (the 40, and 20 more) stopped mid-upload of its runs' part
        stoppable.stop_at(f"PUT /faults/team/tables/runs/batch_id%3D{batch_id}/g".encode(), 1024)  # keys URL-encoded
        started = time.monotonic()
        _, cut = ingest(instance, 60)
        timings["ingest failed after"] = round(time.monotonic() - started, 1)
        assert stoppable.stopped_mid_request.is_set() and not cut.success
        cause = failure_cause(cut.all_events)
        assert f"the object store at {stoppable.url} could not be reached while writing a new generation of " \
               f"s3://faults/team/tables/runs/batch_id={batch_id}" in cause, cause
        assert "readers see the batch as it was" in cause
        stoppable.start()
        root.fs.invalidate_cache()
        assert root.batch_files("runs", batch_id) == before and counted() == (40, 40)  # the old batch, whole
        started = time.monotonic()
        _, again = ingest(instance, 60)  # as the loop's next attempt runs it: same process, no lease to wait out
        timings["ingest run again"] = round(time.monotonic() - started, 1)
        assert again.success and counted() == counted("labels") == (60, 60)
        assert timings["ingest run again"] < 120  # the lease the cut ingest could not remove was not waited out

        # (b) a batch of three parts replacing it, stopped mid-upload of its second part
        import pyarrow.parquet as pq

        table = pq.read_table(root.fs.open(root.batch_files("runs", batch_id)[0]))
        parts = []
        for index, start in enumerate((0, 20, 40)):
            parts.append(str(tmp_path / f"part{index}.parquet"))
            pq.write_table(table.slice(start, 20), parts[-1])
        current = root.batch_files("runs", batch_id)
        stoppable.stop_at(b"/part-0001.parquet HTTP/1.1", 1024)
        started = time.monotonic()
        with pytest.raises(StoreUnreachable, match="readers see the batch as it was"):
            root.replace_batch("runs", batch_id, parts)
        timings["replace_batch failed after"] = round(time.monotonic() - started, 1)
        stoppable.start()
        root.fs.invalidate_cache()
        assert root.batch_files("runs", batch_id) == current and counted() == (60, 60)  # never the old and a new part
        for index, start in enumerate((0, 20, 40)):  # the parts were consumed by the first try: written again
            pq.write_table(table.slice(start, 20), parts[index])
        root.replace_batch("runs", batch_id, parts)
        assert len(root.batch_files("runs", batch_id)) == 3 and counted() == (60, 60)
    print("timings (s):", timings)


def test_the_server_stopped_mid_checkpoint_upload_publishes_no_torn_version_and_the_training_succeeds_again(
        stoppable, tmp_path, monkeypatch, tiny_backbone):
    from orchrm_dagster.rm import RMTrainConfig, checkpoint_table, train_new_version
    from orchrm_dagster.storage import StorageRoot, StoreUnreachable
    from orchrm_dagster.storage.checkpoints import WHOLE

    from .rm.toy import NO_FLOOR, toy_pairs

    def versions(machine: str) -> list[tuple[int, bool]]:
        monkeypatch.setenv("ORCHRM_CACHE", str(tmp_path / f"cache-{machine}"))
        return [(r["version"], r["is_champion"]) for r in checkpoint_table(
            StorageRoot("s3://faults/team", stoppable.url)).to_pylist()]

    monkeypatch.setenv("ORCHRM_CACHE", str(tmp_path / "cache-trainer"))
    root = StorageRoot("s3://faults/team", stoppable.url)
    root.fs.mkdir("faults")
    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4, **NO_FLOOR)
    assert train_new_version(root, toy_pairs(8, 0), toy_pairs(4, 1), config, ["p1"]).version == 1

    stoppable.stop_at(b"PUT /faults/team/checkpoints/rm/v0002/model/model.safetensors", 100_000)  # in the weights
    timings = {}
    started = time.monotonic()
    with pytest.raises(StoreUnreachable) as failed:
        train_new_version(root, toy_pairs(8, 2), toy_pairs(4, 1), config, ["p2"])
    timings["publish failed after"] = round(time.monotonic() - started, 1)
    assert stoppable.stopped_mid_request.is_set()
    assert (f"the object store at {stoppable.url} could not be reached while publishing "
            f"s3://faults/team/checkpoints/rm/v0002") in str(failed.value)
    stoppable.start()
    root.fs.invalidate_cache()
    assert not root.fs.exists(root.path("checkpoints", "rm", "v0002", "manifest.json"))
    assert versions("trainer") == [(1, True)]  # the machine that trained it does not take it for finished either
    assert versions("fresh") == [(1, True)]

    monkeypatch.setenv("ORCHRM_CACHE", str(tmp_path / "cache-trainer"))
    started = time.monotonic()
    again = train_new_version(root, toy_pairs(8, 2), toy_pairs(4, 1), config, ["p2"])
    timings["trained and published again"] = round(time.monotonic() - started, 1)
    assert again.version == 2  # the same number: nothing landed twice
    assert versions("trainer") == versions("another") == [(1, False), (2, True)]
    root.fs.invalidate_cache()
    published = root.fs.find(root.path("checkpoints", "rm", "v0002"))
    trained = next((tmp_path / "cache-trainer").rglob("v0002"))
    assert sorted(p.rsplit("v0002/", 1)[1] for p in published) == sorted(
        p.relative_to(trained).as_posix() for p in trained.rglob("*") if p.is_file() and p.name != WHOLE
    )  # exactly the trained folder's files: none left over from the upload cut short
    print("timings (s):", timings)
