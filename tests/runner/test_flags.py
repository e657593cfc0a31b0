"""Flag validation: every bad value is a FlowproofError, and URLs are only shown redacted."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from flowproof.errors import FlowproofError
from flowproof.runner.flags import WriterClaims, check_cassette_flag, check_one_writer, check_proxy_port


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


class TestWriterClaims:
    def test_a_second_writer_is_refused_naming_both_and_the_first_keeps_its_claim(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        claims = WriterClaims()
        claims.claim("a.flow.yaml", Path("c.json"))
        # The same file by another spelling is the same cassette.
        with pytest.raises(FlowproofError) as refused:
            claims.claim("b.flow.yaml", tmp_path / "c.json", shown=Path("c.json"))
        assert str(refused.value) == (
            "a.flow.yaml and b.flow.yaml both record c.json, so one recording would be lost — "
            "give each spec its own `cassette:`, or record them in separate runs"
        )
        assert claims.first(Path("c.json")) == "a.flow.yaml"

    def test_the_same_writer_claiming_again_is_no_second_writer(self) -> None:
        """A rerun of one test (one node id) records its own cassette again."""
        claims = WriterClaims()
        claims.claim("t.py::test_x", Path("/c.json"), advice="give each test its own cassette")
        claims.claim("t.py::test_x", Path("/c.json"), advice="give each test its own cassette")
        assert claims.first(Path("/c.json")) == "t.py::test_x"
        assert claims.first(Path("/other.json")) is None

    def test_check_one_writer_words_the_cli_refusal(self) -> None:
        with pytest.raises(FlowproofError, match=r"^a.yaml and b.yaml both record /c.json, so one recording"):
            check_one_writer([(Path("a.yaml"), Path("/c.json")), (Path("b.yaml"), Path("/c.json"))])
        check_one_writer([(Path("a.yaml"), Path("/c.json")), (Path("b.yaml"), Path("/d.json"))])
