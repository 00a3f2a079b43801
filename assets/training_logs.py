"""A training's logs as asset metadata (`training_logs`), and read back from a run for the CLI."""

from __future__ import annotations

import dagster as dg

from orchrm_dagster.training_logs import TrainingLogs

ENTRY = "training_logs"


def training_logs_metadata(logs: list[TrainingLogs]) -> dict:
    """{"training_logs": the folder (a path) or tracking URI (a URL)} of the materialization's training; one per
    run name when it trained several (per-domain reward models); {} when they report nowhere."""
    located = {entry.run_name: entry.location for entry in logs if entry.location is not None}
    if not located:
        return {}
    if len(located) > 1:
        return {ENTRY: dg.MetadataValue.json(located)}
    [location] = located.values()
    return {ENTRY: dg.MetadataValue.url(location) if "://" in location else dg.MetadataValue.path(location)}


def logged_trainings(result) -> list[tuple[str, object]]:
    """(asset, where its training logs are) for each materialization of an in-process run that has them."""
    found = []
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        if ENTRY in materialization.metadata:
            found.append((materialization.asset_key.to_user_string(), materialization.metadata[ENTRY].value))
    return found
