"""No credential ever reaches a cassette, the event log or a log line.

Every model call here carries every credential an agent may send (API-key
headers of each provider, cookies, proxy credentials, a ``?key=`` query
parameter, and a ``metadata.user_id`` holding device and session ids), and
every response sets a cookie. The calls go through record, replay (hit and
miss), compare and an upstream failure; afterwards no secret value may appear
in the cassette text, the event-log file, any structlog event, any stdlib log
record or anything printed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from flowproof.cassette import load_cassette
from flowproof.wire.sse import encode_events

from .conftest import Harness, chat_events

#: Header name -> a fake credential; every value is unique, so a hit names its source.
SECRET_HEADERS = {
    "authorization": "Bearer sk-test-authz-0001",
    "x-api-key": "sk-ant-xapi-0002",
    "api-key": "azure-test-apikey-0003",
    "x-goog-api-key": "goog-test-apikey-0004",
    "cookie": "session=cookie-test-secret-0005; theme=dark",
    "proxy-authorization": "Basic proxy-test-secret-0006",
}
QUERY_KEY = "query-test-secret-0007"
SET_COOKIE = "__cf_bm=setcookie-test-secret-0008; path=/; HttpOnly"
USER_ID = json.dumps({"device_id": "device-test-secret-0009", "account_uuid": "",
                      "session_id": "session-test-secret-0010"})
SECRETS = (
    "sk-test-authz-0001", "sk-ant-xapi-0002", "azure-test-apikey-0003", "goog-test-apikey-0004",
    "cookie-test-secret-0005", "proxy-test-secret-0006", QUERY_KEY, "setcookie-test-secret-0008",
    "device-test-secret-0009", "session-test-secret-0010",
)

#: `metadata.user_id` is covered by the claude-code preset (docs/volatile.md).
SPEC = """\
name: secrets stay out
agent:
  command: python agent.py
volatile:
  - claude-code
steps:
  - prompt: hello
"""

CHAT = ("api.openai.com", "/v1/chat/completions")
ANTHROPIC = ("api.anthropic.com", "/v1/messages")
GEMINI = ("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.0-flash:generateContent")


def body(api: tuple[str, str], user: str, *, stream: bool) -> bytes:
    """A request body for ``api`` with the user's text and a secret-bearing metadata.user_id."""
    if api is GEMINI:
        doc: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": user}]}]}
    else:
        doc = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": user}], "stream": stream}
    doc["metadata"] = {"user_id": USER_ID}
    return json.dumps(doc, separators=(",", ":")).encode()


def secret_flow(api: tuple[str, str], user: str, *, stream: bool = False) -> http.HTTPFlow:
    """A model call to ``api`` carrying every secret header and a ``?key=`` parameter."""
    host, path = api
    headers = [(b"host", host.encode()), (b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in SECRET_HEADERS.items()]
    req = tutils.treq(
        host=host, port=443, scheme=b"https", method=b"POST",
        path=f"{path}?alt=json&key={QUERY_KEY}".encode(),
        headers=http.Headers(headers), content=body(api, user, stream=stream),
    )
    return tflow.tflow(req=req)


def respond(h: Harness, flow: http.HTTPFlow, answer: str) -> None:
    """Answer a forwarded flow upstream-style: SSE when the request streamed, else JSON; both set a cookie."""
    streamed = json.loads(flow.request.content or b"{}").get("stream") is True
    ctype = b"text/event-stream" if streamed else b"application/json"
    headers = http.Headers([(b"content-type", ctype), (b"set-cookie", SET_COOKIE.encode()),
                            (b"x-request-id", b"req_1")])
    if streamed:
        flow.response = tutils.tresp(status_code=200, headers=headers, content=b"")
        h.addon.responseheaders(flow)
        tap: Any = flow.response.stream
        assert callable(tap), "a streamed response must be tapped"
        tap(encode_events(chat_events(answer)))
        tap(b"")
    else:
        content = {"id": "x", "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": answer}}]}
        flow.response = tutils.tresp(status_code=200, headers=headers, content=json.dumps(content).encode())
        h.addon.responseheaders(flow)
    h.addon.response(flow)


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[Any]]]:
    """Every structlog event and stdlib log record of the test so far (mitmproxy's and flowproof's)."""
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events:
        yield lambda: [*events, *caplog.records]


def stringify(records: list[Any]) -> str:
    """Everything a log handler could print: structlog dicts, and each record's message, args and extras."""
    parts = []
    for r in records:
        if isinstance(r, logging.LogRecord):
            parts += [r.getMessage(), repr(r.args), repr(vars(r))]
        else:
            parts.append(repr(r))
    return "\n".join(parts)


class TestNoSecretEscapes:
    def test_record_replay_and_compare_keep_every_credential_out(
        self, harness: Harness, tmp_path: Path, captured: Callable[[], list[Any]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Credentials in headers, the query and metadata.user_id appear in no cassette, event, log line or output."""
        spec = tmp_path / "s.flow.yaml"
        spec.write_text(SPEC)
        cassette = tmp_path / "c.json"

        # Record: a streamed chat call, a JSON Anthropic call, a JSON Gemini call, and a failed call.
        harness.configure(flowproof_mode="record", flowproof_cassette=str(cassette), flowproof_spec=str(spec))
        calls = [(CHAT, "stream it", True), (ANTHROPIC, "json please", False), (GEMINI, "gemini too", False)]
        for api, user, stream in calls:
            f = secret_flow(api, user, stream=stream)
            harness.addon.request(f)
            assert f.response is None  # forwarded upstream
            respond(harness, f, f"answer to {user}")
        failed = secret_flow(GEMINI, "this one fails")
        harness.addon.request(failed)
        failed.error = tflow.terr()
        harness.addon.error(failed)
        harness.addon.done()
        text = cassette.read_text(encoding="utf-8")
        assert len(load_cassette(cassette).turns) == 3
        assert "«volatile:user_id»" in text
        assert leaks(text) == []

        # Replay: the same calls hit; an edited one misses.
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(cassette), flowproof_spec=str(spec))
        for api, user, stream in calls:
            f = secret_flow(api, user, stream=stream)
            harness.addon.request(f)
            assert f.response is not None and f.response.status_code == 200
            assert leaks(f.response.get_text() or "") == []
        miss = secret_flow(CHAT, "an edited prompt", stream=True)
        harness.addon.request(miss)
        assert miss.response is not None and miss.response.status_code == 400
        assert leaks(miss.response.get_text() or "") == []
        harness.addon.done()

        # Compare: a live answer that drifts, and a live call that matches nothing.
        harness.configure(flowproof_mode="compare", flowproof_cassette=str(cassette), flowproof_spec=str(spec))
        for user in ("stream it", "never recorded"):
            f = secret_flow(CHAT, user, stream=True)
            harness.addon.request(f)
            respond(harness, f, "a different answer")
        harness.addon.done()
        assert cassette.read_text(encoding="utf-8") == text

        events = harness.report.read_text(encoding="utf-8")
        kinds = {e["event"] for e in harness.events()}
        assert {"request_started", "turn", "error", "divergence", "drift", "done"} <= kinds
        assert leaks(events) == []
        logged = stringify(captured())
        assert "turn_recorded" in logged and "request_unmatched" in logged  # the logs were captured
        assert leaks(logged) == []
        out = capsys.readouterr()
        assert leaks(out.out + out.err) == []
