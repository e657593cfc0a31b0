"""A scripted fake model server for tests: the upstream every flowproof end-to-end test talks to.

`FakeModelServer` answers the four model APIs flowproof knows — OpenAI Chat
Completions, OpenAI Responses, Anthropic Messages and Gemini generateContent —
in their real wire formats, streaming or not as the request asks, from a script
of `Reply` values served in order::

    from flowproof.testing import FakeModelServer, Reply

    with FakeModelServer([Reply.tool_call("get_weather", {"city": "Paris"}),
                          Reply.text("It is sunny in Paris.")]) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="test-key")
        ...
        assert server.requests[0].json["model"] == "gpt-4o"
        exchange = server.exchanges[0]  # the request and the exact response bytes sent

The package mirrors ``flowproof.wire`` (one renderer module per API) but imports
nothing from it: it is an independent producer of each provider's bytes, so
codec tests against it mean something. Ids are counters and timestamps are
fixed, so the same script and the same requests give the same bytes on every
run (cassettes recorded against it are committed). Streams are written one
event per HTTP chunk, each flushed, so a proxy in between can be measured for
time to first chunk.

Modules: `script` (the reply DSL and script files), `capture` (what was
received and sent), `detect` (which API a request is), `base` and one renderer
per API, `livelike` (answers that differ like a live model's), `transport`
(when each byte goes out), `server` (the threaded HTTP/1.1 server), `websocket`
(the Responses WebSocket mode), `http2`
and `tls` (HTTP/2, by ALPN or prior knowledge), `clients` (rude clients that
leave a call early), `cli` (``python -m flowproof.testing``). See
``docs/testing.md``.
"""

from flowproof.testing.base import split_arguments, split_text
from flowproof.testing.capture import OUTCOMES, Exchange, ReceivedRequest, SentResponse
from flowproof.testing.cli import main
from flowproof.testing.clients import (
    RudeResult,
    abandon,
    close_after_terminal,
    reset_after_terminal,
)
from flowproof.testing.livelike import LiveLike
from flowproof.testing.script import (
    FINISH_REASONS,
    Reply,
    ReplyOptions,
    Script,
    ScriptedCall,
    ScriptError,
    load_script,
    script_from_data,
)
from flowproof.testing.server import FakeModelServer

__all__ = [
    "FINISH_REASONS",
    "OUTCOMES",
    "Exchange",
    "FakeModelServer",
    "LiveLike",
    "ReceivedRequest",
    "Reply",
    "ReplyOptions",
    "RudeResult",
    "Script",
    "ScriptError",
    "ScriptedCall",
    "SentResponse",
    "abandon",
    "close_after_terminal",
    "load_script",
    "main",
    "reset_after_terminal",
    "script_from_data",
    "split_arguments",
    "split_text",
]
