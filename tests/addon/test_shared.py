"""The part every concern shares: detection, upstream mapping, the record command."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy import http

from flowproof.addon.options import AddonConfig, options_by_hand
from flowproof.addon.shared import Shared, config_record_command

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
        assert Shared(bare).record_command().endswith(f"flowproof_cassette={tmp_path / 'c.json'}")


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
