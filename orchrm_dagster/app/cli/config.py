"""`orchrm config`: the settings in effect and where each came from, and a check of a settings file."""

from __future__ import annotations

import json
from pathlib import Path

import click

from orchrm_dagster.app.cli.common import console


@click.group(name="config")
def command() -> None:
    """The settings in effect and where each came from (show); validate a settings file (check). The settings file
    is orchrm.yaml in the working directory, or --config FILE / $ORCHRM_CONFIG."""


@command.command(name="show")
@click.option("--all", "everything", is_flag=True, help="Every setting, defaults too (default: those the file or "
                                                        "the environment set).")
@click.argument("prefix", required=False)
def show(everything: bool, prefix: str | None) -> None:
    """The settings in effect, each with where it came from: the file and its line, an environment variable, or
    the default. PREFIX (e.g. `loop.round`) shows only the keys under it."""
    from orchrm_dagster.settings import load_settings, setting_sources
    from orchrm_dagster.settings_file import read_settings_file

    file = read_settings_file()
    console.print(f"# settings file: {file.path or 'none (orchrm.yaml here, or --config FILE)'}", soft_wrap=True,
                  markup=False, highlight=False)
    shown = 0
    for key, value, source in setting_sources(load_settings(), file):
        if (everything or source != "default") and (not prefix or key == prefix or key.startswith(prefix + ".")):
            console.print(f"{key}: {json.dumps(value)}  # {source}", soft_wrap=True, markup=False, highlight=False)
            shown += 1
    if not shown:
        console.print("# every setting has its default (orchrm config show --all lists them)", markup=False,
                      highlight=False)


@command.command(name="check")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=False)
def check(file: Path | None) -> None:
    """Validate FILE (default: the settings file in effect): each mistake with its file, line and key, exit 1."""
    from orchrm_dagster.settings import load_settings
    from orchrm_dagster.settings_file import SettingsError, read_settings_file, settings_path

    path = file or settings_path()
    if path is None:
        raise click.ClickException("no settings file: orchrm.yaml here, --config FILE, $ORCHRM_CONFIG, or FILE")
    try:
        load_settings(path)
    except SettingsError as err:
        raise click.ClickException(str(err)) from None
    read = read_settings_file(path)
    console.print(f"{read.path}: valid ({len(read.lines)} keys)", soft_wrap=True, markup=False, highlight=False)
