"""Flag validation: every bad value is a FlowproofError, and URLs are only shown redacted."""

from __future__ import annotations

import socket

import pytest

from flowproof.errors import FlowproofError
from flowproof.runner.flags import (
    check_cassette_flag,
    check_extra_host,
    check_proxy_port,
    check_upstream_url,
    redact_url,
)


class TestRedact:
    @pytest.mark.parametrize(("url", "shown"), [
        ("http://h:1/v1?key=sk-1", "http://h:1/v1?…"),
        ("https://u:pw@h/p#frag", "https://…@h/p#…"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ])
    def test_redacts_query_userinfo_fragment(self, url: str, shown: str) -> None:
        assert redact_url(url) == shown


class TestUpstream:
    @pytest.mark.parametrize("url", [
        "http://", "ftp://h", "http://h:99999", "http://h/?key=sk-1", "http://u:p@h/", "http://h:0",
        "http://h/?",
    ])
    def test_refused(self, url: str) -> None:
        with pytest.raises(FlowproofError) as caught:
            check_upstream_url("api.openai.com", url)
        assert "sk-1" not in str(caught.value) and ":p@" not in str(caught.value)

    def test_accepted(self) -> None:
        assert check_upstream_url("api.openai.com", "http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


class TestExtraHost:
    def test_bare_hosts_pass_lower_cased(self) -> None:
        assert check_extra_host("LLM-Gateway.internal") == "llm-gateway.internal"
        assert check_extra_host("gw:8443") == "gw:8443"

    @pytest.mark.parametrize("host", ["http://gw", "gw internal", "gw/v1", "a=b", "gw?key=sk-1", "-gw"])
    def test_refused(self, host: str) -> None:
        with pytest.raises(FlowproofError, match="bare host name") as caught:
            check_extra_host(host)
        assert "sk-1" not in str(caught.value)


class TestProxyPort:
    def test_zero_and_free_ports_pass(self) -> None:
        check_proxy_port(0)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        check_proxy_port(port)

    def test_port_in_use_is_refused(self) -> None:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            with pytest.raises(FlowproofError, match="in use"):
                check_proxy_port(busy.getsockname()[1])


class TestCassetteFlag:
    @pytest.mark.parametrize("path", ["x.cassette.recording.json", "x.cassette.rejected.json"])
    def test_recordings_are_not_cassettes(self, path: str) -> None:
        with pytest.raises(FlowproofError, match="not a cassette"):
            check_cassette_flag(path)

    def test_cassette_passes(self) -> None:
        check_cassette_flag("x.cassette.json")
