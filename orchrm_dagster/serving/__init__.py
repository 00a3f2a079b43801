"""The scoring service behind `orchrm serve`: the champion reward model scores an orchestrator's candidate plans over
HTTP (FastAPI + uvicorn), batching concurrent requests and reloading when the champion changes (no Dagster)."""

from __future__ import annotations

from orchrm_dagster.serving.app import create_app
from orchrm_dagster.serving.settings import ServeSettings
from orchrm_dagster.storage import StorageRoot

__all__ = ["ServeSettings", "create_app", "serve"]


def serve(root: StorageRoot, settings: ServeSettings = ServeSettings()) -> None:
    """Run the service in the foreground until interrupted."""
    import uvicorn

    uvicorn.run(create_app(root, settings), host=settings.host, port=settings.port, log_level="info")
