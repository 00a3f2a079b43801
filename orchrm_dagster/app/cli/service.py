"""`orchrm service`: the daemon and the UI as services on a team's machine (install, status, uninstall); the
definitions themselves are written by orchrm_dagster/app/service.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from orchrm_dagster.app.cli.common import console
from orchrm_dagster.app.service import (
    CARRIED_ENV,
    COMPOSE_FILE,
    DEFAULT_IMAGE,
    MANAGERS,
    ROLES,
    SUPERVISORD_CONF,
    ServicePlan,
    compose_file,
    plan_env,
    read_record,
    service_lines,
    service_report,
    supervisord_conf,
    systemctl_works,
    systemd_units,
    systemd_user_dir,
    workspace_yaml,
    write_record,
)


@click.group(name="service")
def command() -> None:
    """Run the loop's daemon and the UI as services (systemd, supervisord, docker compose). `install` writes their
    definitions for the settings file and DAGSTER_HOME in effect (restarted on failure, started at boot), `status`
    says whether they run (`orchrm status` does too), `uninstall` stops and removes them. The page:
    docs/guide/service.md."""


def _say(line: str, style: str | None = None) -> None:
    console.print(line, style=style, soft_wrap=True, markup=False, highlight=False)


def _dagster_home(given: Path | None) -> Path:
    from orchrm_dagster.app.dagster_home import default_dagster_home

    chosen = given or (Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else default_dagster_home())
    return Path(chosen).expanduser().resolve()


def _tool(name: str) -> str | None:
    """The executable beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


@command.command(name="install")
@click.option("--manager", type=click.Choice(MANAGERS), default=None,
              help="What keeps them running: systemd user units, a supervisord config (pip install supervisor; no "
                   "root, no systemd), or a docker compose file.  [default: systemd where systemctl is, else "
                   "supervisord]")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The settings file the services run on (default: the one in effect: orchrm --config, "
                   "$ORCHRM_CONFIG, ./orchrm.yaml).")
@click.option("--dagster-home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Their Dagster instance (default: $DAGSTER_HOME, else the storage root's, the one every orchrm "
                   "command uses).")
@click.option("--host", default="127.0.0.1", show_default=True, help="The UI's address (0.0.0.0: every interface).")
@click.option("--port", default=3000, show_default=True, type=int, help="The UI's port.")
@click.option("--name", default="orchrm", show_default=True,
              help="The services' prefix: NAME-daemon, NAME-ui (one per instance on a machine).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the definitions go (default: ~/.config/systemd/user for systemd, DAGSTER_HOME/service for "
                   "supervisord and compose).")
@click.option("--env", "extra_env", multiple=True, metavar="KEY=VALUE",
              help="Also set in the services' environment (repeatable).")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True,
              help="compose: the project's image (docker build -f deploy/Dockerfile -t orchrm:cpu .).")
@click.option("--now", is_flag=True, help="Start them now (systemd: and enable them, so they start at boot).")
def install(manager: str | None, config_file: Path | None, dagster_home: Path | None, host: str, port: int, name: str,
            out: Path | None, extra_env: tuple[str, ...], image: str, now: bool) -> None:
    """Write the definitions of two services, NAME-daemon (`dagster-daemon run`: the loop's sensors, schedules and
    run queue) and NAME-ui (`dagster-webserver`), on the settings file and DAGSTER_HOME in effect: the venv's
    executables by absolute path, ORCHRM_CONFIG, DAGSTER_HOME and the storage root in their environment, the
    settings file's folder as their working directory, restarted whenever they exit, started at boot. Then print
    (or, with --now, run) what starts them. Installing again rewrites them (after an upgrade, say)."""
    from orchrm_dagster.settings import load_settings
    from orchrm_dagster.settings_file import read_settings_file, settings_path
    from orchrm_dagster.storage import default_storage_url

    manager = manager or ("systemd" if shutil.which("systemctl") else "supervisord")
    if config_file is not None:
        os.environ["ORCHRM_CONFIG"] = str(config_file.resolve())
    settings = settings_path()
    if settings is not None:
        load_settings(settings)  # a file that breaks its schema is refused here, with its line, not by the services
    else:
        _say("no settings file (orchrm.yaml here, --config FILE or $ORCHRM_CONFIG): the services run on the "
             "defaults", "yellow")
    extra = dict(_key_value(item) for item in extra_env)
    root = default_storage_url()
    if "://" not in root:
        root = str(Path(root).expanduser().resolve())
    named_by_file = settings is not None and read_settings_file(settings).given(("storage", "root"))
    home = _dagster_home(dagster_home)
    os.environ["DAGSTER_HOME"] = str(home)
    from orchrm_dagster.app.instance import cli_instance

    cli_instance()  # created now, under its lock: the two services starting together would race on a bare one
    bin_dir = Path(sys.executable).parent
    if manager != "compose":
        missing = [exe for exe in ("dagster-daemon", "dagster-webserver") if not (bin_dir / exe).exists()]
        if missing:
            raise click.ClickException(f"{', '.join(missing)} not beside {sys.executable}: install orchrm into this "
                                       f"environment (pip install -e .)")
    service_dir = (out if out is not None and manager != "systemd" else home / "service").expanduser().resolve()
    env = plan_env(settings, home, None if named_by_file and not os.environ.get("ORCHRM_STORAGE") else root,
                   f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                   {k: os.environ[k] for k in CARRIED_ENV if os.environ.get(k)}, extra)
    plan = ServicePlan(name=name, bin_dir=bin_dir, service_dir=service_dir,
                       working_dir=settings.parent if settings is not None else Path.cwd().resolve(),
                       env=env, host=host, port=port)
    before = read_record(home)
    if before is not None and before.get("manager") != manager:
        _say(f"replaces the {before.get('manager')} services installed for this instance before: stop them "
             f"(orchrm service uninstall) unless this one is meant to take over", "yellow")
    plan.log_dir.mkdir(parents=True, exist_ok=True)
    files = {plan.workspace: workspace_yaml(None if manager == "compose" else Path(sys.executable))}
    record = {"manager": manager, "name": name, "units": {role: plan.unit(role) for role in ROLES},
              "ui_url": plan.ui_url, "settings_file": str(settings) if settings else None, "storage_root": root,
              "dagster_home": str(home), "working_dir": str(plan.working_dir)}
    if manager == "systemd":
        unit_dir = (out or systemd_user_dir()).expanduser().resolve()
        files.update({unit_dir / file: text for file, text in systemd_units(plan).items()})
        record["logs"] = f"journalctl --user -u {plan.unit('daemon')} -u {plan.unit('ui')} -f"
        units = " ".join(f"{plan.unit(role)}.service" for role in ROLES)
        steps = [("start them now, and with your service manager from now on:", [
            "systemctl --user daemon-reload", f"systemctl --user enable --now {units}"]),
                 ("start them at boot, before anyone logs in:", ["loginctl enable-linger $USER"]),
                 ("after an upgrade (pip install, a new settings file):", [f"systemctl --user restart {units}"])]
        if unit_dir != systemd_user_dir().resolve():
            linked = " ".join(str(unit_dir / f"{plan.unit(role)}.service") for role in ROLES)
            steps[0][1].insert(0, f"systemctl --user link {linked}")
    elif manager == "supervisord":
        supervisord, supervisorctl = _tool("supervisord"), _tool("supervisorctl")
        if supervisord is None or supervisorctl is None:
            raise click.ClickException("supervisord is not installed here: pip install supervisor (into this venv)")
        conf = service_dir / SUPERVISORD_CONF
        files[conf] = supervisord_conf(plan)
        record.update(supervisord_conf=str(conf), supervisord=supervisord, supervisorctl=supervisorctl,
                      logs=str(plan.log_dir))
        steps = [("start them (supervisord starts both, and restarts each whenever it exits):",
                  [f"{supervisord} -c {conf}"]),
                 ("start them at boot (crontab -e, then this line):", [f"@reboot {supervisord} -c {conf}"]),
                 ("after an upgrade, or a new settings file:", [f"{supervisorctl} -c {conf} restart all"])]
    else:
        compose = service_dir / COMPOSE_FILE
        mounts = [home, service_dir, plan.working_dir] + ([Path(root)] if "://" not in root else [])
        files[compose] = compose_file(plan, image, mounts, f"{os.getuid()}:{os.getgid()}")
        record.update(compose_file=str(compose), logs=f"docker compose -f {compose} logs -f")
        steps = [("start them (restarted unless stopped by hand, after a reboot too once the Docker engine "
                  "starts at boot):", [f"docker compose -f {compose} up -d"]),
                 ("after an upgrade (a new image), or a new settings file:",
                  [f"docker compose -f {compose} up -d --force-recreate"])]
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    record["files"] = [str(path) for path in files]
    written = write_record(home, record)
    _say(f"orchrm services for {settings or 'the defaults'} (DAGSTER_HOME {home}, storage {root}), {manager}:")
    for path in files:
        _say(f"  wrote {path}")
    _say(f"  recorded in {written} (orchrm status and orchrm service status read it)")
    for title, lines in steps:
        _say(title)
        for line in lines:
            _say(f"  {line}")
    _say(f"the UI: {plan.ui_url}; logs: {record['logs']}")
    if now:
        _start(manager, record, plan)


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{item!r}: KEY=VALUE", param_hint="--env")
    return key, value


def _run(argv: list[str]) -> None:
    _say(f"$ {' '.join(argv)}")
    done = subprocess.run(argv, capture_output=True, text=True)
    for line in (done.stdout + done.stderr).splitlines():
        _say(f"  {line}")
    if done.returncode != 0:
        raise click.ClickException(f"{' '.join(argv)} failed (exit {done.returncode})")


def _start(manager: str, record: dict, plan: ServicePlan) -> None:
    units = [f"{unit}.service" for unit in record["units"].values()]
    if manager == "systemd":
        if not systemctl_works():
            raise click.ClickException("systemctl --user cannot reach your service manager here (no user session: "
                                       "a container, or ssh without lingering); the unit files are written, run the "
                                       "lines above in a login session")
        _run(["systemctl", "--user", "daemon-reload"])
        _run(["systemctl", "--user", "enable", "--now", *units])
    elif manager == "supervisord":
        ctl, conf = record["supervisorctl"], record["supervisord_conf"]
        if subprocess.run([ctl, "-c", conf, "pid"], capture_output=True, text=True).stdout.strip().isdigit():
            _run([ctl, "-c", conf, "reread"])  # running already: the changed programs restart, new ones start
            _run([ctl, "-c", conf, "update"])
        else:
            _run([record["supervisord"], "-c", conf])
    else:
        _run(["docker", "compose", "-f", record["compose_file"], "up", "-d"])


@command.command(name="status")
@click.option("--dagster-home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The instance whose services (default: $DAGSTER_HOME, else the storage root's).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(dagster_home: Path | None, fmt: str) -> None:
    """Whether each service installed for the instance runs now, as its manager says."""
    home = _dagster_home(dagster_home)
    report = service_report(home)
    if fmt == "json":
        click.echo(json.dumps(report, indent=2))
        return
    if report is None:
        raise click.ClickException(f"no services installed for the instance at {home} (orchrm service install)")
    for line, style in service_lines(report):
        _say(line, style)


@command.command(name="uninstall")
@click.option("--dagster-home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The instance whose services (default: $DAGSTER_HOME, else the storage root's).")
def uninstall(dagster_home: Path | None) -> None:
    """Stop the services installed for the instance and remove their definitions (their logs, the instance and the
    data stay)."""
    home = _dagster_home(dagster_home)
    record = read_record(home)
    if record is None:
        raise click.ClickException(f"no services installed for the instance at {home}")
    units = [f"{unit}.service" for unit in record["units"].values()]
    if record["manager"] == "systemd":
        if systemctl_works():
            _run(["systemctl", "--user", "disable", "--now", *units])
        else:
            _say(f"systemctl --user cannot reach your service manager here: in a login session, run "
                 f"systemctl --user disable --now {' '.join(units)}", "yellow")
    elif record["manager"] == "supervisord":
        ctl, conf = record["supervisorctl"], record["supervisord_conf"]
        if subprocess.run([ctl, "-c", conf, "pid"], capture_output=True, text=True).stdout.strip().isdigit():
            _run([ctl, "-c", conf, "shutdown"])  # supervisord stops both, then itself
    elif shutil.which("docker"):
        subprocess.run(["docker", "compose", "-f", record["compose_file"], "down"])
    for file in record.get("files", []):
        Path(file).unlink(missing_ok=True)
        _say(f"removed {file}")
    if record["manager"] == "systemd" and systemctl_works():
        _run(["systemctl", "--user", "daemon-reload"])
    Path(record["record"]).unlink(missing_ok=True)
    if record["manager"] == "supervisord":
        _say(f"left: the logs in {record.get('logs')}; remove the @reboot line from your crontab if you added it")
