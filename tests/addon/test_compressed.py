"""Compressed request bodies through a real mitmdump with the addon: record keeps the encoding
and the decoded body, replay matches the same compressed bytes, and a compression bomb is
refused at the cap within seconds while the proxy's memory stays bounded.

The client is httpx2 (the transport of the openai and anthropic SDKs) through the explicit
proxy with TLS interception; the fake model server upstream decodes the bodies on its own.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import brotli
import httpx2
import pytest

from flowproof.cassette import load_cassette
from flowproof.testing import FakeModelServer, Reply

from ..test_content_encoding import gzip_bomb
from .conftest import Mitmdump, start_mitmdump

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

pytestmark = pytest.mark.timeout(120)

URL = "https://api.openai.com/v1/responses"
BODY = json.dumps({"model": "gpt-4o", "input": "Say hi. " * 300, "stream": True}, separators=(",", ":")).encode()
ENCODE = {
    "gzip": lambda b: gzip.compress(b, mtime=0),
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstd.compress,
}


def _post(proxy: Mitmdump, bundle: Path, content: bytes, encoding: str) -> httpx2.Response:
    headers = {"content-type": "application/json", "content-encoding": encoding, "authorization": "Bearer sk-x"}
    with httpx2.Client(proxy=proxy.url, verify=str(bundle), timeout=60) as client:
        return client.post(URL, content=content, headers=headers)


def _peak_rss(proxy: Mitmdump) -> int:
    """The proxy process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{proxy.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.parametrize("encoding", sorted(ENCODE))
def test_a_compressed_body_records_decoded_with_its_encoding_and_replays(
    encoding: str, tmp_path: Path, ca_bundle: tuple[Path, Path]
) -> None:
    confdir, bundle = ca_bundle
    cassette = tmp_path / "compressed.cassette.json"
    wire = ENCODE[encoding](BODY)
    with FakeModelServer([Reply.text("hi there")]) as server:
        proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=record", f"flowproof_cassette={cassette}",
                               f"flowproof_upstream=api.openai.com={server.url}", name="record")
        try:
            recorded = _post(proxy, bundle, wire, encoding)
            assert proxy.stop() == 0
        finally:
            proxy.kill()
        [received] = server.model_requests
    assert recorded.status_code == 200 and "hi there" in recorded.text
    # The upstream got what the agent sent: the same encoding, the same body once decoded.
    assert received.headers["content-encoding"] == encoding and received.body == BODY
    [turn] = load_cassette(cassette).turns
    assert turn.request.headers["content-encoding"] == encoding
    assert turn.request.body == json.loads(BODY)
    assert "content-encoding" not in (turn.response.headers if turn.response else {})

    proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=replay", f"flowproof_cassette={cassette}",
                           name="replay")
    try:
        replayed = _post(proxy, bundle, wire, encoding)
        assert proxy.stop() == 0
        events: list[dict[str, Any]] = proxy.events()
    finally:
        proxy.kill()
    assert replayed.status_code == 200 and replayed.text == recorded.text
    assert [e["event"] for e in events if e["event"] in ("turn", "divergence", "error")] == ["turn"]


def test_a_compression_bomb_is_refused_at_the_cap_in_seconds_and_bounded_memory(
    tmp_path: Path, ca_bundle: tuple[Path, Path]
) -> None:
    """1.6 MB of gzip that expands to 1.5 GiB: mitmproxy's own decoding took the proxy past
    2 GiB of RSS in 7 s; capped, it answers 413 at once and its peak stays a few hundred MB."""
    confdir, bundle = ca_bundle
    cassette = tmp_path / "bomb.cassette.json"
    bomb = gzip_bomb(1536)
    with FakeModelServer([Reply.text("never")]) as server:
        proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=record", f"flowproof_cassette={cassette}",
                               f"flowproof_upstream=api.openai.com={server.url}", name="bomb")
        try:
            before = _peak_rss(proxy)
            started = time.monotonic()
            answer = _post(proxy, bundle, bomb, "gzip")
            elapsed = time.monotonic() - started
            peak = _peak_rss(proxy)
            assert proxy.stop() == 0
            errors = proxy.events("error")
        finally:
            proxy.kill()
        assert server.model_requests == []  # never forwarded
    assert answer.status_code == 413 and "64 MiB" in answer.json()["error"]["message"]
    assert elapsed < 10
    assert peak - before < 300 * 1024 * 1024, f"peak RSS grew by {(peak - before) >> 20} MiB"
    [error] = errors
    assert "POST https://api.openai.com/v1/responses" in error["text"] and "64 MiB" in error["text"]
    assert error["id"]
