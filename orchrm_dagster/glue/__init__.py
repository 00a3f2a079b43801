"""The Dagster glue: resources, run configs generated from the engine's configs, the instance, in-process commands
and the CLI. Only this package and `orchrm_dagster.definitions` import Dagster or `assets`."""
