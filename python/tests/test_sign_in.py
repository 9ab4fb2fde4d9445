"""Sign-in (spec §5) through the package: the device flow against the server's own identity
provider, refresh, the token file's format and mode, and the session `mission login` saves."""

import datetime
import json
import os
import stat
import subprocess

import pytest

import mission
from conftest import ROOT, approve


def never(code):
    raise AssertionError(f"the device flow ran: {code}")


def test_the_device_flow_stores_the_token_file_and_the_next_start_refreshes(service, tmp_path):
    url, _, password = service
    token_file = tmp_path / "tokens"
    auth = mission.AuthSdk(url, token_file=token_file, prompt=approve(url, password))
    assert auth.token_file == str(token_file) and auth.auth_url == url
    tokens = auth.initialize()
    assert "<hidden>" in repr(tokens) and tokens.access_token not in repr(tokens)
    assert mission.Client(url, access_token=tokens.access_token).whoami().username == "admin"

    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    stored = json.loads(token_file.read_text())
    assert set(stored) == {"refresh_token", "expires_in"}
    assert stored["refresh_token"] == tokens.refresh_token
    expires = datetime.datetime.strptime(stored["expires_in"], "%Y-%m-%d %H:%M:%S.%f")
    assert abs((expires - tokens.expires_at.astimezone().replace(tzinfo=None)).total_seconds()) < 1

    # The file exists: initialize refreshes, the refresh token stays, no prompt.
    again = mission.AuthSdk(url, token_file=token_file, prompt=never).initialize()
    assert again.refresh_token == tokens.refresh_token and again.access_token != tokens.access_token
    assert json.loads(token_file.read_text())["refresh_token"] == tokens.refresh_token


def test_an_empty_token_file_path_stores_nothing(service, tmp_path, monkeypatch):
    url, _, password = service
    monkeypatch.setenv("MISSION_TOKEN_FILE", str(tmp_path / "default-tokens"))
    auth = mission.AuthSdk(url, token_file="", prompt=approve(url, password))
    assert auth.token_file is None
    tokens = auth.initialize()
    refreshed = auth.refresh(tokens.refresh_token)
    assert refreshed.refresh_token == tokens.refresh_token
    assert mission.Client(url, access_token=refreshed.access_token).whoami().admin
    assert list(tmp_path.iterdir()) == []


def test_a_denied_or_refused_sign_in_raises(service, tmp_path):
    url, _, password = service
    auth = mission.AuthSdk(url, token_file="", prompt=approve(url, password, action="deny"))
    with pytest.raises(mission.SignInError, match="denied"):
        auth.initialize()
    with pytest.raises(mission.SignInError) as refused:
        auth.refresh("not-a-refresh-token")
    assert isinstance(refused.value, mission.Unauthorized)
    with pytest.raises(mission.Invalid):
        mission.AuthSdk(url, prompt="shout")


def test_login_keeps_the_session_fresh_and_logout_ends_it(service, tmp_path):
    url, _, password = service
    token_file = tmp_path / "tokens"
    client = mission.Client.login(url, token_file=token_file, prompt=approve(url, password))
    assert client.whoami().username == "admin"
    assert client.tokens is not None and client.tokens.refresh_token
    client.logout()
    assert not token_file.exists()
    with pytest.raises(mission.SignInError):
        mission.AuthSdk(url, token_file="", prompt=never).refresh(client.tokens.refresh_token)


def test_the_session_mission_login_saved_needs_no_arguments(service, tmp_path, monkeypatch):
    url, _, password = service
    monkeypatch.setenv("MISSION_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("MISSION_TOKEN_FILE", str(tmp_path / "tokens"))
    with pytest.raises(mission.Unauthorized, match="mission login"):
        mission.Client()

    binary = os.environ.get("MISSION_BIN", str(ROOT / "target" / "debug" / "mission"))
    login = subprocess.Popen([binary, "login", "--no-browser", "--server", url], stderr=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        line = login.stderr.readline()
        assert "enter the code " in line, line
        approve(url, password)(mission.DeviceCode(verification_uri=url, user_code=line.split("enter the code ")[1].strip()))
        assert login.wait(timeout=60) == 0
    finally:
        login.kill()
        login.stdout.close()
        login.stderr.close()

    client = mission.Client()
    assert client.whoami().username == "admin" and client.server_url == url
    assert mission.Client(url).whoami().admin


def test_login_without_a_token_file_remembers_the_server(service, tmp_path, monkeypatch):
    url, _, password = service
    monkeypatch.setenv("MISSION_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("MISSION_TOKEN_FILE", str(tmp_path / "tokens"))
    mission.Client.login(url, prompt=approve(url, password))
    assert json.loads((tmp_path / "config.json").read_text()) == {"server": url}
    assert mission.Client().whoami().username == "admin"


def test_a_notebook_shows_the_code_as_a_link_and_escapes_it():
    code = mission.DeviceCode(verification_uri="https://idp.example/activate", user_code="ABCD-<b>",
                              verification_uri_complete="https://idp.example/activate?user_code=ABCD&x=\"y\"",
                              expires_in=900)
    page = code._repr_html_()
    assert 'href="https://idp.example/activate?user_code=ABCD&amp;x=&quot;y&quot;"' in page
    assert "ABCD-&lt;b&gt;" in page and "<b>" not in page and "15 minutes" in page
    assert str(code) == "To sign in, open https://idp.example/activate and enter the code ABCD-<b>"
