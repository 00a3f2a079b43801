import click

from orchrm_dagster.app.cli.options import apply_options, config_options
from orchrm_dagster.serving.settings import ServeSettings


@click.command(name="serve")
# no flag for the token (token_file or ORCHRM_SERVE_TOKEN): a command line shows in `ps`
@config_options(ServeSettings, "host", "port", "max_batch_plans", "max_wait_ms", "poll_seconds", "max_plans",
                "scoring.device", "scoring.dtype", "scoring.backend", "scoring.vllm_url", "scoring.vllm_model")
@click.pass_context
def command(ctx: click.Context, **_) -> None:
    """Serve the champion reward model over HTTP: POST /v1/score {question, plans, domain?} -> scores, chosen.

    With a token in $ORCHRM_SERVE_TOKEN (or a file serving.token_file names), every request but GET /v1/health must
    send `Authorization: Bearer <token>`; without one, the service listens on loopback only."""
    from orchrm_dagster.serving import serve
    from orchrm_dagster.settings import load_settings

    # the settings file's storage and serving sections without building the Definitions: the service process never
    # imports Dagster
    settings = load_settings()
    serve(settings.storage.storage_root(), apply_options(settings.serving, ctx))
