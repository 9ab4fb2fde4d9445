"""Webhooks through the package: a receiver in this process (the standard library's HTTP server
on 127.0.0.1) gets the events, and checks their signatures with ``mission.verify_webhook``."""

import http.server
import json
import threading
import time

import pytest

import mission

SECRET = "python-receiver-secret-42"


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.headers, body))  # looked up regardless of case
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver():
    _Receiver.got = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.got
    server.shutdown()


def test_a_webhook_gets_signed_events(client, receiver):
    url, got = receiver
    hook = client.create_webhook(f"{url}/missions", secret=SECRET, kinds=["mission"])
    assert (hook.url, hook.kinds, hook.secret) == (f"{url}/missions", ["mission"], None)
    assert hook.webhook_id in [h.webhook_id for h in client.list_webhooks()]
    made = client.create_webhook(f"{url}/other", kinds=["job.failed"])
    assert made.secret and made.secret not in repr(made)

    created = client.create_mission("hooked from Python")
    deadline = time.monotonic() + 30
    while not got:
        assert time.monotonic() < deadline, "no delivery arrived"
        time.sleep(0.02)
    headers, body = got[0]
    event = json.loads(body)
    assert (event["kind"], event["mission_id"]) == ("mission.created", created.mission_id)
    assert headers["Mission-Event"] == "mission.created"
    timestamp, signature = headers["Mission-Webhook-Timestamp"], headers["Mission-Webhook-Signature"]
    assert mission.verify_webhook(SECRET, timestamp, body, signature)
    assert not mission.verify_webhook(made.secret, timestamp, body, signature)
    assert not mission.verify_webhook(SECRET, timestamp, body + b" ", signature)
    assert not mission.verify_webhook(SECRET, str(int(timestamp) - 3600), body, signature)

    deliveries = []
    while not deliveries:
        assert time.monotonic() < deadline, "the delivery was not recorded"
        deliveries = client.webhook_deliveries(hook.webhook_id, status="delivered")
    assert (deliveries[0].event_kind, deliveries[0].attempts, deliveries[0].response_status) == (
        "mission.created", 1, 204)
    assert deliveries[0].delivery_id == headers["Mission-Webhook-Id"]
    with pytest.raises(mission.Invalid):
        client.webhook_deliveries(hook.webhook_id, limit=0)
    with pytest.raises(mission.Invalid):
        client.create_webhook(f"{url}/x", secret="short")

    for webhook_id in (hook.webhook_id, made.webhook_id):
        assert client.delete_webhook(webhook_id) is True
    assert client.delete_webhook(hook.webhook_id) is False
    with pytest.raises(mission.NotFound):
        client.get_webhook(hook.webhook_id)
