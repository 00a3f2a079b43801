"""The loop as a service: the definitions that keep the Dagster daemon (the loop's sensors, schedules and run queue)
and the UI (dagster-webserver) running on a team's machine, on the team's settings file and DAGSTER_HOME, restarted
when they die and started at boot; and whether they run now.

Three managers: systemd user units (`~/.config/systemd/user/<name>-daemon.service`, `<name>-ui.service`), a
supervisord config (supervisord from PyPI: no root, no systemd), and a docker compose file (the image
deploy/Dockerfile builds). Each runs what tests/test_daemon_loop.py runs for real: `dagster-daemon run -w
WORKSPACE`, and `dagster-webserver -w WORKSPACE`, each with its own code server (Dagster starts one per process and
stops it with its parent). The executables are the venv's, by absolute path; the environment carries ORCHRM_CONFIG,
DAGSTER_HOME and, where the settings file does not name it, the storage root (ORCHRM_STORAGE).

What was installed is recorded in DAGSTER_HOME (`RECORD`), so `orchrm status` and `orchrm service status` on that
instance say whether each service runs (`service_report`). Standard library only: `orchrm status` imports this
module without Dagster, torch or transformers (tests/structure/test_cli_imports.py). docs/guide/service.md is the
page."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

MANAGERS = ("systemd", "supervisord", "compose")
ROLES = ("daemon", "ui")
RECORD = "orchrm-services.json"  # in DAGSTER_HOME: the services installed for that instance
WORKSPACE = "workspace.yaml"
SUPERVISORD_CONF = "supervisord.conf"
COMPOSE_FILE = "compose.yaml"
DEFAULT_IMAGE = "orchrm:cpu"  # docker build -f deploy/Dockerfile -t orchrm:cpu .
# set in the installing shell, carried into the services (never credentials: `--env` or an EnvironmentFile for those)
CARRIED_ENV = ("ORCHRM_DEPLOYMENT", "ORCHRM_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_WHAT = {"daemon": "the Dagster daemon: the loop's sensors, schedules and run queue",
         "ui": "the Dagster UI (dagster-webserver)"}
_QUERY_TIMEOUT_S = 15.0
_UNIX_SOCKET_MAX = 100  # sun_path holds 108 bytes; a longer path goes to the temporary folder


@dataclasses.dataclass(frozen=True)
class ServicePlan:
    """What the services run, and where: everything a manager's definitions are written from."""

    name: str  # the prefix of each service's name: <name>-daemon, <name>-ui
    bin_dir: Path  # the venv's bin: dagster-daemon, dagster-webserver, python
    service_dir: Path  # the workspace file (and, for supervisord and compose, the definitions and the logs)
    working_dir: Path  # the settings file's folder, else where `orchrm service install` ran
    env: dict[str, str]  # ORCHRM_CONFIG, DAGSTER_HOME, ORCHRM_STORAGE (when needed), PATH, ...
    host: str = "127.0.0.1"
    port: int = 3000

    @property
    def workspace(self) -> Path:
        return self.service_dir / WORKSPACE

    @property
    def log_dir(self) -> Path:
        return self.service_dir / "logs"

    @property
    def ui_url(self) -> str:
        host = "localhost" if self.host in ("0.0.0.0", "::", "127.0.0.1") else self.host
        return f"http://{host}:{self.port}"

    def unit(self, role: str) -> str:
        return f"{self.name}-{role}"

    def argv(self, role: str, bin_dir: Path | None = None) -> list[str]:
        """The command of `role`; `bin_dir` None: the executables by name (in a container, on its PATH)."""
        exe = (lambda name: str(bin_dir / name)) if bin_dir is not None else (lambda name: name)
        if role == "daemon":
            return [exe("dagster-daemon"), "run", "-w", str(self.workspace)]
        return [exe("dagster-webserver"), "-w", str(self.workspace), "-h", self.host, "-p", str(self.port)]


def plan_env(settings_file: Path | None, dagster_home: Path, storage_root: str | None, path: str,
             carried: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """The services' environment: `storage_root` is given when the settings file does not name the root (or
    ORCHRM_STORAGE did), so the services use the root the installing command used."""
    env = {"DAGSTER_HOME": str(dagster_home)}
    if settings_file is not None:
        env["ORCHRM_CONFIG"] = str(settings_file)
    if storage_root:
        env["ORCHRM_STORAGE"] = storage_root
    env["PATH"] = path
    env["PYTHONUNBUFFERED"] = "1"  # each line in the log as it is written
    env.update({k: v for k, v in carried.items() if k not in env})
    env.update(extra)
    for key, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or any(c in value for c in '"\n\\'):
            raise ValueError(f"{key}={value!r}: the services' environment takes names of letters, digits and _, and "
                             f"values without quotes, backslashes or newlines")
    return env


def workspace_yaml(python: Path | None) -> str:
    """The code location the services load: the project's Definitions by module (an installed package needs no
    checkout); `python` None: the interpreter on the container's PATH."""
    lines = ["# Written by `orchrm service install`: the code location the daemon and the UI load.", "load_from:",
             "  - python_module:", "      module_name: orchrm_dagster.definitions", "      location_name: orchrm"]
    if python is not None:
        lines.append(f"      executable_path: {json.dumps(str(python))}")
    return "\n".join(lines) + "\n"


# --- systemd -------------------------------------------------------------------------------------------------------

def systemd_user_dir() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "systemd" / "user"


def _systemd_word(arg: str) -> str:
    """One ExecStart argument: quoted when it holds blanks or quotes, specifiers (%) and variables ($) escaped."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if re.search(r"[\s\"'\\;]", arg):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def systemd_units(plan: ServicePlan) -> dict[str, str]:
    """File name -> text of each user unit: restarted whatever the way it ended, started with the user's service
    manager (at boot once lingering is enabled)."""
    units = {}
    for role in ROLES:
        env = "\n".join(f'Environment="{k}={v.replace("%", "%%")}"' for k, v in plan.env.items())
        after = "" if role == "daemon" else f"\nAfter={plan.unit('daemon')}.service"
        units[f"{plan.unit(role)}.service"] = f"""\
# Written by `orchrm service install`; `orchrm service uninstall` removes it.
[Unit]
Description=orchrm: {_WHAT[role]}{' on ' + plan.ui_url if role == 'ui' else ''}{after}
StartLimitIntervalSec=0

[Service]
Type=simple
WorkingDirectory={str(plan.working_dir).replace('%', '%%')}
{env}
ExecStart={' '.join(_systemd_word(a) for a in plan.argv(role, plan.bin_dir))}
Restart=always
RestartSec=10
KillMode=control-group
TimeoutStopSec=90

[Install]
WantedBy=default.target
"""
    return units


# --- supervisord ---------------------------------------------------------------------------------------------------

def supervisor_socket(service_dir: Path) -> Path:
    """The control socket: beside the config, or in the temporary folder when that path is too long for a socket."""
    socket = service_dir / "supervisor.sock"
    if len(str(socket)) <= _UNIX_SOCKET_MAX:
        return socket
    digest = hashlib.sha256(str(service_dir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"orchrm-supervisor-{digest}.sock"


def _supervisor_value(text: str) -> str:
    return text.replace("%", "%%")  # supervisord expands %(name)s in commands, paths and the environment


def supervisord_conf(plan: ServicePlan) -> str:
    """A supervisord config of its own (control socket, pid file and logs in the service folder) with both
    programs: started with supervisord, restarted whenever they exit, their process groups stopped together."""
    socket = _supervisor_value(str(supervisor_socket(plan.service_dir)))
    logs = _supervisor_value(str(plan.log_dir))
    environment = ",".join(f'{k}="{_supervisor_value(v)}"' for k, v in plan.env.items())
    # a program's environment is supervisord's (the shell that started it) plus these: a root or settings file
    # that shell names, and the plan does not, is taken away
    unset = [arg for name in ("ORCHRM_STORAGE", "ORCHRM_CONFIG") if name not in plan.env for arg in ("-u", name)]
    unset = ["/usr/bin/env", *unset] if unset else []
    conf = _supervisor_value(str(plan.service_dir / SUPERVISORD_CONF))
    text = f"""\
; Written by `orchrm service install --manager supervisord`; start: supervisord -c {conf}
[unix_http_server]
file={socket}
chmod=0700

[supervisord]
logfile={logs}/supervisord.log
pidfile={_supervisor_value(str(plan.service_dir / 'supervisord.pid'))}
childlogdir={logs}
directory={_supervisor_value(str(plan.working_dir))}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{socket}
"""
    for role in ROLES:
        text += f"""
[program:{plan.unit(role)}]
; {_WHAT[role]}
command={_supervisor_value(shlex.join(unset + plan.argv(role, plan.bin_dir)))}
directory={_supervisor_value(str(plan.working_dir))}
environment={environment}
autostart=true
autorestart=true
startsecs=5
startretries=100
stopsignal=TERM
stopwaitsecs=90
stopasgroup=true
killasgroup=true
redirect_stderr=true
stdout_logfile={logs}/{plan.unit(role)}.log
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=5
"""
    return text


# --- docker compose ------------------------------------------------------------------------------------------------

def compose_file(plan: ServicePlan, image: str, mounts: list[Path], uid_gid: str | None) -> str:
    """Both services in containers of the project's image, restarted unless stopped by hand (so after a reboot, with
    the Docker engine started at boot). Host folders are mounted at their own paths, so the settings file's absolute
    paths, DAGSTER_HOME and a local storage root read the same inside; the image's k8s profile is set back to local."""
    env = {**{k: v for k, v in plan.env.items() if k != "PATH"}, "ORCHRM_DEPLOYMENT": plan.env.get(
        "ORCHRM_DEPLOYMENT", "local")}
    volumes = [f"{m}:{m}" for m in dict.fromkeys(str(m) for m in mounts)]
    services = {}
    for role in ROLES:
        inside = dataclasses.replace(plan, host="0.0.0.0")
        service = {"image": image, "command": inside.argv(role), "working_dir": str(plan.working_dir),
                   "environment": env, "volumes": volumes, "restart": "unless-stopped"}
        if uid_gid:
            service["user"] = uid_gid
        if role == "ui":
            service["ports"] = [f"{plan.host}:{plan.port}:{plan.port}"]
            service["depends_on"] = [plan.unit("daemon")]
        services[plan.unit(role)] = service
    return ("# Written by `orchrm service install --manager compose`; start: docker compose -f "
            f"{plan.service_dir / COMPOSE_FILE} up -d\n" + json.dumps({"name": plan.name, "services": services},
                                                                      indent=2) + "\n")  # JSON is YAML


# --- the record, and whether the services run ------------------------------------------------------------------------

def write_record(dagster_home: Path, record: dict) -> Path:
    path = dagster_home / RECORD
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def read_record(dagster_home: Path | None = None) -> dict | None:
    home = dagster_home or (Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else None)
    path = home / RECORD if home is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return {**json.loads(path.read_text()), "record": str(path)}
    except (OSError, ValueError):
        return None


def _run(argv: list[str], cwd: str | None = None) -> subprocess.CompletedProcess | str:
    """The command's result, or why it could not run."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=_QUERY_TIMEOUT_S, cwd=cwd)
    except FileNotFoundError:
        return f"{argv[0]} not found"
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{argv[0]}: {error}"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _systemd_states(units: dict[str, str]) -> dict[str, tuple[bool | None, str]]:
    found = {}
    for role, unit in units.items():
        done = _run(["systemctl", "--user", "show", "--property=LoadState,ActiveState,SubState,MainPID,NRestarts",
                     f"{unit}.service"])
        if isinstance(done, str) or done.returncode != 0:
            why = done if isinstance(done, str) else _first_line(done.stderr) or f"exit {done.returncode}"
            found[role] = (None, f"unknown: systemctl --user cannot tell ({why})")
            continue
        props = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        if props.get("LoadState") == "not-found":
            found[role] = (False, "not loaded by systemd (systemctl --user daemon-reload)")
        elif props.get("ActiveState") == "active":
            restarts = props.get("NRestarts", "0")
            found[role] = (True, f"active ({props.get('SubState')}), pid {props.get('MainPID')}, "
                                 f"restarted {restarts} time(s)")
        else:
            found[role] = (False, f"{props.get('ActiveState')} ({props.get('SubState')})")
    return found


_SUPERVISOR_STATES = {"STOPPED", "STARTING", "RUNNING", "BACKOFF", "STOPPING", "EXITED", "FATAL", "UNKNOWN"}


def _supervisord_states(record: dict) -> dict[str, tuple[bool | None, str]]:
    units = record["units"]
    ctl = record.get("supervisorctl") or "supervisorctl"
    done = _run([ctl, "-c", record["supervisord_conf"], "status", *units.values()])
    if isinstance(done, str):
        return dict.fromkeys(units, (None, f"unknown: {done}"))
    states = {}
    for line in done.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1] in _SUPERVISOR_STATES:
            states[parts[0]] = (parts[1], " ".join(parts[1:]))
    if not states:  # supervisord itself does not answer
        said = _first_line(done.stdout + "\n" + done.stderr)
        if "SHUTDOWN_STATE" in said:
            return dict.fromkeys(units, (False, "supervisord is shutting down"))
        return dict.fromkeys(units, (False, f"supervisord is not running ({said[:160]}); start it: "
                                            f"{record.get('supervisord') or 'supervisord'} -c "
                                            f"{record['supervisord_conf']}"))
    return {role: (states[unit][0] == "RUNNING", states[unit][1]) if unit in states
            else (False, "unknown to supervisord") for role, unit in units.items()}


def _compose_states(record: dict) -> dict[str, tuple[bool | None, str]]:
    units = record["units"]
    done = _run(["docker", "compose", "-f", record["compose_file"], "ps", "--all", "--format", "json"])
    if isinstance(done, str) or done.returncode != 0:
        why = done if isinstance(done, str) else _first_line(done.stderr) or f"exit {done.returncode}"
        return dict.fromkeys(units, (None, f"unknown: docker compose ps cannot tell ({why})"))
    text = done.stdout.strip()
    try:
        rows = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines() if line]
    except ValueError:
        rows = []
    by_service = {row.get("Service"): row for row in rows if isinstance(row, dict)}
    return {role: (by_service[unit].get("State") == "running", by_service[unit].get("Status") or
                   by_service[unit].get("State", "")) if unit in by_service else (False, "no container")
            for role, unit in units.items()}


def service_report(dagster_home: Path | None = None) -> dict | None:
    """The services installed for the instance at `dagster_home` (default: $DAGSTER_HOME) and whether each runs
    now, as the manager says; None when none were installed there."""
    record = read_record(dagster_home)
    if record is None or record.get("manager") not in MANAGERS:
        return None
    states = {"systemd": lambda: _systemd_states(record["units"]), "supervisord": lambda: _supervisord_states(record),
              "compose": lambda: _compose_states(record)}[record["manager"]]()
    return {"manager": record["manager"], "record": record["record"], "ui_url": record.get("ui_url"),
            "logs": record.get("logs"),
            "units": [{"name": unit, "role": role, "running": states[role][0], "state": states[role][1]}
                      for role, unit in record["units"].items()]}


def service_lines(report: dict | None) -> list[tuple[str, str | None]]:
    """(line, style) of each service for a terminal; nothing when none were installed."""
    if report is None:
        return []
    lines = []
    for unit in report["units"]:
        what = _WHAT.get(unit["role"], unit["role"]) + (f", {report['ui_url']}" if unit["role"] == "ui" else "")
        said = {True: "running", False: "NOT running", None: "state unknown"}[unit["running"]]
        style = {True: None, False: "red", None: "yellow"}[unit["running"]]
        lines.append((f"service {unit['name']} ({what}; {report['manager']}): {said}: {unit['state']}", style))
    lines.append((f"  logs: {report['logs']}", None))
    return lines


def systemctl_works() -> bool:
    """Whether the user's service manager answers (it does not in a container, or over ssh without a session)."""
    if shutil.which("systemctl") is None:
        return False
    done = _run(["systemctl", "--user", "is-system-running"])
    return not isinstance(done, str) and bool(done.stdout.strip()) and "Failed to connect" not in done.stderr
