"""The Dagster instance settings the loop runs on: run monitoring (a run whose worker died, or that never started, is
failed after a start timeout) and a limit on each pool (one warehouse writer, one model on the accelerator). They
live in DAGSTER_HOME/dagster.yaml, which Dagster reads when a process starts; orchrm writes the file wherever it has
none (every orchrm command, and the loop's sensor on its first tick: a daemon started on a bare DAGSTER_HOME writes it
there) and rewrites an older one of its own, but leaves a user's file alone, and one of its own that a user edited
(its first line carries a digest of the rest: a `storage: postgres` added by hand is kept, never reverted). The loop
does not wait for a daemon started before the file existed to be restarted: its own reaper (assets/runs.py) fails
the runs a crash left behind and its pools get explicit limits. A user's file without them stops the loop, with what is missing and the lines that
fix it (`settings_problem`). No Dagster import here: `orchrm status` on a new root writes the file without it."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

OWNED_MARK = "# Written by orchrm."
START_TIMEOUT_S = 180  # Dagster's default run_monitoring.start_timeout_seconds
POOL_LIMIT = 1
_BODY = f"""\
concurrency:
  pools:
    default_limit: {POOL_LIMIT}
run_monitoring:
  enabled: true  # a run whose worker died is marked failed (and the reaper frees its pool slots)
  start_timeout_seconds: {START_TIMEOUT_S}  # a run launched but never started (its launcher killed) is failed
nux:
  enabled: false  # no newsletter dialog on a fresh instance
telemetry:
  enabled: false
"""


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _signed(body: str) -> str:
    """orchrm's file: its first line says so and carries a digest of the rest, so an edit by hand is told apart."""
    return (f"{OWNED_MARK} sha256:{_digest(body)} of the lines below; edit them and orchrm leaves this file alone.\n"
            f"# One writer at a time in the 'warehouse' pool, one reward model in 'gpu', one policy in 'policy'.\n"
            + body)


DAGSTER_YAML = _signed(_BODY)
# orchrm's files before the digest, rewritten as its own: the only two it ever wrote
_UNSIGNED = tuple(f"{OWNED_MARK} One writer at a time for steps in the 'warehouse' pool, one model at a time in the "
                  f"'gpu' pool.\n" + body for body in (
                      _BODY.replace(f"  start_timeout_seconds: {START_TIMEOUT_S}  # a run launched but never started "
                                    f"(its launcher killed) is failed\n", ""), _BODY))
FIX = {"run monitoring": "run_monitoring: {enabled: true}",
       "a pool limit": f"concurrency: {{pools: {{default_limit: {POOL_LIMIT}}}}}"}


def write_instance_settings(home: Path) -> bool:
    """Writes orchrm's dagster.yaml into `home` (created) when it has none, or rewrites an older one of orchrm's own.
    Returns whether the file is orchrm's: False when it is a user's, or one of orchrm's that a user edited (its
    digest no longer matches), which is left as it is."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    before = config.read_text() if config.exists() else None
    if before is not None and not is_orchrms(before):
        return False
    if before != DAGSTER_YAML:
        partial = config.with_name(f".dagster.yaml.{os.getpid()}.partial")  # one per process: two may write at once
        partial.write_text(DAGSTER_YAML)
        partial.replace(config)  # whole or not at all: a process reading it meanwhile sees the old file or the new one
    return True


def is_orchrms(text: str) -> bool:
    """Whether a dagster.yaml is orchrm's as orchrm wrote it (this version's, or an older one's), not a user's file
    nor one of orchrm's that a user edited."""
    if text in _UNSIGNED:
        return True
    first, _, rest = text.partition("\n")
    match = re.match(rf"{re.escape(OWNED_MARK)} sha256:([0-9a-f]{{16}}) ", first)
    body = rest.split("\n", 1)[1] if rest.startswith("# ") else rest  # the comment line below the mark
    return match is not None and match.group(1) == _digest(body)


def missing_settings(instance) -> list[str]:
    """What the running instance (as its process read dagster.yaml when it started) lacks of orchrm's settings."""
    missing = []
    if not instance.run_monitoring_enabled:
        missing.append("run monitoring")
    if instance.global_op_concurrency_default_limit is None:
        missing.append("a pool limit")
    return missing


def settings_problem(instance) -> str | None:
    """None when the loop can run on this instance: it has orchrm's settings, or its dagster.yaml is orchrm's (written
    now if there was none: this process started before it existed, and the loop's reaper and explicit pool limits
    stand in until the next start). Else why the loop waits, what is missing and the lines that fix it."""
    missing = missing_settings(instance)
    if not missing:
        return None
    home = Path(instance.root_directory)
    if write_instance_settings(home):
        return None
    lines = "; ".join(f"`{FIX[name]}`" for name in missing)
    return (f"the loop waits: the Dagster instance at {home} runs without {' and '.join(missing)}, and its "
            f"dagster.yaml is not orchrm's, so orchrm leaves it alone: add {lines} to {home / 'dagster.yaml'} and "
            f"restart the daemon (without them a run whose worker was killed could stay in flight for ever, and two "
            f"steps could write the warehouse at once)")


def orchrm_settings_apply(instance) -> bool:
    """Whether orchrm's settings are this instance's own, or its dagster.yaml is orchrm's (the daemon started
    before it was written): then pools get orchrm's limit even where the running instance has no default."""
    config = Path(instance.root_directory) / "dagster.yaml"
    return not config.exists() or is_orchrms(config.read_text())
