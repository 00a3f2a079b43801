"""An object store that does not answer, said once for every writer: a connection refused, reset or timed out while a
step writes a batch or a checkpoint to an S3 root is raised as `StoreUnreachable`, whose one-line message names the
store's endpoint, what was being written, the error, and what readers see meanwhile (`reaching_store`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager


class StoreUnreachable(ConnectionError):
    """The object store of a root could not be reached; nothing the step was writing is read as whole, and the
    step succeeds when run again once the store answers."""


def _connection_errors() -> tuple[type[BaseException], ...]:
    """What s3fs raises when the store is gone: botocore's connection errors (refused, closed, timed out), aiohttp's
    (a connection reset mid-request) and the builtin ones they wrap."""
    import aiohttp
    from botocore.exceptions import ConnectionError as BotocoreConnectionError
    from botocore.exceptions import HTTPClientError

    return BotocoreConnectionError, HTTPClientError, aiohttp.ClientError, ConnectionError, TimeoutError


def endpoint_of(root) -> str:
    """The endpoint a root's object store is reached at, as a person configured it."""
    return root.s3_endpoint_url or f"{root.protocol}'s default endpoint"


@contextmanager
def reaching_store(root, doing: str, readers_see: str) -> Iterator[None]:
    """The block writes to `root`'s object store (a local root: nothing changes). A connection failure there raises
    StoreUnreachable: `the object store at http://minio:9000 could not be reached while <doing> (EndpointConnection
    Error: Could not connect to the endpoint URL: "..."); readers see <readers_see>: run the step again once the store
    answers`. The original error stays in the traceback, not as the cause: a step's failure shows its innermost
    cause, which would be the bare `Connect call failed ('10.0.0.5', 9000)`."""
    if root.is_local:
        yield
        return
    try:
        yield
    except StoreUnreachable:
        raise
    except _connection_errors() as error:
        said = re.sub(r"\s+", " ", str(error)).strip()
        message = (f"the object store at {endpoint_of(root)} could not be reached while {doing} "
                   f"({type(error).__name__}: {said}); readers see {readers_see}: run the step again once the store "
                   f"answers")
        raise StoreUnreachable(message).with_traceback(error.__traceback__) from None
