"""The loop as a service (`orchrm service install`, docs/guide/service.md): the systemd units' content (and
`systemd-analyze verify` where it runs), the supervisord config as supervisord itself reads it, the compose file; and,
slow, the loop under a real supervisord as the page starts it: a batch lands, the daemon killed with SIGKILL is
restarted and the next lands, supervisord stopped whole and started again (a reboot) and a third lands, and `orchrm
status` says both services run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml
from click.testing import CliRunner

from orchrm_dagster.app.cli import main
from tests.conftest import drop

BIN = Path(sys.executable).parent


@pytest.fixture
def team(tmp_path, monkeypatch):
    """A team's settings file in a folder of its own (a blank and a % in its name: quoting), naming its root."""
    folder = tmp_path / "team 50%"
    folder.mkdir()
    settings = folder / "orchrm.yaml"
    settings.write_text("storage: {root: storage}\n")
    monkeypatch.delenv("ORCHRM_STORAGE")  # the file's root, not the test's
    return settings


def _install(*args: str) -> str:
    result = CliRunner().invoke(main, ["service", "install", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _unit(path: Path) -> dict[str, list[str]]:
    """key -> values of a unit file (Environment= repeats)."""
    found: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def _environment(values: list[str]) -> dict[str, str]:
    return dict(v.strip('"').split("=", 1) for v in values)


def test_the_systemd_units_run_the_venvs_daemon_and_ui_on_the_teams_settings_and_instance(team, tmp_path):
    out = _install("--manager", "systemd", "--config", str(team), "--out", str(tmp_path / "units"), "--port", "3111")
    home = Path(os.environ["DAGSTER_HOME"]).resolve()
    daemon, ui = _unit(tmp_path / "units/orchrm-daemon.service"), _unit(tmp_path / "units/orchrm-ui.service")
    for unit in (daemon, ui):
        argv = unit["ExecStart"][0].split()
        assert Path(argv[0]).parent == BIN and os.access(argv[0], os.X_OK)
        assert argv[argv.index("-w") + 1] == str(home / "service/workspace.yaml")
        env = _environment(unit["Environment"])
        assert env["ORCHRM_CONFIG"] == str(team).replace("%", "%%") and env["DAGSTER_HOME"] == str(home)
        assert "ORCHRM_STORAGE" not in env  # the file names the root (with its endpoint, its warehouse file)
        assert env["PATH"].split(":")[0] == str(BIN)
        assert unit["WorkingDirectory"] == [str(team.parent).replace("%", "%%")]
        assert unit["Restart"] == ["always"] and unit["WantedBy"] == ["default.target"]
    assert Path(daemon["ExecStart"][0].split()[0]).name == "dagster-daemon" and "run" in daemon["ExecStart"][0]
    assert ui["ExecStart"][0].split()[0].endswith("/dagster-webserver") and ui["ExecStart"][0].endswith("-p 3111")
    workspace = yaml.safe_load((home / "service/workspace.yaml").read_text())["load_from"][0]["python_module"]
    assert workspace["module_name"] == "orchrm_dagster.definitions" and workspace["executable_path"] == sys.executable
    assert (home / "dagster.yaml").exists()  # the instance made before the two services race to make it
    assert "systemctl --user enable --now orchrm-daemon.service orchrm-ui.service" in out
    assert "loginctl enable-linger $USER" in out
    record = json.loads((home / "orchrm-services.json").read_text())
    assert record["manager"] == "systemd" and record["units"] == {"daemon": "orchrm-daemon", "ui": "orchrm-ui"}
    _verify(tmp_path / "units/orchrm-daemon.service", tmp_path / "units/orchrm-ui.service")


def _verify(*units: Path) -> None:
    """systemd-analyze verify, in the user's manager where it starts, else the system's (a container has no user
    session); skipped where neither starts."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze here")
    for mode in (["--user"], []):
        done = subprocess.run(["systemd-analyze", *mode, "verify", *map(str, units)], capture_output=True,
                              text=True, timeout=120)
        if "Failed to initialize manager" in done.stderr or "Failed to lookup RuntimeDirectory" in done.stderr:
            continue
        assert done.returncode == 0 and not any(u.name in done.stderr for u in units), done.stderr
        return
    pytest.skip("systemd-analyze cannot start a manager here")


def test_without_a_root_in_the_file_the_units_name_the_root_the_install_used(tmp_path, monkeypatch):
    settings = tmp_path / "team" / "orchrm.yaml"
    settings.parent.mkdir()
    settings.write_text("loop: {rounds: 3}\n")
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "elsewhere"))
    _install("--manager", "systemd", "--config", str(settings), "--out", str(tmp_path / "units"))
    env = _environment(_unit(tmp_path / "units/orchrm-daemon.service")["Environment"])
    assert env["ORCHRM_STORAGE"] == str((tmp_path / "elsewhere").resolve())


def test_supervisord_reads_the_programs_as_written(team, tmp_path, monkeypatch):
    from supervisor.datatypes import RestartUnconditionally
    from supervisor.options import ServerOptions

    _install("--manager", "supervisord", "--config", str(team), "--out", str(tmp_path / "svc"), "--port", "3112",
             "--env", "HF_HOME=/models/hf cache")
    home = Path(os.environ["DAGSTER_HOME"]).resolve()
    options = ServerOptions()
    options.realize(args=["-c", str(tmp_path / "svc/supervisord.conf")])
    programs = {group.name: group.process_configs[0] for group in options.process_group_configs}
    assert set(programs) == {"orchrm-daemon", "orchrm-ui"}
    for program in programs.values():
        assert program.autostart and program.autorestart is RestartUnconditionally
        assert program.stopasgroup and program.killasgroup
        assert program.directory == str(team.parent)
        assert program.environment["ORCHRM_CONFIG"] == str(team) and program.environment["DAGSTER_HOME"] == str(home)
        assert program.environment["HF_HOME"] == "/models/hf cache"
        # the shell that starts supervisord may name another root: taken away, the file's is read
        assert program.command.split()[:3] == ["/usr/bin/env", "-u", "ORCHRM_STORAGE"]
    assert programs["orchrm-daemon"].command.split()[3:] == [str(BIN / "dagster-daemon"), "run", "-w",
                                                             str(tmp_path / "svc/workspace.yaml")]
    assert programs["orchrm-ui"].command.endswith("-h 127.0.0.1 -p 3112")


def test_the_compose_file_runs_both_in_the_image_restarted_with_the_host_paths_mounted(team, tmp_path):
    _install("--manager", "compose", "--config", str(team), "--out", str(tmp_path / "compose"), "--port", "3113")
    compose = yaml.safe_load((tmp_path / "compose/compose.yaml").read_text())
    daemon, ui = compose["services"]["orchrm-daemon"], compose["services"]["orchrm-ui"]
    for service in (daemon, ui):
        assert service["restart"] == "unless-stopped" and service["image"] == "orchrm:cpu"
        assert service["environment"]["ORCHRM_CONFIG"] == str(team)
        assert service["environment"]["ORCHRM_DEPLOYMENT"] == "local"  # the image's own is k8s
        assert f"{team.parent}:{team.parent}" in service["volumes"]
        assert f"{team.parent / 'storage'}:{team.parent / 'storage'}" in service["volumes"]
    assert daemon["command"][:2] == ["dagster-daemon", "run"] and ui["ports"] == ["127.0.0.1:3113:3113"]
    workspace = yaml.safe_load((tmp_path / "compose/workspace.yaml").read_text())["load_from"][0]["python_module"]
    assert "executable_path" not in workspace  # the container's python


def test_uninstall_removes_what_install_wrote(team, tmp_path):
    _install("--manager", "supervisord", "--config", str(team), "--out", str(tmp_path / "svc"))
    assert json.loads(CliRunner().invoke(main, ["service", "status", "--format", "json"]).output)["units"][0][
        "running"] is False  # supervisord not started
    result = CliRunner().invoke(main, ["service", "uninstall"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "svc/supervisord.conf").exists()
    assert not (Path(os.environ["DAGSTER_HOME"]) / "orchrm-services.json").exists()
    assert CliRunner().invoke(main, ["service", "status", "--format", "json"]).output.strip() == "null"


# --- the loop under a real supervisord ------------------------------------------------------------------------------

TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Supervised:
    def __init__(self, conf: Path, env: dict):
        self.conf, self.env = conf, env
        self.ctl = str(BIN / "supervisorctl")

    def start(self) -> None:  # as the page says: supervisord -c CONF (it goes to the background itself)
        subprocess.run([str(BIN / "supervisord"), "-c", str(self.conf)], env=self.env, check=True, timeout=60)

    def pid(self, program: str) -> int | None:
        said = subprocess.run([self.ctl, "-c", str(self.conf), "pid", program], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        return int(said) if said.isdigit() and int(said) > 0 else None

    def supervisord_pid(self) -> int | None:
        pidfile = self.conf.with_name("supervisord.pid")
        return int(pidfile.read_text()) if pidfile.exists() else None

    def shutdown(self) -> None:
        """Stops both programs and supervisord, and waits until every process of theirs is gone."""
        pid = self.supervisord_pid()
        if pid is None or not psutil.pid_exists(pid):
            return
        try:
            family = [pid] + [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        subprocess.run([self.ctl, "-c", str(self.conf), "shutdown"], capture_output=True, timeout=60)
        _, alive = psutil.wait_procs([psutil.Process(p) for p in family if psutil.pid_exists(p)], timeout=150)
        for process in alive:  # only what this test started
            process.kill()
        assert not alive, f"still running after shutdown: {[p.pid for p in alive]}"


def _wait(what: str, condition, timings: dict, started: float) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if condition():
            timings[what] = round(time.monotonic() - started, 1)
            print(f"{what}: {timings[what]} s", flush=True)
            return
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_loop_under_supervisord_survives_a_sigkill_and_a_reboot(tmp_path, monkeypatch):
    from orchrm_dagster.storage import StorageRoot, StorageSettings
    from orchrm_dagster.synthetic import generate_runs, write_jsonl
    from tests.tiny_models import make_tiny_backbone

    backbone = make_tiny_backbone(tmp_path / "backbone")  # the loop's first retraining in seconds, not minutes
    team = tmp_path / "team"
    team.mkdir()
    settings = team / "orchrm.yaml"
    settings.write_text(yaml.safe_dump({
        "storage": {"root": "storage"},
        "loop": {"batching": {"interval_s": 1, "settle_s": 1},
                 "reward_model": {"backbone": backbone, "max_length": 64, "epochs": 1, "batch_size": 8,
                                  "device": "cpu", "min_validation_pairs": 1}},
        "scoring": {"device": "cpu", "max_length": 64}}))
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "not-the-teams-root"))  # the shell's: the services drop it
    port = _free_port()
    installed = subprocess.run([sys.executable, "-m", "orchrm_dagster.app.cli", "--config", str(settings), "service",
                                "install", "--manager", "supervisord", "--port", str(port)],
                               env={k: v for k, v in os.environ.items() if k != "ORCHRM_STORAGE"},
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    home = Path(os.environ["DAGSTER_HOME"]).resolve()
    supervised = Supervised(home / "service/supervisord.conf", {**os.environ, "OMP_NUM_THREADS": "1"})
    root = StorageRoot(str(team / "storage"))
    warehouse = StorageSettings(root=str(team / "storage")).warehouse()

    def runs() -> int | None:
        try:
            warehouse.refresh_views()
            return warehouse.query("select count(*) n from runs").to_pylist()[0]["n"]
        except Exception:  # noqa: BLE001 (not written yet, or being rebuilt)
            return None

    def land(number: int) -> None:
        write_jsonl(generate_runs(20, seed=number, benchmarks=("gsm8k_test",), plans_decide=True,
                                  first_problem=80 + 20 * number), tmp_path / f"batch-{number}.jsonl")
        drop(root, tmp_path / f"batch-{number}.jsonl")

    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        supervised.start()
        land(1)
        _wait("batch 1 ingested", lambda: runs() == 20, timings, started)

        started = time.monotonic()
        killed = supervised.pid("orchrm-daemon")
        os.kill(killed, signal.SIGKILL)
        _wait("the daemon restarted", lambda: supervised.pid("orchrm-daemon") not in (None, killed), timings,
              started)
        land(2)
        _wait("batch 2 ingested", lambda: runs() == 40, timings, started)

        started = time.monotonic()
        before = (supervised.pid("orchrm-daemon"), supervised.pid("orchrm-ui"))
        supervised.shutdown()  # the reboot: everything down, then supervisord started as at boot
        assert not any(psutil.pid_exists(pid) for pid in before)
        supervised.start()
        land(3)
        _wait("batch 3 ingested after the reboot", lambda: runs() == 60, timings, started)

        def ui_answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as response:
                    return response.status == 200
            except OSError:
                return False

        _wait("the UI answers", ui_answers, timings, started)
        env = {k: v for k, v in os.environ.items() if k != "ORCHRM_STORAGE"}
        status = subprocess.run([sys.executable, "-m", "orchrm_dagster.app.cli", "--config", str(settings), "status",
                                 "--format", "json"], env=env, capture_output=True, text=True, timeout=300)
        assert status.returncode == 0, status.stderr
        services = json.loads(status.stdout)["services"]
        assert services["manager"] == "supervisord"
        assert [(u["name"], u["running"]) for u in services["units"]] == [("orchrm-daemon", True), ("orchrm-ui", True)]
        table = subprocess.run([sys.executable, "-m", "orchrm_dagster.app.cli", "--config", str(settings), "status"],
                               env=env, capture_output=True, text=True, timeout=300)
        assert "service orchrm-daemon" in table.stdout and "NOT running" not in table.stdout, table.stdout
    finally:
        supervised.shutdown()
    print("timings (s):", timings)
