"""Routing an agent's MCP traffic through flowproof (flowproof.runner.mcp)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from flowproof.errors import FlowproofError
from flowproof.options import Mode, ProxyOptions, to_json
from flowproof.runner.mcp import (
    REPLAY_PLACEHOLDER_URL,
    agent_variables,
    check_reachable,
    plan_listeners,
    replay_environ,
    reverse_listeners,
    url_variables,
)
from flowproof.spec import load_spec, resolve_variables


def spec_with(tmp_path: Path, url: str):
    path = tmp_path / "f.flow.yaml"
    path.write_text(
        "name: n\nagent:\n  command: a\nmcp:\n  - name: exports\n"
        f"    url: {url}\n    tools:\n      - name: t\n        result: 1\nsteps:\n  - prompt: x\n",
        encoding="utf-8",
    )
    return load_spec(path)


def ports():
    numbers = iter(range(40001, 40010))
    return lambda: next(numbers)


def test_variable_url_gets_a_listener_and_the_agent_gets_the_endpoint(tmp_path: Path) -> None:
    raw = spec_with(tmp_path, "${EXPORT_MCP_URL}")
    assert url_variables(raw) == {"exports": "EXPORT_MCP_URL"}
    resolved = resolve_variables(raw, {"EXPORT_MCP_URL": "http://127.0.0.1:8123/mcp"})
    [listener] = plan_listeners(raw, resolved, ports())
    assert agent_variables([listener]) == {"EXPORT_MCP_URL": "http://127.0.0.1:40001/mcp"}
    assert reverse_listeners([listener]) == ["reverse:http://127.0.0.1:8123@40001"]
    assert listener.route.url == "http://127.0.0.1:8123/mcp"


def test_the_agent_keeps_the_query_and_credentials_the_proxy_never_sees_them(tmp_path: Path) -> None:
    """A server that authenticates by `?token=` or `user:password@` still gets them from the agent;
    what the proxy is told (its options, its listeners: the cassette's source) holds neither."""
    raw = spec_with(tmp_path, "${EXPORT_MCP_URL}")
    real = "http://reader:pw-s3cret@127.0.0.1:8123/mcp?token=tok-s3cret&v=2"
    [listener] = plan_listeners(raw, resolve_variables(raw, {"EXPORT_MCP_URL": real}), ports())
    assert agent_variables([listener]) == {
        "EXPORT_MCP_URL": "http://reader:pw-s3cret@127.0.0.1:40001/mcp?token=tok-s3cret&v=2"}
    told = json.dumps([to_json(ProxyOptions(mcp=(listener.route,))), reverse_listeners([listener])])
    assert "s3cret" not in told and '"exports=http://127.0.0.1:8123/mcp"' in told


def test_replay_needs_no_url(tmp_path: Path) -> None:
    raw = spec_with(tmp_path, "${EXPORT_MCP_URL}")
    assert replay_environ(raw, {}, Mode.REPLAY) == {"EXPORT_MCP_URL": REPLAY_PLACEHOLDER_URL}
    assert replay_environ(raw, {"EXPORT_MCP_URL": "http://x:1/m"}, Mode.REPLAY) == {"EXPORT_MCP_URL": "http://x:1/m"}
    assert replay_environ(raw, {}, Mode.RECORD) == {}


def test_fixed_local_url_cannot_be_redirected(tmp_path: Path) -> None:
    raw = spec_with(tmp_path, "http://127.0.0.1:8123/mcp")
    with pytest.raises(FlowproofError, match=r"f.flow.yaml:5:5: the url of mcp server `exports` is a fixed local"):
        plan_listeners(raw, raw, ports())


def test_remote_url_is_caught_on_the_proxy_route(tmp_path: Path) -> None:
    raw = spec_with(tmp_path, "https://mcp.example.com/v1/mcp")
    [listener] = plan_listeners(raw, raw, ports())
    assert listener.port is None and agent_variables([listener]) == {}
    assert reverse_listeners([listener]) == []
    assert listener.route.url == "https://mcp.example.com:443/v1/mcp"


def test_unreachable_server_is_named(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        raw = spec_with(tmp_path, "${U}")
        listeners = plan_listeners(raw, resolve_variables(raw, {"U": f"http://127.0.0.1:{port}/mcp"}), ports())
        with pytest.raises(FlowproofError, match=r"the mcp server `exports` at .* \(from \$\{U\}\) is not reachable"):
            check_reachable(listeners, timeout=1)
