"""flowproof-run as a real subprocess when the model side fails at record: the report's headline
names what the upstream did (its HTTP status), and a TLS failure on a host that carries no
model call (an agent's telemetry) is no CA advice."""

from __future__ import annotations

import shlex
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from flowproof.testing import FakeModelServer, Reply

from .conftest import AGENTS, Flowproof, write_spec

Fake = Callable[..., FakeModelServer]


def upstream_spec(folder: Path, **env: str) -> Path:
    """A spec running tests/e2e/agents/upstream_agent.py, recording into ``folder``."""
    lines = [
        "name: upstream agent",
        "agent:",
        f"  command: {shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / 'upstream_agent.py'))}",
        "  timeout: 30",
    ]
    if env:
        lines += ["  env:", *(f"    {k}: {v}" for k, v in env.items())]
    lines += ["cassette: upstream.cassette.json", "steps:", "  - prompt: Say hi", "  - assert: reply contains hi"]
    return write_spec(folder / "upstream.flow.yaml", "\n".join(lines) + "\n")


class TestHeadline:
    def test_an_http_error_leads_and_a_telemetry_tls_failure_gives_no_ca_advice(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """The upstream answers 503: the headline names the status and the API's message, not the
        agent's last stderr line, and the telemetry host's TLS failure is a note without CA advice."""
        server = fake_model([Reply.error(503, "the model is overloaded")])
        spec = upstream_spec(tmp_path, TELEMETRY_URL="https://telemetry.invalid/ping")
        ran = flowproof.run(spec, "--record", "--upstream", f"api.openai.com={server.url}", keys=True)
        assert ran.code == 5, ran.output
        headline = ran.stdout.splitlines()[3]
        assert headline == (
            "  the upstream answered HTTP 503 to model call 0 (POST https://api.openai.com/v1/chat/completions): "
            "the model is overloaded; the agent then exited with code 1 — see the agent output below"
        ), ran.stdout
        assert "telemetry.invalid, which is not a model host" in ran.stdout
        assert "SSL_CERT_FILE" not in ran.stdout and "flowproof CA" not in ran.stdout
        assert "The upstream model failed, not the agent" in ran.stdout
        assert not (tmp_path / "upstream.cassette.json").exists()


class TestUnreachableModelHost:
    def test_a_closed_port_behind_the_upstream_mapping_is_named(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """The upstream is mapped to a closed 127.0.0.1 port: the headline and the advice name that
        address, exit 5, and a recording that never reached the model leaves no rejected file."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        ran = flowproof.run(upstream_spec(tmp_path), "--record", "--upstream", f"api.openai.com=http://127.0.0.1:{port}",
                            keys=True)
        assert ran.code == 5, ran.output
        assert (f"the proxy could not reach the model host 127.0.0.1:{port} (where the upstream mapping sends "
                "api.openai.com): connection refused") in ran.stdout.splitlines()[3]
        advice = f"The proxy could not reach 127.0.0.1:{port}, where the upstream mapping sends api.openai.com"
        assert advice in ran.stdout
        assert not list(tmp_path.glob("*.rejected.json")) and not list(tmp_path.glob("*.recording.json"))
        assert not (tmp_path / "upstream.cassette.json").exists()
