"""The part every concern shares: detection, upstream mapping, the record command."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy import http

from flowproof.addon.options import AddonConfig, options_by_hand
from flowproof.addon.shared import Shared, config_record_command, make_response, pretty_host

from .conftest import CHAT_PATH, SPEC, chat_body, model_flow


def config(**values: object) -> AddonConfig:
    """The config the addon builds from these mitmproxy option values (given by hand)."""
    return AddonConfig.build(options_by_hand(values, environ={}))


class TestRecordCommand:
    def test_with_a_spec_it_is_the_runner_command_quoted(self, tmp_path: Path):
        """With a spec the command is flowproof-run, the path shell-quoted."""
        spec = tmp_path / "my flows" / "b.flow.yaml"
        spec.parent.mkdir()
        spec.write_text(SPEC)
        with_spec = config(flowproof_mode="replay", flowproof_spec=str(spec))
        assert config_record_command(with_spec) == f"flowproof-run '{spec}' --record"

    def test_without_a_spec_it_is_the_mitmdump_command(self, tmp_path: Path):
        """Without a spec it is the bare mitmdump command for the cassette."""
        bare = config(flowproof_mode="replay", flowproof_cassette=str(tmp_path / "c.json"))
        assert config_record_command(bare).endswith(f"flowproof_cassette={tmp_path / 'c.json'}")


class TestDetect:
    def test_model_call_other_traffic_and_answered_flows(self):
        """A model call has a codec; telemetry on a model host has none; an answered flow is skipped."""
        shared = Shared()
        call = shared.detect(model_flow(chat_body()))
        assert call is not None and call.codec is not None and call.codec.name == "openai-chat"
        other = shared.detect(model_flow(b"", path="/v1/telemetry", method="GET"))
        assert other is not None and other.codec is None and other.model_host
        answered = model_flow(chat_body())
        answered.response = http.Response.make(200, b"{}")
        assert shared.detect(answered) is None

    def test_a_base_url_alias_is_the_api_s_own_path_on_the_base_url_route_only(self):
        """The Vercel AI SDK posts ANTHROPIC_BASE_URL + /messages: on the base-URL route that
        is the Messages API, forwarded (query kept) and recorded as /v1/messages."""
        body = b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[]}'
        on_route = Shared(config(flowproof_mode="record", flowproof_route="base_url"))
        flow = model_flow(body, host="api.anthropic.com", path="/messages?beta=true")
        call = on_route.detect(flow)
        assert call is not None and call.codec is not None and call.codec.name == "anthropic"
        assert flow.request.path == "/v1/messages?beta=true"
        proxy = Shared(config(flowproof_mode="record", flowproof_route="proxy"))
        other = model_flow(body, host="api.anthropic.com", path="/messages")
        seen = proxy.detect(other)
        assert seen is not None and seen.codec is None and other.request.path == "/messages"

    def test_websocket_upgrade_to_a_model_host_is_refused(self):
        """A WebSocket upgrade to a model host gets a 426 and nothing else happens."""
        flow = model_flow(
            b"",
            path=CHAT_PATH,
            method="GET",
            headers=[
                (b"host", b"api.openai.com"),
                (b"upgrade", b"websocket"),
                (b"connection", b"upgrade"),
            ],
        )
        assert Shared().detect(flow) is None
        assert flow.response is not None and flow.response.status_code == 426


    def _responses_upgrade(self) -> http.HTTPFlow:
        return model_flow(b"", path="/v1/responses", method="GET", headers=[
            (b"host", b"api.openai.com"), (b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
            (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="), (b"sec-websocket-version", b"13")])

    def test_a_responses_upgrade_is_a_websocket_to_record_by_default(self):
        """What the agent speaks is recorded: the Responses upgrade gets its frame codec, no answer."""
        flow = self._responses_upgrade()
        detected = Shared().detect(flow)
        assert detected is not None and detected.websocket is not None
        assert detected.websocket.name == "openai-responses" and detected.codec is None
        assert flow.response is None

    def test_transport_http_refuses_the_upgrade_from_the_option_or_the_spec(self, tmp_path):
        spec = tmp_path / "t.flow.yaml"
        spec.write_text("name: t\nagent:\n  command: a\ntransport: http\nsteps:\n  - prompt: hi\n")
        for values in ({"flowproof_transport": "http"}, {"flowproof_spec": str(spec)},
                       {"flowproof_spec": str(spec), "flowproof_transport": "auto"}):
            flow = self._responses_upgrade()
            assert Shared(config(**values)).detect(flow) is None, values
            assert flow.response is not None and flow.response.status_code == 426
        with pytest.raises(ValueError, match="flowproof_transport: unknown transport `ws` — use one of: auto, http"):
            config(flowproof_transport="ws")


class TestMapUpstream:
    def test_mapped_host_is_rewritten_with_its_prefix(self):
        """A mapped host's request goes to the upstream URL, path prefix included."""
        mapped = config(flowproof_upstream=["api.openai.com=http://127.0.0.1:8123/base"])
        flow = model_flow(chat_body())
        assert Shared(mapped).map_upstream(flow.request)
        assert flow.request.url == "http://127.0.0.1:8123/base" + CHAT_PATH
        assert not Shared().map_upstream(model_flow(chat_body()).request)


class TestMadeResponses:
    """`make_response` is `http.Response.make` made cheaper: every field comes out the same."""

    @staticmethod
    def same(status: int, content: bytes, headers: dict[str, str]) -> None:
        made, expected = make_response(status, content, headers), http.Response.make(status, content, headers)
        assert made.http_version == expected.http_version
        assert (made.status_code, made.reason) == (expected.status_code, expected.reason)
        assert made.headers.fields == expected.headers.fields
        assert (made.raw_content, made.content, made.trailers) == (expected.raw_content, expected.content, None)
        assert made.timestamp_start is not None and abs(made.timestamp_start - expected.timestamp_start) < 5
        assert made.timestamp_end is not None and abs(made.timestamp_end - made.timestamp_start) < 1
        assert made.data is not make_response(status, content, headers).data  # never shared

    @pytest.mark.parametrize(
        ("status", "content", "headers"),
        [
            (200, b'{"id": "c1"}', {"content-type": "application/json", "openai-version": "2020-10-01"}),
            (200, b"data: {}\n\ndata: [DONE]\n\n", {"content-type": "text/event-stream"}),
            (429, b"slow down", {"content-type": "text/plain", "x-note": "caf\udce9 \u00e9t\u00e9"}),
            (599, b"", {}),  # no reason phrase for an unknown status
        ],
        ids=["json", "sse", "non-ascii-headers", "unknown-status"],
    )
    def test_the_fields_are_response_make_s(self, status: int, content: bytes, headers: dict[str, str]) -> None:
        self.same(status, content, headers)

    @pytest.mark.parametrize(
        "headers",
        [{"Content-Encoding": "gzip"}, {"transfer-encoding": "chunked"}, {"content-length": "999"}],
        ids=["gzip", "chunked", "length"],
    )
    def test_a_header_response_make_acts_on_is_its_own(self, headers: dict[str, str]) -> None:
        """A recorded encoding is applied to the body, and a transfer encoding or a given length
        decides the length header, exactly as `Response.make` does."""
        self.same(200, b"hello hello hello", {"content-type": "text/plain", **headers})
        if "Content-Encoding" in headers:
            assert make_response(200, b"hello", headers).raw_content != b"hello"


class TestPrettyHost:
    @pytest.mark.parametrize(
        "host_header", ["api.openai.com", "API.OpenAI.com:8443", "[::1]:8080", "xn--bcher-kva.example", None]
    )
    def test_it_is_mitmproxy_s_pretty_host(self, host_header: str | None) -> None:
        flow = model_flow(chat_body())
        if host_header is None:
            del flow.request.headers["host"]
        else:
            flow.request.headers["host"] = host_header
        for _ in range(2):  # the second answer comes from the memo
            assert pretty_host(flow.request) == flow.request.pretty_host
