"""A recorded stream is never buffered: through a real mitmdump with the addon in record mode,
the first SSE chunk reaches the client while the fake upstream is still sending.

The fake model server records each payload before it writes it, so when the client
holds its first chunk, ``exchange.response.complete`` says whether the upstream had
already sent its last event. The server's ``chunk_delay`` spaces the events out, so the
answer is not a race: a streaming proxy delivers the first chunk seconds before the last
one is sent; a buffering proxy cannot deliver it before then. The second test shows the
check catching exactly that, on a plain mitmdump (which buffers bodies by default).
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from flowproof.cassette import load_cassette
from flowproof.testing import FakeModelServer, Reply

from .conftest import Mitmdump, start_mitmdump

pytestmark = pytest.mark.timeout(120)

URL = "https://api.openai.com/v1/chat/completions"
CHAT = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "Say six words."}]}
#: Nine events (role, six words, finish, [DONE]) 0.4 s apart: the last leaves the server 3.2 s after the first.
SLOW = Reply.text("one two three four five six", chunk_delay=0.4)


def first_chunk_then_rest(proxy: Mitmdump, bundle: Path, server: FakeModelServer) -> tuple[bool, int, bytes]:
    """POST a streamed call through ``proxy``; (had the upstream sent its last event when the
    first chunk arrived, how many events had it sent, the whole body the client read)."""
    with httpx2.Client(proxy=proxy.url, verify=str(bundle), timeout=30) as client, \
            client.stream("POST", URL, json=CHAT) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()
        first = next(chunk for chunk in chunks if chunk)
        (exchange,) = server.model_exchanges
        assert exchange.response is not None
        upstream_done, sent = exchange.response.complete, len(exchange.response.chunks)
        body = first + b"".join(chunks)
    return upstream_done, sent, body


class TestRecordedStreamIsNotBuffered:
    def test_first_chunk_reaches_the_client_before_the_upstream_sends_its_last(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        confdir, bundle = ca_bundle
        cassette = tmp_path / "stream.cassette.json"
        with FakeModelServer([SLOW]) as server:
            proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=record", f"flowproof_cassette={cassette}",
                                   f"flowproof_upstream=api.openai.com={server.url}", name="record")
            try:
                upstream_done, sent, body = first_chunk_then_rest(proxy, bundle, server)
                total = len(server.model_exchanges[0].response.chunks)  # type: ignore[union-attr]
                assert proxy.stop() == 0
            finally:
                proxy.kill()
        assert not upstream_done, "the first chunk reached the client only after the upstream had sent its last"
        assert sent < total
        # Streaming did not cost the recording anything: the whole stream, once, in order.
        assert body.rstrip().endswith(b"data: [DONE]")
        (turn,) = load_cassette(cassette).turns
        assert not turn.abandoned and turn.response is not None and turn.response.events is not None
        assert len(turn.response.events) == total
        assert turn.response.content() == b"".join(server.model_exchanges[0].response.chunks)  # type: ignore[union-attr]

    def test_the_check_catches_a_buffering_proxy(self, tmp_path: Path, ca_bundle: tuple[Path, Path]) -> None:
        """Plain mitmdump without the addon holds the body until the upstream has sent all of it."""
        confdir, bundle = ca_bundle
        with FakeModelServer([SLOW]) as server:
            proxy = start_mitmdump(tmp_path, confdir, script=None, name="plain",
                                   args=("--map-remote", f"|https://api.openai.com|{server.url}"))
            try:
                upstream_done, sent, _ = first_chunk_then_rest(proxy, bundle, server)
            finally:
                proxy.stop()
        assert upstream_done
        assert sent == len(server.model_exchanges[0].response.chunks)  # type: ignore[union-attr]
