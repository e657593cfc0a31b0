"""Tests for flowproof.testing.tls: the fake server's throw-away certificate."""

from __future__ import annotations

import ipaddress
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from flowproof.testing import FakeModelServer
from flowproof.testing.tls import server_context, write_certificate


class TestCertificate:
    def test_covers_loopback_and_extra_names(self, tmp_path: Path) -> None:
        """The certificate names localhost, the loopback addresses and any extra host given."""
        cert_file, _ = write_certificate(tmp_path, ["api.openai.com"])
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "api.openai.com"}
        assert set(names.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address("127.0.0.1"),
                                                                  ipaddress.ip_address("::1")}

    @pytest.mark.parametrize(("http2", "offered", "chosen"), [(True, ["h2", "http/1.1"], "h2"),
                                                              (False, ["h2", "http/1.1"], "http/1.1")])
    def test_alpn_offers_h2_only_when_asked(self, tmp_path: Path, http2: bool, offered: list[str],
                                            chosen: str) -> None:
        """A client offering h2 gets it from an http2 context, http/1.1 otherwise."""
        with FakeModelServer(tls=True, http2=http2) as server:
            context = ssl.create_default_context(cafile=str(server.cert_file))
            context.set_alpn_protocols(offered)
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    assert tls.selected_alpn_protocol() == chosen
        assert server_context(*write_certificate(tmp_path), http2=True).protocol == ssl.PROTOCOL_TLS_SERVER

    def test_nothing_follows_the_handshake_until_the_client_speaks(self) -> None:
        """No TLS 1.3 session ticket: one landing while a threaded client writes its first
        request loses that request (docs/addon.md, "TLS 1.2 for agents, and why")."""
        with FakeModelServer(tls=True) as server:
            context = ssl.create_default_context(cafile=str(server.cert_file))
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
                while True:
                    try:
                        tls.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        raw.sendall(outgoing.read())
                        incoming.write(raw.recv(65536))
                raw.sendall(outgoing.read())
                raw.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    raw.recv(65536)
            assert tls.version() == "TLSv1.3"

    def test_untrusted_client_is_refused_quietly(self) -> None:
        """A client that does not trust the certificate fails its handshake; the server has no fault."""
        with FakeModelServer(tls=True) as server:
            context = ssl.create_default_context()
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
                with pytest.raises(ssl.SSLCertVerificationError):
                    context.wrap_socket(raw, server_hostname="localhost")
            faults = server.faults
        assert faults == []

    def test_the_certificate_folder_goes_with_the_server_and_a_restart_makes_a_new_one(self) -> None:
        """stop() removes the certificate's folder (it used to wait for the garbage collector)."""
        server = FakeModelServer(tls=True).start()
        first = server.cert_file
        server.stop()
        assert not first.parent.exists()
        with server:
            assert server.cert_file.is_file() and server.cert_file != first

    def test_a_plain_server_has_no_certificate(self) -> None:
        """cert_file is only there with tls=True."""
        with FakeModelServer() as server, pytest.raises(RuntimeError, match="tls=True"):
            _ = server.cert_file
