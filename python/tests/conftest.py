"""A real `mission server` on a free port for the Python tests, and a signed-in client.

The server binary is `MISSION_BIN` (scripts/test.sh builds it), else `target/debug/mission`.
Signing in goes through the server's device flow, approved with the first admin's password
through `POST /activate`, as a person would in a browser.
"""

import json
import os
import pathlib
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

import mission

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _post(url, fields):
    data = urllib.parse.urlencode(fields).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as answer:
        return answer.status, answer.read()


def approve(url, password, username="admin", action="approve"):
    """A device-flow prompt that decides the code at `url`'s /activate as `username`."""

    def prompt(code):
        status, _ = _post(f"{url}/activate", {"user_code": code.user_code, "username": username,
                                              "password": password, "action": action})
        assert status == 200

    return prompt


@pytest.fixture(scope="session")
def service():
    """(url, admin access token, admin password) of a server for the whole session."""
    binary = os.environ.get("MISSION_BIN", str(ROOT / "target" / "debug" / "mission"))
    with tempfile.TemporaryDirectory() as home:
        data = pathlib.Path(home) / "data"
        process = subprocess.Popen(
            [binary, "server", "--listen", "127.0.0.1:0", "--device-poll-interval", "0",
             "--lz-cpus", "2", "--data-dir", str(data)],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "MISSION_LOG": "warn"},
        )
        try:
            deadline = time.monotonic() + 60
            url = None
            while url is None:
                assert time.monotonic() < deadline, "the server did not start"
                line = process.stdout.readline()
                assert line, "the server exited"
                prefix = "Mission Compute Service listening on "
                if line.startswith(prefix):
                    url = line[len(prefix):].strip()
            password = (data / "initial-admin-password").read_text().strip()
            _, body = _post(f"{url}/oauth/device/code",
                            {"client_id": "mission-cli", "audience": "mission-api", "scope": "openid offline_access"})
            code = json.loads(body)
            status, _ = _post(f"{url}/activate", {"user_code": code["user_code"], "username": "admin",
                                                  "password": password, "action": "approve"})
            assert status == 200
            _, body = _post(f"{url}/oauth/token", {
                "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                "device_code": code["device_code"], "client_id": "mission-cli"})
            yield url, json.loads(body)["access_token"], password
        finally:
            process.kill()
            process.wait(timeout=30)


@pytest.fixture(scope="session")
def server(service):
    """(url, admin access token) of the session's server."""
    url, token, _ = service
    return url, token


@pytest.fixture
def client(server):
    url, token = server
    return mission.Client(url, access_token=token)
