"""Flag validation: every bad value is a FlowproofError, and URLs are only shown redacted."""

from __future__ import annotations

import socket

import pytest

from flowproof.errors import FlowproofError
from flowproof.runner.flags import check_cassette_flag, check_proxy_port


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
