"""The service's door: a bearer token that every request but `GET /v1/health` must carry, and the rule that a
service without one listens on loopback only.

The token comes from the ORCHRM_SERVE_TOKEN environment variable, else from the file `serving.token_file` names (the
variable wins when both are set, as the environment wins over the settings file elsewhere); never from a flag, which
every user of the machine sees in `ps`. The check runs before anything reads the request's body, so a request
without the token costs no parsing and no scoring. Neither the token nor anything sent in its place is ever logged
or echoed.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from starlette.responses import JSONResponse

from orchrm_dagster.serving.settings import ServeSettings

log = logging.getLogger(__name__)

TOKEN_ENV = "ORCHRM_SERVE_TOKEN"
OPEN_PATHS = frozenset({"/v1/health"})
MAKE_ONE = "`openssl rand -hex 32` makes one"
HOW_TO_SET = (f"set {TOKEN_ENV} in the service's environment, or serving.token_file in the settings file to a file "
              f"holding it ({MAKE_ONE})")


class ServeTokenError(ValueError):
    """The token cannot be read, or the service would listen beyond loopback without one."""


def serve_token(settings: ServeSettings, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token requests must carry (ORCHRM_SERVE_TOKEN's, else `settings.token_file`'s), None when neither is set."""
    if TOKEN_ENV in environ:
        if settings.token_file:
            log.warning("%s is set: serving.token_file (%s) is not read", TOKEN_ENV, settings.token_file)
        return _checked(environ[TOKEN_ENV], f"the {TOKEN_ENV} environment variable",
                        f"set it to the token ({MAKE_ONE}), or unset it")
    if settings.token_file:
        return _checked(_read_token_file(settings.token_file), f"serving.token_file {settings.token_file}",
                        f"write the token into it ({MAKE_ONE})")
    return None


def _read_token_file(name: str) -> str:
    path = Path(name).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ServeTokenError(f"serving.token_file {name}: cannot read it ({error.strerror}): name a file this "
                              f"user can read, holding the token ({MAKE_ONE})") from None
    except UnicodeDecodeError:  # its message would quote a byte of the file
        raise ServeTokenError(f"serving.token_file {name}: not UTF-8 text: write the token into it "
                              f"({MAKE_ONE})") from None
    if path.stat().st_mode & 0o077:
        log.warning("serving.token_file %s can be read by other users of this machine: chmod 600 it", name)
    return text


def _checked(text: str, source: str, fix: str) -> str:
    token = text.strip()  # a file's trailing newline; a header cannot carry surrounding spaces anyway
    if not token:
        raise ServeTokenError(f"{source} is empty: {fix}")
    if not all("!" <= char <= "~" for char in token):
        raise ServeTokenError(f"{source} holds a space, a control character or a non-ASCII character, which an "
                              f"Authorization header cannot carry: use letters, digits and punctuation ({MAKE_ONE})")
    return token


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name other than localhost may resolve to any address
        return False


def refuse_to_listen_openly(host: str, token: str | None) -> None:
    """Raises unless the service may listen on `host`: beyond loopback only with a token."""
    if token is None and not is_loopback(host):
        raise ServeTokenError(f"refusing to listen on {host} without a bearer token: anyone who reaches the port "
                              f"could have plans scored. To require one, {HOW_TO_SET}; clients then send "
                              f"`Authorization: Bearer <token>`. Or listen on this machine only: --host 127.0.0.1")


def presented_token(scope) -> bytes | None:
    """The credentials of the request's `Authorization: Bearer ...` header, None without one."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            return credentials.strip() if scheme.lower() == b"bearer" else None
    return None


def carries(scope, token: str) -> bool:
    """Whether the request carries `token` (compared in constant time)."""
    presented = presented_token(scope)
    return presented is not None and hmac.compare_digest(presented, token.encode())


class BearerToken:
    """Answers 401 to a request that does not carry the token (but for OPEN_PATHS), before anything reads its body."""

    def __init__(self, app, token: str):
        self.app = app
        self.token = token

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or carries(scope, self.token):
            return await self.app(scope, receive, send)
        if presented_token(scope) is None:
            error, challenge = ("this service needs a bearer token: send the header `Authorization: Bearer <token>` "
                                "with the token it was started with", 'Bearer realm="orchrm"')
        else:
            error, challenge = "wrong bearer token", 'Bearer realm="orchrm", error="invalid_token"'
        response = JSONResponse({"error": error}, status_code=401, headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)
