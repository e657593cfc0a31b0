"""Tests for flowproof.mcp.routes: which mcp: server a request is addressed to."""

from __future__ import annotations

import re

import pytest

from flowproof.mcp import parse_route


class TestParseRoute:
    def test_url_parts_and_default_ports(self) -> None:
        route = parse_route("exports=http://127.0.0.1:9000/mcp")
        assert (route.name, route.scheme, route.host, route.port, route.path) == (
            "exports", "http", "127.0.0.1", 9000, "/mcp")
        assert parse_route("r=https://MCP.example.com").port == 443
        assert parse_route("r=https://MCP.example.com").host == "mcp.example.com"
        assert parse_route("r=http://h").path == "/"

    @pytest.mark.parametrize("value, reason", [
        ("no-equals", "expected NAME=URL"),
        ("=http://h/", "expected NAME=URL"),
        ("n=ftp://h/", "must be an http(s) URL"),
        ("n=http://h:99999/", "invalid port"),
    ])
    def test_bad_values_say_what_is_wrong(self, value: str, reason: str) -> None:
        with pytest.raises(ValueError, match=re.escape(reason)):
            parse_route(value)


class TestMatches:
    def test_host_port_and_path_prefix(self) -> None:
        route = parse_route("exports=http://127.0.0.1:9000/mcp")
        assert route.matches("http", "localhost", 9000, "/mcp")  # loopback names are one host
        assert route.matches("http", "127.0.0.1", 9000, "/mcp/sub?x=1")
        assert not route.matches("http", "127.0.0.1", 9001, "/mcp")
        assert not route.matches("https", "127.0.0.1", 9000, "/mcp")
        assert not route.matches("http", "127.0.0.1", 9000, "/mcpx")
        assert route.relative_path("/mcp/sub?x=1") == "/sub"
        assert route.relative_path("/other") is None
