"""The scoring service behind `orchrm serve`: the champion reward model scores an orchestrator's candidate plans over
HTTP (FastAPI + uvicorn), batching concurrent requests and reloading when the champion changes (no Dagster)."""

from __future__ import annotations

from orchrm_dagster.serving.app import create_app
from orchrm_dagster.serving.door import TOKEN_ENV, ServeTokenError, refuse_to_listen_openly, serve_token
from orchrm_dagster.serving.settings import ServeSettings
from orchrm_dagster.storage import StorageRoot

__all__ = ["TOKEN_ENV", "ServeSettings", "ServeTokenError", "create_app", "serve", "serve_token"]


def serve(root: StorageRoot, settings: ServeSettings = ServeSettings()) -> None:
    """Run the service in the foreground until interrupted: behind the token of ORCHRM_SERVE_TOKEN or
    `settings.token_file` when there is one; without one, on a loopback address only (a `ServeTokenError` says how
    to set one)."""
    import uvicorn

    token = serve_token(settings)
    refuse_to_listen_openly(settings.host, token)
    uvicorn.run(create_app(root, settings, token), host=settings.host, port=settings.port, log_level="info")
