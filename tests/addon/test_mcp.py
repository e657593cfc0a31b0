"""The MCP boundary's proxy hooks (flowproof.addon.mcp), driven with mitmproxy's test flows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mitmproxy import http
from mitmproxy.test import tflow, tutils

from flowproof.addon.mcp import McpBoundary
from flowproof.addon.options import AddonConfig
from flowproof.addon.shared import Shared
from flowproof.cassette import Cassette
from flowproof.mcp import SESSION_PLACEHOLDER, McpExchange, exchange_key, parse_route
from flowproof.options import Mode, ProxyOptions, with_spec
from flowproof.replay import Replayer
from flowproof.spec import load_spec

ROUTE = parse_route("exports=http://127.0.0.1:8123/mcp")
SPEC = """\
name: n
agent:
  command: a
mcp:
  - name: {name}
    url: {url}
    tools:
      - name: export_to_endpoint
        result: {{ ok: false }}
      - name: list_rows
steps:
  - prompt: x
"""
ACCEPT = "application/json, text/event-stream"


def mcp_flow(doc: Any = None, *, method: str = "POST", port: int = 8123, path: str = "/mcp") -> http.HTTPFlow:
    flow = tflow.tflow()
    req = flow.request
    req.method, req.scheme, req.host, req.port, req.path = method, "http", "127.0.0.1", port, path
    req.headers["accept"] = ACCEPT
    req.headers["mcp-session-id"] = "live-session"
    req.content = b"" if doc is None else (doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return flow


def tools_call(ident: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def boundary(
    tmp_path: Path, mode: str, recorded: tuple[McpExchange, ...] = (),
    name: str = "exports", url: str = "http://127.0.0.1:8123/mcp",
) -> tuple[McpBoundary, Path]:
    """The MCP concern for one run, as the root addon builds it (a spec, a shared state)."""
    log = tmp_path / "events.jsonl"
    spec_path = tmp_path / "s.flow.yaml"
    spec_path.write_text(SPEC.format(name=name, url=url), encoding="utf-8")
    options = with_spec(ProxyOptions(mode=Mode(mode), report=log), load_spec(spec_path), cwd=str(tmp_path), home=None)
    config = AddonConfig.build(options)
    replayer = Replayer(Cassette((), mcp=recorded)) if mode != "record" else None
    return McpBoundary(Shared(config, replayer), [parse_route(f"{name}={url}")]), log


def events_of(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def respond(flow: http.HTTPFlow, body: Any, ctype: str = "application/json", **headers: str) -> None:
    flow.response = tutils.tresp(
        status_code=200,
        headers=http.Headers(
            [(b"content-type", ctype.encode()), *((k.encode(), v.encode()) for k, v in headers.items())]
        ),
        content=body if isinstance(body, bytes) else json.dumps(body).encode(),
    )


class TestEveryMode:
    def test_declared_tool_is_answered_and_never_leaves(self, tmp_path: Path) -> None:
        for mode in ("record", "replay", "compare"):
            (tmp_path / mode).mkdir()
            mcp, log = boundary(tmp_path / mode, mode)
            flow = mcp_flow(tools_call(4, "export_to_endpoint", {"rows": 100}))
            assert mcp.handle_request(flow) is True
            assert flow.response is not None and flow.response.status_code == 200
            reply = json.loads(flow.response.content or b"")
            assert reply["id"] == 4 and reply["result"]["structuredContent"] == {"ok": False}
            assert flow.response.headers["mcp-session-id"] == "live-session"
            [event] = events_of(log)
            assert event == {"event": "mcp_call", "server": "exports", "name": "export_to_endpoint",
                             "arguments": '{"rows": 100}', "answered": True}

    def test_other_hosts_are_not_mcp_traffic(self, tmp_path: Path) -> None:
        mcp, _log = boundary(tmp_path, "replay")
        for flow in (mcp_flow({"x": 1}, port=9999), mcp_flow({"x": 1}, path="/other")):
            assert mcp.handle_request(flow) is False and flow.response is None

    def test_malformed_body_is_refused_with_a_jsonrpc_error(self, tmp_path: Path) -> None:
        mcp, log = boundary(tmp_path, "record")
        flow = mcp_flow(b"{oops")
        assert mcp.handle_request(flow)
        assert flow.response is not None and flow.response.status_code == 400
        assert json.loads(flow.response.content or b"")["error"]["code"] == -32700
        assert events_of(log)[0]["event"] == "mcp_rejected"


class TestRecord:
    def test_only_an_mcp_flow_s_response_hooks_are_work(self, tmp_path: Path) -> None:
        """A warm proxy skips the hooks a child calls idle (`Session.idle`): an MCP flow's
        response hooks record the exchange, so they are never idle; a model call's are."""
        mcp, _log = boundary(tmp_path, "record")
        flow, other = mcp_flow(tools_call(2, "list_rows", {"limit": 5})), tflow.tflow()
        mcp.request(flow)
        mcp.request(other)
        for hook in ("responseheaders", "response", "error"):
            assert not mcp.idle(hook, flow)
            assert mcp.idle(hook, other)
        assert not mcp.idle("request", other)
        respond(flow, {"jsonrpc": "2.0", "id": 2, "result": {}})
        mcp.response(flow)
        assert mcp.recorded() and mcp.idle("response", flow)

    def test_forwarded_json_exchange_is_recorded(self, tmp_path: Path) -> None:
        mcp, log = boundary(tmp_path, "record")
        flow = mcp_flow(tools_call(2, "list_rows", {"limit": 5}))
        assert mcp.handle_request(flow) and flow.response is None  # goes to the server
        assert events_of(log)[0]["answered"] is False
        respond(flow, {"jsonrpc": "2.0", "id": 2, "result": {"rows": []}}, **{"mcp-session-id": "s-1"})
        mcp.responseheaders(flow)
        mcp.response(flow)
        [exchange] = mcp.recorded()
        assert exchange.body == {"jsonrpc": "2.0", "id": 2, "result": {"rows": []}}
        assert exchange.session is True and exchange.path == ""
        assert exchange.key == exchange_key("POST", "", tools_call(9, "list_rows", {"limit": 5}))

    def test_streamed_answer_is_tapped_and_passed_through(self, tmp_path: Path) -> None:
        mcp, _log = boundary(tmp_path, "record")
        flow = mcp_flow({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        mcp.request(flow)
        respond(flow, b"", "text/event-stream")
        mcp.responseheaders(flow)
        stream: Any = flow.response.stream  # type: ignore[union-attr]
        chunks = [b'event: message\ndata: {"jsonrpc":"2.0","id":1,', b'"result":{}}\n\n', b""]
        assert [stream(c) for c in chunks] == chunks
        mcp.response(flow)
        assert mcp.recorded()[0].events == ('{"jsonrpc":"2.0","id":1,"result":{}}',)

    def test_get_stream_and_delete_are_not_recorded(self, tmp_path: Path) -> None:
        mcp, _log = boundary(tmp_path, "record")
        for method in ("GET", "DELETE"):
            flow = mcp_flow(method=method)
            mcp.request(flow)
            respond(flow, b"")
            mcp.response(flow)
        assert mcp.recorded() == ()

    def test_unreachable_server_names_the_entry(self, tmp_path: Path) -> None:
        from mitmproxy.flow import Error

        mcp, log = boundary(tmp_path, "record")
        flow = mcp_flow({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        mcp.request(flow)
        flow.error = Error("connection refused")
        mcp.error(flow)
        error = events_of(log)[-1]
        assert error["kind"] == "mcp"
        assert "the MCP server `exports` (http://127.0.0.1:8123/mcp)" in error["text"]
        assert "connection refused" in error["text"]


    def test_a_call_its_client_left_is_not_the_server_s_failure(self, tmp_path: Path) -> None:
        """An agent that exits while a POST is unanswered (it read the result on the legacy
        transport's event stream) left it: that is no error of the server's."""
        from mitmproxy.flow import Error

        mcp, log = boundary(tmp_path, "record")
        flow = mcp_flow({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        mcp.request(flow)
        flow.error = Error("Client disconnected.")
        mcp.error(flow)
        assert [e for e in events_of(log) if e.get("event") == "error"] == []
        assert mcp.recorded() == ()  # it left before any answer: nothing to replay

    def test_an_answer_read_off_the_stream_before_the_client_left_is_recorded(self, tmp_path: Path) -> None:
        from mitmproxy.flow import Error

        mcp, log = boundary(tmp_path, "record")
        flow = mcp_flow({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        mcp.request(flow)
        respond(flow, b"", "text/event-stream")
        mcp.responseheaders(flow)
        stream: Any = flow.response.stream  # type: ignore[union-attr]
        stream(b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n')
        flow.error = Error("Client disconnected.")
        mcp.error(flow)
        assert [e for e in events_of(log) if e.get("event") == "error"] == []
        assert mcp.recorded()[0].events == ('{"jsonrpc":"2.0","id":1,"result":{}}',)


class TestReplay:
    def recorded(self) -> tuple[McpExchange, ...]:
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        return (McpExchange(
            index=0, server="exports", method="POST", path="", request=request,
            key=exchange_key("POST", "", request), status=200, content_type="application/json",
            session=True, body={"jsonrpc": "2.0", "id": 1, "result": {"tools": []}},
        ),)

    def test_served_once_with_the_live_id(self, tmp_path: Path) -> None:
        mcp, log = boundary(tmp_path, "replay", self.recorded())
        flow = mcp_flow({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
        assert mcp.handle_request(flow)
        assert flow.response is not None
        assert json.loads(flow.response.content or b"") == {"jsonrpc": "2.0", "id": 7, "result": {"tools": []}}
        assert flow.response.headers["mcp-session-id"] == SESSION_PLACEHOLDER
        assert mcp.unconsumed_text() is None
        again = mcp_flow({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
        mcp.request(again)
        assert again.response is not None and again.response.status_code == 400
        assert events_of(log)[-1]["event"] == "mcp_divergence"
        assert "matches no recorded exchange" in events_of(log)[-1]["text"]

    def test_get_is_405_and_missing_exchanges_are_reported(self, tmp_path: Path) -> None:
        mcp, _log = boundary(tmp_path, "replay", self.recorded())
        flow = mcp_flow(method="GET")
        mcp.request(flow)
        assert flow.response is not None and flow.response.status_code == 405
        text = mcp.unconsumed_text()
        assert text is not None and "mcp exchange 0 with `exports`: tools/list" in text
        mcp.done()
        assert events_of(_log)[-1]["event"] == "mcp_divergence"
        assert "were never requested" in events_of(_log)[-1]["text"]


def test_remote_https_server_is_caught_on_the_proxy_route(tmp_path: Path) -> None:
    """A request the agent sent through HTTPS_PROXY to the real remote url is MCP traffic too."""
    mcp, _log = boundary(tmp_path, "record", name="remote", url="https://mcp.example.com/v1/mcp")
    flow = mcp_flow(tools_call(1, "export_to_endpoint", {}), port=443, path="/v1/mcp")
    flow.request.scheme, flow.request.host = "https", "mcp.example.com"
    assert mcp.handle_request(flow) and flow.response is not None
    assert json.loads(flow.response.content or b"")["result"]["structuredContent"] == {"ok": False}
    elsewhere = mcp_flow(tools_call(1, "export_to_endpoint", {}), port=443, path="/v2/mcp")
    elsewhere.request.scheme, elsewhere.request.host = "https", "mcp.example.com"
    assert mcp.handle_request(elsewhere) is False


class TestInTheAddonChain:
    """The MCP concern composed by the root addon, hooks invoked the way mitmproxy does."""

    def test_record_then_replay_through_the_root(self, harness: Any, tmp_path: Path) -> None:
        from flowproof.cassette import load_cassette

        spec = tmp_path / "s.flow.yaml"
        spec.write_text(SPEC.format(name="exports", url="http://127.0.0.1:8123/mcp"), encoding="utf-8")
        cassette = tmp_path / "c.json"
        options = {"flowproof_spec": str(spec), "flowproof_mcp": ["exports=http://127.0.0.1:8123/mcp"]}
        harness.configure(flowproof_mode="record", flowproof_cassette=str(cassette), **options)
        answered = mcp_flow(tools_call(1, "export_to_endpoint", {"rows": 3}))
        harness.addon.request(answered)
        assert answered.response is not None and b'"ok": false' in (answered.response.content or b"")
        forwarded = mcp_flow(tools_call(2, "list_rows", {"limit": 1}))
        harness.addon.request(forwarded)
        assert forwarded.response is None
        respond(forwarded, {"jsonrpc": "2.0", "id": 2, "result": {"rows": [1]}})
        harness.addon.responseheaders(forwarded)
        harness.addon.response(forwarded)
        harness.addon.done()
        saved = load_cassette(cassette)
        assert saved.turns == () and [e.request["params"]["name"] for e in saved.mcp] == ["list_rows"]

        harness.configure(flowproof_mode="replay", flowproof_cassette=str(cassette), **options)
        again = mcp_flow(tools_call(9, "list_rows", {"limit": 1}))
        harness.addon.request(again)
        assert again.response is not None
        assert json.loads(again.response.content or b"") == {"jsonrpc": "2.0", "id": 9, "result": {"rows": [1]}}
        harness.addon.done()
        assert [e["event"] for e in harness.events()][-1] == "done"
        assert not harness.events("divergence")
