"""The package inside a real Jupyter kernel (ipykernel, driven over its wire protocol by
jupyter_client, as a notebook front end drives it): the device-flow prompt is a rich display with
a link and the code, and a long upload draws a progress bar that updates in place."""

import html
import os
import queue
import re
import time

import pytest
from jupyter_client.manager import start_new_kernel

from conftest import _post

TIMEOUT = 120


@pytest.fixture
def kernel(tmp_path):
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "MISSION_TOKEN_FILE": str(tmp_path / "token")}
    manager, client = start_new_kernel(kernel_name="python3", env=env, startup_timeout=TIMEOUT)
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_cell(client, code, on_output=lambda message: None):
    """Runs `code` as a notebook cell; answers the cell's output messages (display_data,
    update_display_data, stream, execute_result), failing on an error. `on_output` sees each as
    it arrives, while the cell still runs."""
    msg_id = client.execute(code)
    outputs = []
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert time.monotonic() < deadline, f"the cell did not finish: {code}"
        try:
            message = client.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind = message["msg_type"]
        if kind == "error":
            pytest.fail("the cell failed:\n" + "\n".join(message["content"]["traceback"]))
        if kind == "status" and message["content"]["execution_state"] == "idle":
            return outputs
        if kind in ("display_data", "update_display_data", "stream", "execute_result"):
            outputs.append(message)
            on_output(message)


def test_sign_in_in_a_notebook_shows_a_link_and_the_code(kernel, service):
    url, _, password = service
    shown = []

    def approve_when_shown(message):
        if message["msg_type"] != "display_data":
            return
        page = message["content"]["data"]["text/html"]
        shown.append(message["content"]["data"])
        code = re.search(r'letter-spacing:0.1em">([^<]+)</p>', page).group(1)
        status, _ = _post(f"{url}/activate", {"user_code": html.unescape(code), "username": "admin",
                                              "password": password, "action": "approve"})
        assert status == 200

    outputs = run_cell(kernel, f"""
import mission
from mission._progress import in_notebook
assert in_notebook(), "the kernel is seen as a notebook"
client = mission.Client.login({url!r})
client.whoami().username
""", approve_when_shown)
    assert len(shown) == 1, "the prompt is displayed once"
    page = shown[0]["text/html"]
    assert f'<a href="{url}/activate?user_code=' in page, page
    assert 'target="_blank" rel="noopener"' in page
    assert "To sign in, open" in shown[0]["text/plain"], "plain text for front ends without HTML"
    result = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert result[-1]["content"]["data"]["text/plain"] == "'admin'"


def test_a_long_upload_in_a_notebook_draws_a_bar_that_updates_in_place(kernel, server, tmp_path):
    url, token = server
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(400):
        (folder / f"f{i:04}.txt").write_text(f"file {i}\n")
    outputs = run_cell(kernel, f"""
import mission, mission._progress
mission._progress._DELAY = 0  # draw from the first tick, however fast this machine uploads
client = mission.Client({url!r}, access_token={token!r})
m = client.create_mission("notebook upload")
client.upload(m.mission_id, {str(folder)!r})
""")
    first = [m for m in outputs if m["msg_type"] == "display_data"]
    assert len(first) == 1, f"one bar, displayed once: {outputs}"
    display_id = first[0]["content"]["transient"]["display_id"]
    assert "<progress" in first[0]["content"]["data"]["text/html"]
    updates = [m for m in outputs if m["msg_type"] == "update_display_data"]
    assert updates, "400 uploads last several 50 ms ticks, each redrawing the bar"
    assert all(u["content"]["transient"]["display_id"] == display_id for u in updates), "updated in place"
    last = updates[-1]["content"]["data"]["text/html"]
    assert '<progress value="400" max="400"' in last or "400/400 files" in last, last
    assert not [m for m in outputs if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"], \
        "no terminal bar on the cell's stderr"
