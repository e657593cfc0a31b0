"""What every flowproof addon shares: the config, the event log, detection and upstream mapping.

The concerns (`addon.record`, `addon.replay`, `addon.compare`) are small
mitmproxy addons that each do one thing; they hold one `Shared` between them,
built by the root addon (`addon.core.Flowproof`) from the options.
"""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from mitmproxy import http
from mitmproxy.net.http import status_codes, url

from flowproof.addon.eventlog import EventLog
from flowproof.addon.options import AddonConfig
from flowproof.advice import addon_record_command, record_command
from flowproof.cassette import RecordedTurn
from flowproof.content_encoding import DecodedTooLargeError, decode_content, is_identity
from flowproof.errors import FlowproofError
from flowproof.log import addon_logger
from flowproof.log_events import DoneEvent, ErrorEvent, ErrorKind, RequestStartedEvent
from flowproof.mcp import McpExchange
from flowproof.mcp.stdio import StdioRecording
from flowproof.options import Route
from flowproof.redact import redact_url
from flowproof.replay import Replayer
from flowproof.request_key import PreparedRequest, prepare_request
from flowproof.views import turn_views
from flowproof.wire import Codec, detect, is_model_host, normalize_host
from flowproof.wire.base import FrameCodec
from flowproof.wire.frames import detect_frames
from flowproof.wire.providers import base_url_path

__all__ = [
    "JSON_HEADERS",
    "Detected",
    "Shared",
    "config_record_command",
    "content_of",
    "elapsed_ms",
    "log",
    "make_response",
    "pretty_host",
    "refuse_unhandled",
    "refuse_websocket",
]

# structlog bound to a stdlib logger, so events reach mitmproxy's log handlers
# without touching the process-wide structlog configuration (credentials masked).
log = addon_logger()

JSON_HEADERS = {"content-type": "application/json"}


def content_of(message: http.Message) -> bytes:
    """The decoded body (``content-encoding`` undone), the raw bytes when the declared encoding
    is wrong. Decoding stops at `DECODED_BODY_CAP` and raises `DecodedTooLargeError`: mitmproxy's
    own ``message.content`` would expand a compression bomb whole, in memory."""
    raw = message.raw_content or b""
    encoding = message.headers.get("content-encoding", "")
    if not raw or is_identity(encoding):
        return raw
    try:
        return decode_content(raw, encoding)
    except ValueError:
        return raw


def pretty_host(req: http.Request) -> str:
    """``req.pretty_host``, with the parse of the Host header (or HTTP/2 authority) remembered:
    every hook of a call asks for it, and a run's calls go to a handful of hosts."""
    authority = req.host_header
    return _authority_host(authority) if authority else req.host


@functools.lru_cache(maxsize=256)
def _authority_host(authority: str) -> str:
    return str(url.parse_authority(authority, check=False)[0])


#: What every answer made here is copied from (`make_response`).
_TEMPLATE = http.Response.make(200)
#: Headers `http.Response.make` treats specially: an answer with one is made by it.
_SPECIAL_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


def make_response(status: int, content: bytes, headers: Mapping[str, str]) -> http.Response:
    """The response ``http.Response.make(status, content, headers)`` builds, a third of its cost:
    the same fields, copied from a template instead of type-checked field by field (mitmproxy's
    message data checks every field's type as it is made, the largest part of a replayed
    answer's making). With a content or transfer encoding, or a length already given, it is
    ``Response.make``'s own (which encodes the body, or leaves the length out)."""
    if any(name.lower() in _SPECIAL_HEADERS for name in headers):
        return http.Response.make(status, content, dict(headers))
    fields = [(k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
              for k, v in headers.items()]
    fields.append((b"content-length", str(len(content)).encode()))
    data = copy.copy(_TEMPLATE.data)
    data.status_code = status
    data.reason = status_codes.RESPONSES.get(status, "").encode()
    data.headers = http.Headers(fields)
    data.content = content
    data.timestamp_start = data.timestamp_end = time.time()
    response = copy.copy(_TEMPLATE)
    response.data = data
    return response


def elapsed_ms(flow: http.HTTPFlow) -> float:
    """Milliseconds since the request's first byte reached the proxy (one clock read: cheap
    enough for every call). Replay: until the answer is chosen; live: until the turn is known."""
    return round((time.time() - flow.request.timestamp_start) * 1000, 1)


def _is_websocket_upgrade(request: http.Request) -> bool:
    upgrade: str = request.headers.get("upgrade", "")
    return upgrade.strip().lower() == "websocket"


def _split_query(target: str) -> tuple[str, str]:
    """A request target as (path, ``?query`` or "")."""
    path, mark, query = target.partition("?")
    return path, mark + query


def refuse_websocket(flow: http.HTTPFlow) -> None:
    """Answer a WebSocket upgrade with 426: codex then falls back to HTTP at once (measured:
    under a second, against about six seconds of retries after a 403 or 404)."""
    flow.response = http.Response.make(
        426,
        json.dumps({"error": {"message": "flowproof: WebSocket is not supported here, use HTTP"}}),
        {**JSON_HEADERS, "connection": "close"},
    )


def config_record_command(config: AddonConfig) -> str:
    """The command that records the configured cassette: ``flowproof-run`` with a spec,
    else the bare mitmdump command."""
    if config.options.spec is not None:
        return record_command(config.options.spec)
    return addon_record_command(config.cassette)


@dataclass(frozen=True, slots=True)
class Detected:
    """A request flowproof must act on: a model call (``codec``), a WebSocket upgrade to a
    model API (``websocket``, its frame codec), or other traffic (both None) to a model host
    (``model_host``) or elsewhere."""

    codec: Codec | None
    model_host: bool
    websocket: FrameCodec | None = None


class Shared:
    """The state every concern reads: the typed options, the event log, the replayer."""

    def __init__(self, config: AddonConfig | None = None, replayer: Replayer | None = None) -> None:
        self.config = config or AddonConfig()
        self.replayer = replayer
        self.events = EventLog(self.config.report)
        #: MCP exchanges recorded by the MCP concern, saved by `Record` beside the turns.
        self.mcp_exchanges: list[McpExchange] = []
        #: stdio MCP sessions recorded by the MCP concern (`addon.mcp_stdio`), saved beside them.
        self.mcp_stdio: list[StdioRecording] = []
        #: Tool names by call id, from the responses seen so far (`learn_calls`): a continuation
        #: by id answers a call it does not carry, and the spec's tool results must still apply.
        self.call_names: dict[str, str] = {}

    def learn_calls(self, turn: RecordedTurn) -> None:
        """Remember the tool calls a turn's response asked for (only when the spec mocks tools)."""
        if not self.config.tool_results or turn.response is None:
            return
        try:
            view = turn_views(turn).response
        except FlowproofError:
            return  # an unreadable response names no call
        for call in view.tool_calls if view is not None else ():
            if call.call_id:
                self.call_names[call.call_id] = call.name

    def detect(self, flow: http.HTTPFlow) -> Detected | None:
        """What ``flow`` is; None when flowproof has nothing to do with it (another addon
        answered it, or it is a WebSocket upgrade to a model host refused here with 426:
        ``transport: http``, or an API flowproof cannot record over a WebSocket)."""
        if flow.response is not None or flow.error is not None:
            return None
        req = flow.request
        host = pretty_host(req)
        path, query = _split_query(req.path)
        if self.config.route is Route.BASE_URL and (api_path := base_url_path(normalize_host(host), path)):
            # A client that expects the version in the base URL (the Vercel AI SDK's `/messages`):
            # the same call as the API's own path, forwarded and recorded as that path.
            req.path = api_path + query
            path = api_path
        extra = self.config.extra_hosts
        model_host = is_model_host(host, extra)
        if _is_websocket_upgrade(req):
            frames = detect_frames(host, path, extra)
            if frames is not None and not self.config.options.refuses_websocket:
                return Detected(None, model_host, websocket=frames)
            if model_host or frames is not None or detect("POST", host, path, extra) is not None:
                refuse_websocket(flow)
                log.info("websocket_refused", host=host, path=path)
            return None
        return Detected(detect(req.method, host, path, extra), model_host)

    def prepare(self, flow: http.HTTPFlow, codec: Codec, *, flush: bool = True) -> PreparedRequest | None:
        """The model call's hash path (`prepare_request`); the forwarded body replaces the
        request's when tool results were substituted. Logs ``request_started`` (unflushed with
        ``flush=False``: replay writes the call's outcome in the same hook, `EventLog`).

        None when the body decodes past the cap: the call is answered 413 here, never
        forwarded, and an ``error`` event names it and the cap."""
        req = flow.request
        try:
            raw = content_of(req)
        except DecodedTooLargeError as e:
            self.refuse_too_large(flow, codec, e)
            return None
        prepared = self.prepare_body(flow.id, codec, raw, req.path.split("?", 1)[0], flush=flush,
                                     at=req.timestamp_start)
        if prepared.rewrite_error is None and prepared.forwarded != raw:
            req.content = prepared.forwarded
        return prepared

    def prepare_body(self, call_id: str, codec: Codec, raw: bytes, path: str, *, flush: bool = True,
                     at: float | None = None) -> PreparedRequest:
        """`prepare` for a body that is not an HTTP request's (a WebSocket request frame): the
        hash path, and ``request_started`` for ``call_id`` (``at``: when the request arrived, the
        moment its ``ms`` counts from). The caller forwards ``forwarded``."""
        prepared = prepare_request(
            codec, raw, self.config.tool_results, self.config.normalizer, path, self.call_names
        )
        if prepared.rewrite_error is not None:
            # The codec cannot read the body: forward it as sent; the hash then says what it is.
            log.warning(
                "tool_results_not_substituted", provider=codec.name, reason=prepared.rewrite_error
            )
        self.events.write(RequestStartedEvent(call_id, at), flush=flush)
        return prepared

    def refuse_too_large(self, flow: http.HTTPFlow, codec: Codec, error: DecodedTooLargeError) -> None:
        """Answer a call whose body decodes past the cap with a 413, and fail the run naming it."""
        req = flow.request
        text = (
            f"flowproof refused the model call {req.method} {redact_url(req.pretty_url)} (flow {flow.id}): "
            f"{error}. It was answered 413 and never forwarded."
        )
        flow.response = http.Response.make(413, codec.error_body(413, f"flowproof: {error}"), JSON_HEADERS)
        self.events.write(RequestStartedEvent(flow.id, req.timestamp_start), flush=False)
        self.events.write(ErrorEvent(text, ErrorKind.REQUEST, id=flow.id))
        log.error("request_body_too_large", flow_id=flow.id, encoding=error.encoding, cap=error.cap)

    def map_upstream(self, req: http.Request) -> bool:
        """Point a request for a mapped host at its upstream URL; True when it was mapped."""
        target = self.config.upstream.get(normalize_host(req.pretty_host))
        if target is None:
            return False
        req.scheme = target.scheme
        req.host = target.host  # also updates Host / :authority
        req.port = target.port
        if target.path_prefix:
            req.path = target.path_prefix + req.path
        return True

    def hook_failed(self, flow: http.HTTPFlow, hook: str, error: Exception) -> None:
        """A bug of ours must fail the run visibly, never let a call pass unrecorded or unmatched.
        A `FlowproofError` (a volatile rule that ran out of time) is the user's to fix: its own
        message says what and where."""
        url = self.config.normalizer.mask_text(redact_url(flow.request.pretty_url))
        if isinstance(error, FlowproofError):
            text = f"flowproof refused the call to {url}: {error}"
            kind = ErrorKind.REQUEST
        else:
            text = f"flowproof failed in its {hook} hook for {url}: {type(error).__name__}: {error}"
            kind = ErrorKind.HOOK
        text = self.config.normalizer.mask_text(text)
        self.events.write(ErrorEvent(text, kind, id=flow.id))
        log.error("hook_failed", hook=hook, flow_id=flow.id, error=type(error).__name__)

    def report_unconsumed(self) -> None:
        """At shutdown (replay, compare): the ``done`` event with the recorded turns never requested."""
        if self.replayer is None:
            return
        unconsumed = [t.index for t in self.replayer.unconsumed()]
        self.events.write(DoneEvent(tuple(unconsumed)))
        if unconsumed:
            log.warning("turns_unconsumed", count=len(unconsumed), first=unconsumed[:10])


def refuse_unhandled(flow: http.HTTPFlow) -> None:
    """Answer a call flowproof could not handle with a 400.

    mitmproxy would forward the call after a failed hook: in replay to the real
    API with the agent's key. A call flowproof could not handle never leaves.
    """
    flow.response = http.Response.make(
        400,
        json.dumps(
            {"error": {"message": "flowproof could not handle this request; see its report"}}
        ),
        JSON_HEADERS,
    )
