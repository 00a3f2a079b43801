"""The application above the code location: the `orchrm` CLI, its in-process commands, the main job, `orchrm loop`
and the Dagster instance they share. It imports `orchrm_dagster.definitions` and `assets/`; nothing below imports it."""
