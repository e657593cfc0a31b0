"""Case 5: malformed flags end the run before anything starts — exit 2, one line, no
traceback — and no report or message ever shows a URL's query string or userinfo."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.e2e.conftest import Flowproof, write_spec

SECRET = "sk-reliability-secret-0123456789"


def spec(tmp: Path) -> Path:
    return write_spec(tmp / "ok.flow.yaml", 'name: ok\nagent:\n  command: "true"\nsteps:\n  - prompt: hi\n')


BAD_FLAGS = [
    ("query string", ["--upstream", f"api.openai.com=http://127.0.0.1:9/v1?key={SECRET}"]),
    ("bare scheme", ["--upstream", "api.openai.com=http://"]),
    ("userinfo", ["--upstream", f"api.openai.com=http://user:{SECRET}@127.0.0.1:9/v1"]),
    ("not http", ["--upstream", "api.openai.com=ftp://127.0.0.1:9"]),
    ("port out of range", ["--upstream", "api.openai.com=http://127.0.0.1:70000"]),
    ("bad host", ["--upstream", "api openai=http://127.0.0.1:9"]),
    ("extra host URL", ["--extra-host", f"https://gw.internal/?key={SECRET}"]),
    ("extra host blank-ish", ["--extra-host", "gw internal"]),
    ("shard 0", ["--shard", "0/2"]),
    ("shard junk", ["--shard", "x/y"]),
    ("shard too many", ["--shard", "1/2/3"]),
    ("proxy port junk", ["--proxy-port", "http"]),
    ("proxy port range", ["--proxy-port", "70000"]),
    ("staging as cassette", ["--cassette", "x.cassette.recording.json"]),
]


class TestFlags:
    @pytest.mark.parametrize(("name", "flags"), BAD_FLAGS, ids=[c[0] for c in BAD_FLAGS])
    def test_bad_flag_is_one_line_exit_2(
        self, tmp_path: Path, flowproof: Flowproof, name: str, flags: list[str]
    ) -> None:
        """Each malformed flag: exit 2, a single line, no traceback, no secret, nothing started."""
        junit = tmp_path / "report.xml"
        ran = flowproof.run(spec(tmp_path), "--record", "--json", "--junit", junit, *flags, timeout=60)
        assert ran.code == 2, ran.output
        lines = [line for line in ran.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("flowproof-run: "), ran.output
        assert "Traceback" not in ran.output and SECRET not in ran.output
        # Refused before anything ran: no flow report at all, and so no JUnit file.
        assert ran.stdout == "" and not junit.exists()

    def test_proxy_port_in_use_is_refused_before_starting(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """A --proxy-port already taken is a usage error, not an agent or proxy failure."""
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            ran = flowproof.run(spec(tmp_path), "--record", "--proxy-port", str(port), timeout=60)
        assert ran.code == 2 and f"--proxy-port {port}" in ran.output and "in use" in ran.output

    def test_env_upstream_is_checked_too(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """FLOWPROOF_UPSTREAM gets the same checks and the same redaction as --upstream."""
        ran = flowproof.run(spec(tmp_path), "--record", timeout=60,
                            FLOWPROOF_UPSTREAM=f"api.openai.com=http://127.0.0.1:9/?key={SECRET}")
        assert ran.code == 2 and "query string" in ran.output and SECRET not in ran.output
