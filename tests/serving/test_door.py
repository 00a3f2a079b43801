"""The service's door: the bearer token (from ORCHRM_SERVE_TOKEN or serving.token_file), 401 before the body is read
and before anything is scored, health without the token, and no listening beyond loopback without one. The real
`orchrm serve` behind a token is in test_service.py's subprocess test."""

import socket

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from orchrm_dagster.serving import TOKEN_ENV, ServeSettings, ServeTokenError, create_app, serve_token
from orchrm_dagster.serving.door import is_loopback
from orchrm_dagster.settings import load_settings
from orchrm_dagster.storage import StorageRoot
from tests.serving.conftest import TEST_SETTINGS, running

TOKEN = "s3cret-door-token-0123456789"
WITH_TOKEN = {"Authorization": f"Bearer {TOKEN}"}
ASK = {"question": "What is 12 * 7?", "plans": ["<agent_name>CoTAgent</agent_name>"]}


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)


@pytest.fixture(scope="module")
def guarded(champion_root):
    """The base URL of a service that requires TOKEN."""
    with running(create_app(champion_root, TEST_SETTINGS, token=TOKEN)) as url:
        yield url


# --- where the token comes from --------------------------------------------------------------------------------


def test_the_token_is_the_environments_else_the_files_without_its_newline(tmp_path):
    token_file = tmp_path / "serve.token"
    token_file.write_text("from-the-file\n")
    settings = ServeSettings(token_file=str(token_file))
    assert serve_token(settings, environ={}) == "from-the-file"
    assert serve_token(settings, environ={TOKEN_ENV: "from-the-env"}) == "from-the-env"  # the environment wins
    assert serve_token(ServeSettings(), environ={}) is None


def test_a_relative_token_file_is_found_beside_the_settings_file(tmp_path, monkeypatch):
    folder = tmp_path / "deploy"
    (folder / "secrets").mkdir(parents=True)
    (folder / "secrets" / "serve.token").write_text(f"{TOKEN}\n")
    (folder / "orchrm.yaml").write_text("serving:\n  token_file: secrets/serve.token\n")
    monkeypatch.chdir(tmp_path)  # another folder: the path is the settings file's
    serving = load_settings(folder / "orchrm.yaml").serving
    assert serving.token_file == str(folder / "secrets" / "serve.token")
    assert serve_token(serving, environ={}) == TOKEN


@pytest.mark.parametrize("environ, file_text, says", [
    ({TOKEN_ENV: ""}, None, f"the {TOKEN_ENV} environment variable is empty"),
    ({TOKEN_ENV: " \n"}, None, f"the {TOKEN_ENV} environment variable is empty"),
    ({}, "\n", "serving.token_file {file} is empty"),
    ({}, "two words-s3cret\n", "serving.token_file {file} holds a space"),
    ({}, b"\xffs3cret", "serving.token_file {file}: not UTF-8 text"),
    ({}, None, "serving.token_file {file}: cannot read it (No such file or directory)"),
])
def test_an_empty_or_unreadable_token_is_refused_naming_where_it_was_looked_for(tmp_path, environ, file_text, says):
    token_file = tmp_path / "serve.token"
    if isinstance(file_text, bytes):
        token_file.write_bytes(file_text)
    elif file_text is not None:
        token_file.write_text(file_text)
    settings = ServeSettings(token_file=None if environ else str(token_file))
    with pytest.raises(ServeTokenError) as refused:
        serve_token(settings, environ=environ)
    assert says.format(file=token_file) in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_a_token_file_others_can_read_is_warned_about(tmp_path, caplog):
    token_file = tmp_path / "serve.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    serve_token(ServeSettings(token_file=str(token_file)), environ={})
    assert "can be read by other users of this machine: chmod 600" in caplog.text and TOKEN not in caplog.text
    caplog.clear()
    token_file.chmod(0o600)
    serve_token(ServeSettings(token_file=str(token_file)), environ={})
    assert not caplog.text


# --- where the service may listen ------------------------------------------------------------------------------


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.4.5.6", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LocalHost", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("rm.example.com", False),
    ("", False)])
def test_loopback_is_127_0_0_0_8_the_ipv6_one_and_localhost(host, loopback):
    assert is_loopback(host) is loopback


def _serve(args: list[str], monkeypatch) -> tuple:
    """`orchrm serve ARGS` with uvicorn.run recorded instead of run: (the CLI's result, [(app, host)])."""
    from orchrm_dagster.app.cli import main

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **_: started.append((app, host)))
    return CliRunner().invoke(main, ["serve", *args]), started


def test_serve_refuses_to_listen_beyond_loopback_without_a_token_and_says_how_to_set_one(monkeypatch):
    result, started = _serve(["--host", "0.0.0.0"], monkeypatch)
    assert result.exit_code == 1 and not started
    assert "refusing to listen on 0.0.0.0 without a bearer token" in result.output
    assert TOKEN_ENV in result.output and "serving.token_file" in result.output and "127.0.0.1" in result.output
    result, started = _serve([], monkeypatch)  # loopback, the default: no token needed
    assert result.exit_code == 0, result.output
    assert started[0][1] == "127.0.0.1"


def test_serve_listens_anywhere_with_a_token_and_never_shows_it(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    result, started = _serve(["--host", "0.0.0.0"], monkeypatch)
    assert result.exit_code == 0, result.output
    (app, host), = started
    assert host == "0.0.0.0" and TOKEN not in result.output
    assert [m.cls.__name__ for m in app.user_middleware] == ["BearerToken", "BodyLimit"]  # the door outermost


# --- the door, over HTTP ---------------------------------------------------------------------------------------


def test_a_request_without_the_token_or_with_a_wrong_one_is_answered_401_and_scores_nothing(guarded):
    with httpx.Client(base_url=guarded, timeout=60) as http:  # one connection: a refused body does not poison it
        before = http.get("/v1/stats", headers=WITH_TOKEN).json()
        missing = http.post("/v1/score", json=ASK)
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer <token>" in missing.json()["error"]
        for credentials in ("Bearer wrong-guess", f"Bearer {TOKEN}x", f"Basic {TOKEN}", "Bearer"):
            wrong = http.post("/v1/score", json=ASK, headers={"Authorization": credentials})
            assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer"), credentials
            assert "wrong-guess" not in wrong.text and TOKEN not in wrong.text
        assert http.get("/v1/stats").status_code == 401
        assert http.get("/openapi.json").status_code == 401
        assert http.get("/v1/stats", headers=WITH_TOKEN).json()["requests"] == before["requests"]
        scored = http.post("/v1/score", json=ASK, headers={"authorization": f"bearer {TOKEN}"})  # any case
        assert scored.status_code == 200, scored.text
        assert http.get("/v1/stats", headers=WITH_TOKEN).json()["requests"] == before["requests"] + 1


def test_a_request_without_the_token_is_refused_before_its_body_is_read(guarded):
    """A body announced and never sent: anything that read it would wait for it."""
    host, port = guarded.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 1000\r\n\r\n")
        answer = connection.recv(4096)
    assert answer.startswith(b"HTTP/1.1 401")


def test_health_answers_without_the_token_but_only_a_caller_with_it_sees_the_errors(guarded, tmp_path):
    open_health = httpx.get(f"{guarded}/v1/health")
    assert open_health.status_code == 200
    assert open_health.json() == {"status": "ok", "champions": {"choice": 1, "math": 1, "qa": 1}, "rm_versions": [1]}
    assert "reload_error" in httpx.get(f"{guarded}/v1/health", headers=WITH_TOKEN).json()
    with running(create_app(StorageRoot(str(tmp_path / "empty")), TEST_SETTINGS, token=TOKEN)) as url:
        before_a_champion = httpx.get(f"{url}/v1/health")
        assert before_a_champion.status_code == 503 and before_a_champion.json() == {"status": "no_champion"}
        told = httpx.get(f"{url}/v1/health", headers=WITH_TOKEN)
        assert told.status_code == 503 and "materialize `reward_model`" in told.json()["error"]
