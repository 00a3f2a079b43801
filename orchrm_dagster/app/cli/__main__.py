from orchrm_dagster.app.cli import run

run()
