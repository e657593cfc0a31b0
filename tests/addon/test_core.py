"""The root addon: options, configure, lifecycle hooks (driven with mitmproxy's test flows)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mitmproxy import exceptions, optmanager
from mitmproxy.test import tflow

from flowproof.addon import Compare, Record
from flowproof.addon.core import CLIENT_TLS_MAX, cap_client_tls
from flowproof.addon.eventlog import EventLog

from .conftest import Harness, after_handshake, start_mitmdump, write_cassette


class TestOptions:
    def test_bad_mode_is_refused(self, harness: Harness):
        """An unknown mode is an OptionsError."""
        with pytest.raises(exceptions.OptionsError):
            harness.configure(flowproof_mode="playback")

    def test_bad_upstream_names_the_value(self, harness: Harness, tmp_path: Path):
        """A malformed upstream map fails configure with the value in the message."""
        with pytest.raises(exceptions.OptionsError, match="nonsense"):
            harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"),
                              flowproof_upstream=["nonsense"])

    def test_bad_compare_handler_is_refused(self, harness: Harness, tmp_path: Path):
        """A compare handler that cannot be imported fails configure."""
        path = write_cassette(tmp_path / "c.json")
        with pytest.raises(exceptions.OptionsError, match="no_such_module_xyz"):
            harness.configure(flowproof_mode="compare", flowproof_cassette=str(path),
                              flowproof_compare_handler="no_such_module_xyz:f")

    def test_missing_cassette_says_how_to_record(self, harness: Harness, tmp_path: Path):
        """Replay of a missing cassette fails configure and names the record command."""
        with pytest.raises(exceptions.OptionsError, match="record"):
            harness.configure(flowproof_mode="replay", flowproof_cassette=str(tmp_path / "none.json"))

    def test_replay_without_cassette_path_is_refused(self, harness: Harness):
        """Replay with no cassette option at all fails configure."""
        with pytest.raises(exceptions.OptionsError, match="flowproof_cassette"):
            harness.configure(flowproof_mode="replay")

    def test_record_into_missing_directory_is_refused(self, harness: Harness, tmp_path: Path):
        """Recording into a directory that does not exist fails before any traffic."""
        with pytest.raises(exceptions.OptionsError, match="does not exist"):
            harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "no" / "c.json"))

    def test_route_mismatch_is_refused(self, harness: Harness, tmp_path: Path):
        """Replay refuses a cassette recorded on the other route."""
        path = write_cassette(tmp_path / "c.json", route="base_url")
        with pytest.raises(exceptions.OptionsError, match="route"):
            harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))

    def test_bad_spec_is_refused(self, harness: Harness, tmp_path: Path):
        """An invalid spec fails configure naming the spec option."""
        spec = tmp_path / "bad.flow.yaml"
        spec.write_text("name: [unclosed\n")
        with pytest.raises(exceptions.OptionsError, match="flowproof_spec"):
            harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"),
                              flowproof_spec=str(spec))

    def test_replay_forces_lazy_connections(self, harness: Harness, tmp_path: Path):
        """Replay switches mitmproxy to lazy connections so no upstream is ever dialled."""
        path = write_cassette(tmp_path / "c.json")
        # The option belongs to mitmproxy's proxyserver addon, absent from the test context.
        harness.tctx.options.add_option("connection_strategy", str, "eager", "test", choices=("eager", "lazy"))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        assert harness.tctx.options.connection_strategy == "lazy"


class TestComposition:
    def test_the_mode_selects_the_one_concern_before_the_log(self, harness: Harness, tmp_path: Path):
        """Configuring a mode makes its concern the root's child after the witness and the MCP
        boundary, and the event log the last."""
        from flowproof.addon.mcp import McpBoundary
        from flowproof.addon.witness import Witness

        root = harness.addon.root
        harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"))
        assert [type(a) for a in root.addons] == [Witness, McpBoundary, Record, EventLog]
        path = write_cassette(tmp_path / "r.json")
        harness.configure(flowproof_mode="compare", flowproof_cassette=str(path))
        assert [type(a) for a in root.addons] == [Witness, McpBoundary, Compare, EventLog]
        assert all(a.shared is root.shared for a in root.addons[:3])

    def test_done_closes_the_log_after_the_concern_wrote(self, harness: Harness, tmp_path: Path):
        """The concern's done event is written, then the log is closed by its own done hook."""
        path = write_cassette(tmp_path / "r.json")
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        harness.addon.done()
        assert [e["event"] for e in harness.events()] == ["done"]
        assert harness.report.resolve() not in open_paths()


def open_paths() -> set[Path]:
    """The files this process holds open (Linux: /proc/self/fd)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(Path(os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:
            continue
    return found


class TestLifecycle:
    def test_tls_failure_is_logged(self, harness: Harness, tmp_path: Path):
        """A client TLS failure writes a tls_failed event naming the host."""
        harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"))
        from mitmproxy import tls
        from mitmproxy.proxy import context

        client = tflow.tclient_conn()
        client.sni = "api.openai.com"
        data = tls.TlsData(client, context.Context(client, harness.tctx.options))
        harness.addon.tls_failed_client(data)
        (event,) = harness.events("tls_failed")
        assert event["host"] == "api.openai.com"
        assert "does not trust" in event["text"]
        assert event["model"] is True

    def test_a_tls_failure_on_a_host_of_no_model_call_says_so(self, harness: Harness, tmp_path: Path):
        """An agent's telemetry host is not a model host; a mapped one is."""
        harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"),
                          flowproof_upstream=["llm.internal=http://127.0.0.1:9"])
        from mitmproxy import tls
        from mitmproxy.proxy import context

        for host in ("telemetry.example.com", "llm.internal"):
            client = tflow.tclient_conn()
            client.sni = host
            harness.addon.tls_failed_client(tls.TlsData(client, context.Context(client, harness.tctx.options)))
        assert [(e["host"], e["model"]) for e in harness.events("tls_failed")] == [
            ("telemetry.example.com", False), ("llm.internal", True),
        ]

    def test_running_writes_ready(self, harness: Harness, tmp_path: Path):
        """The running hook writes a ready event with a listen list."""
        harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"))
        harness.addon.running()
        (event,) = harness.events("ready")
        assert event["listen"] == []
        assert event["mode"] == "record"


def _tls_options(value: str | None = None) -> optmanager.OptManager:
    """The option as mitmproxy's tlsconfig addon declares it, set by the user to ``value``."""
    options = optmanager.OptManager()
    options.add_option("tls_version_client_max", str, "UNBOUNDED", "")
    if value is not None:
        options.update(tls_version_client_max=value)
    return options


class TestClientTls:
    def test_agents_are_offered_tls_1_2_at_most_unless_the_user_chose(self) -> None:
        untouched = _tls_options()
        cap_client_tls(untouched)
        assert untouched.tls_version_client_max == CLIENT_TLS_MAX == "TLS1_2"
        chosen = _tls_options("TLS1_3")
        cap_client_tls(chosen)
        assert chosen.tls_version_client_max == "TLS1_3"
        cap_client_tls(optmanager.OptManager())  # no tlsconfig addon (a bare test context): nothing to cap

    def test_mitmproxy_s_tls_sends_nothing_between_the_handshake_and_the_first_request(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        """What a threaded client loses its first request to never comes (docs/addon.md)."""
        confdir, bundle = ca_bundle
        proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=record",
                               f"flowproof_cassette={tmp_path / 'c.json'}", name="quiet")
        try:
            version, after = after_handshake(proxy.port, bundle)
            assert proxy.stop() == 0
        finally:
            proxy.kill()
        assert (version, after) == ("TLSv1.2", b"")

    def test_a_user_s_tls_1_3_is_kept_and_then_session_tickets_follow_the_handshake(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        """The cap is what keeps the line quiet: with 1.3 chosen, mitmproxy's tickets come unasked."""
        confdir, bundle = ca_bundle
        proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=record", "tls_version_client_max=TLS1_3",
                               f"flowproof_cassette={tmp_path / 'c.json'}", name="tickets")
        try:
            version, after = after_handshake(proxy.port, bundle, wait=5.0)
            assert proxy.stop() == 0
        finally:
            proxy.kill()
        assert version == "TLSv1.3" and after
