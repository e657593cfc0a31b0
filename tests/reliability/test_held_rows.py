"""Rows of docs/reliability.md that already held before the reliability work, proven here
at the sizes the table states: 100 concurrent identical calls, SIGKILL of the proxy
mid-record, and listeners bound to loopback only."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowproof.cassette import load_cassette
from flowproof.testing import FakeModelServer, Reply
from tests.addon.conftest import ca_bundle  # noqa: F401  (fixture)
from tests.addon.test_e2e import Session, record

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def session(tmp_path: Path, ca_bundle: tuple[Path, Path]) -> Iterator[Session]:  # noqa: F811
    s = Session(tmp_path, ca_bundle)
    try:
        yield s
    finally:
        s.close()


def listening_addresses(ports: set[int]) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) listening on ``ports``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(port_hex, 16) in ports:  # 0A: LISTEN
                found.add(address)
    return found


class TestHeldRows:
    def test_100_concurrent_identical_calls(self, session: Session) -> None:
        """100 concurrent identical calls record 100 turns and replay each exactly once."""
        script = [Reply.text(f"title {i}") for i in range(100)]
        cassette, live, _ = record(session, script, "api.openai.com", FP_CONCURRENT="100")
        assert sorted(t["text"] for t in live["turns"]) == sorted(f"title {i}" for i in range(100))
        assert len(load_cassette(cassette).turns) == 100
        proxy = session.proxy("replay", cassette)
        rc, replayed = session.agent(proxy, FP_CONCURRENT="100")
        assert rc == 0 and len(replayed["turns"]) == 100
        assert proxy.stop() == 0
        assert proxy.events("done")[0]["unconsumed"] == []

    def test_sigkill_of_the_proxy_mid_record_keeps_the_old_cassette(self, session: Session) -> None:
        """A proxy killed with SIGKILL after live calls leaves the old cassette byte-identical, no temp file."""
        old_cassette, _, _ = record(session, [Reply.text("old")], "api.openai.com")
        cassette = session.tmp / "kept.cassette.json"
        shutil.copy(old_cassette, cassette)
        before = cassette.read_bytes()
        with FakeModelServer([Reply.text("new")]) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            rc, _ = session.agent(proxy)
            assert rc == 0 and len(server.model_requests) == 1
            proxy.kill()
        assert cassette.read_bytes() == before
        assert sorted(p.name for p in session.tmp.iterdir() if p.name.startswith("kept")) == [cassette.name]

    def test_listeners_are_loopback_only(self, session: Session, tmp_path: Path) -> None:
        """The runner's proxy, reverse listeners included, listens on 127.0.0.1 and nothing else."""
        from flowproof.options import Mode, ProxyOptions, Route, listeners_for
        from flowproof.runner.proxy import start_proxy

        confdir, _ = session.confdir, session.bundle
        options = ProxyOptions(mode=Mode.RECORD, cassette=tmp_path / "new.cassette.json",
                               report=tmp_path / "events.jsonl", route=Route.BASE_URL,
                               listeners=listeners_for(Route.BASE_URL))
        with start_proxy(options, confdir) as proxy:
            ports = {proxy.port, *proxy.reverse_ports.values()}
            assert len(ports) == 4
            assert listening_addresses(ports) == {"0100007F"}, listening_addresses(ports)
        assert os.path.exists(tmp_path / "events.jsonl")
