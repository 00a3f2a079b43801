"""The scoring service behind `orchrm serve`: the champion reward model scores an orchestrator's candidate plans over
HTTP (FastAPI + uvicorn), batching concurrent requests and reloading when the champion changes (no Dagster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchrm_dagster.lazy_names import lazy_names

if TYPE_CHECKING:
    from orchrm_dagster.serving.settings import ServeSettings
    from orchrm_dagster.storage import StorageRoot

# reading the settings (ServeSettings) imports no FastAPI
_EXPORTS = {"create_app": "app", "TOKEN_ENV": "door", "ServeTokenError": "door", "refuse_to_listen_openly": "door",
            "serve_token": "door", "ServeSettings": "settings"}
__getattr__, __dir__, __all__ = lazy_names(__name__, _EXPORTS, eager=("serve",))


def serve(root: StorageRoot, settings: ServeSettings | None = None) -> None:
    """Run the service in the foreground until interrupted: behind the token of ORCHRM_SERVE_TOKEN or
    `settings.token_file` when there is one; without one, on a loopback address only (a `ServeTokenError` says how
    to set one)."""
    import uvicorn

    from orchrm_dagster.serving.app import create_app
    from orchrm_dagster.serving.door import refuse_to_listen_openly, serve_token
    from orchrm_dagster.serving.settings import ServeSettings

    settings = settings or ServeSettings()
    token = serve_token(settings)
    refuse_to_listen_openly(settings.host, token)
    uvicorn.run(create_app(root, settings, token), host=settings.host, port=settings.port, log_level="info")
