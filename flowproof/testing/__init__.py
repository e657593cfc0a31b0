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
per API, `server` (the threaded server), `cli` (``python -m flowproof.testing``).
See ``docs/testing.md``.
"""

from flowproof.testing.base import split_arguments, split_text
from flowproof.testing.capture import Exchange, ReceivedRequest, SentResponse
from flowproof.testing.cli import main
from flowproof.testing.script import (
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
    "Exchange",
    "FakeModelServer",
    "ReceivedRequest",
    "Reply",
    "ReplyOptions",
    "Script",
    "ScriptError",
    "ScriptedCall",
    "SentResponse",
    "load_script",
    "main",
    "script_from_data",
    "split_arguments",
    "split_text",
]
