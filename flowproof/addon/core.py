"""The mitmproxy addon: record, replay or compare every model call of an agent.

A thin adapter. The pure core decides — `flowproof.wire` detects and parses,
`flowproof.normalize` builds the hash key, `flowproof.replay.Replayer` matches,
`flowproof.compare` judges drift — and this module does the I/O: it answers
flows, taps streams, writes the event log and saves the cassette.

Per request the work is the hash path (tool-result substitution, normalization,
sha256: O(body)) plus one dict lookup; the cassette is parsed once, in
``configure``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from mitmproxy import ctx, exceptions, http, tls
from mitmproxy.addonmanager import Loader

from flowproof.addon.eventlog import EventLog
from flowproof.addon.options import (
    MODES,
    ROUTES,
    AddonConfig,
    Mode,
    build_config,
    option_values,
)
from flowproof.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
    body_sha256,
    filter_headers,
    load_cassette,
    redact_url,
    save_cassette,
    turn_to_json,
    turn_views,
)
from flowproof.compare import CompareResult, record_on_span
from flowproof.errors import FlowproofError, SpecError
from flowproof.pairing import Call, Pairer
from flowproof.model import Turn
from flowproof.replay import Miss, Replayer, codec_view, route_mismatch
from flowproof.wire import Codec, detect, is_model_host, normalize_host, parse_sse
from flowproof.wire.sse import SSEDecoder, SSEEvent, encode_events

__all__ = ["Flowproof"]

#: The short names of every option (``flowproof_<name>``), in the order `load` registers them.
OPTION_NAMES: tuple[str, ...] = (
    "mode",
    "cassette",
    "spec",
    "upstream",
    "extra_hosts",
    "route",
    "report",
    "compare_handler",
    "cwd",
    "home",
)
_OPTIONS = frozenset(f"flowproof_{n}" for n in OPTION_NAMES)

# structlog bound to a stdlib logger, so events reach mitmproxy's log handlers
# without touching the process-wide structlog configuration.
_log = structlog.wrap_logger(
    logging.getLogger("flowproof.addon"),
    wrapper_class=structlog.stdlib.BoundLogger,
    processors=[structlog.processors.KeyValueRenderer(key_order=["event"], drop_missing=True)],
)

_JSON = {"content-type": "application/json"}


@dataclass(slots=True)
class _FlowState:
    """What the addon remembers about one forwarded model call until it completes."""

    codec: Codec
    method: str
    url: str
    headers: dict[str, str]
    sha: str
    body: Any
    events: list[SSEEvent] | None = None
    decoder: SSEDecoder | None = field(default=None)


def _is_websocket_upgrade(request: http.Request) -> bool:
    upgrade: str = request.headers.get("upgrade", "")
    return upgrade.strip().lower() == "websocket"


def _parse_body(data: bytes) -> Any:
    """The parsed JSON body, or its text when it is not JSON (stored readable either way)."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return data.decode("utf-8", "surrogateescape")


def _content(message: http.Message) -> bytes:
    """The decoded body; the raw bytes when the declared content-encoding is wrong."""
    try:
        return message.content or b""
    except ValueError:
        return message.raw_content or b""


def _turn_json(turn: RecordedTurn) -> dict[str, Any]:
    # The cassette module owns the turn's JSON shape; reuse it so the log and the file agree.
    # (Not dumps_cassette: it looks up the package version on every call, 2/3 of a replay.)
    obj: dict[str, Any] = turn_to_json(turn)
    return obj


class Flowproof:
    """The flowproof addon (``mitmdump -s addon/flowproof_addon.py``); options in docs/internals.md."""

    def __init__(self) -> None:
        self.config = AddonConfig()
        self.events = EventLog(None)
        self.replayer: Replayer | None = None
        self.pairer: Pairer | None = None
        self.turns: list[RecordedTurn] = []
        self._completed = 0  # model calls completed (record and compare), the next turn index
        self._flows: dict[str, _FlowState] = {}
        self._configured = False
        self._last_error: exceptions.OptionsError | None = None

    # ------------------------------------------------------------------ options

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "flowproof_mode", str, "replay",
            "What flowproof does with model calls: record them, replay the cassette, or compare live calls with it.",
            choices=MODES,
        )
        loader.add_option(
            "flowproof_cassette", str, "",
            "The cassette path, read in replay and compare and written atomically at shutdown in record.",
        )
        loader.add_option(
            "flowproof_spec", str, "",
            "The flow spec whose tools, volatile rules and on_compare handler apply to the model calls.",
        )
        loader.add_option(
            "flowproof_upstream", Sequence[str], [],
            "Send a model host's calls elsewhere, as HOST=URL (api.openai.com=http://127.0.0.1:8000).",
        )
        loader.add_option(
            "flowproof_extra_hosts", Sequence[str], [],
            "Extra OpenAI-compatible gateway hosts whose requests are model calls.",
        )
        loader.add_option(
            "flowproof_route", str, "proxy",
            "The route the agent uses (stored in cassettes; replay refuses a cassette from the other route).",
            choices=ROUTES,
        )
        loader.add_option(
            "flowproof_report", str, "",
            "A JSON-lines event log for the runner, appended to and flushed per event.",
        )
        loader.add_option(
            "flowproof_compare_handler", str, "",
            "A module:function that receives each compare result instead of drift failing the run.",
        )
        loader.add_option(
            "flowproof_cwd", str, "",
            "The agent's working directory, stored as a placeholder in cassettes (default: the spec's).",
        )
        loader.add_option(
            "flowproof_home", str, "",
            "The agent's HOME, stored as a placeholder in cassettes (default: $HOME when a spec is given).",
        )

    def configure(self, updated: set[str]) -> None:
        if not updated & _OPTIONS:
            return
        try:
            self._configure()
        except exceptions.OptionsError:
            previous, self._last_error = self._last_error, None
            if previous is not None:
                # mitmproxy undoes a failed update by configuring again with the old values
                # (at startup: the defaults, replay without a cassette); report the error
                # that caused the rollback, not the old values' own.
                raise previous from None
            self._last_error = sys.exc_info()[1]  # type: ignore[assignment]
            raise
        self._last_error = None

    def _configure(self) -> None:
        values = option_values(ctx.options, OPTION_NAMES)
        try:
            config = build_config(values)
        except SpecError as e:
            raise exceptions.OptionsError(f"Cannot load flowproof_spec {values['spec']}: {e}") from None
        except (ValueError, FlowproofError) as e:
            raise exceptions.OptionsError(f"Cannot parse {e}") from None

        replayer: Replayer | None = None
        pairer: Pairer | None = None
        if config.mode is Mode.RECORD:
            if config.cassette is None:
                raise exceptions.OptionsError(
                    "Cannot record without a cassette path: add --set flowproof_cassette=PATH"
                )
            parent = config.cassette.parent
            if not parent.is_dir():
                raise exceptions.OptionsError(
                    f"Cannot record to flowproof_cassette {config.cassette}: "
                    f"the directory {parent} does not exist — create it first"
                )
        else:
            if config.cassette is None:
                raise exceptions.OptionsError(
                    f"Cannot {config.mode.value} without a cassette: add --set flowproof_cassette=PATH, "
                    f"or record one first with: {self._record_command(config)}"
                )
            try:
                cassette = load_cassette(config.cassette, record_command=self._record_command(config))
            except FlowproofError as e:
                raise exceptions.OptionsError(f"Cannot load flowproof_cassette {config.cassette}: {e}") from None
            if config.mode is Mode.REPLAY:
                mismatch = route_mismatch(cassette.route, config.route)
                if mismatch is not None:
                    raise exceptions.OptionsError(f"Cannot replay flowproof_cassette {config.cassette}: {mismatch}")
            if config.mode is Mode.COMPARE:
                pairer = _pairer(cassette, config)
            else:
                replayer = Replayer(cassette)

        if config.report != self.events.path:
            self.events.close()
            self.events = EventLog(config.report)
        self.config = config
        self.replayer = replayer
        self.pairer = pairer
        self.turns = []
        self._completed = 0
        self._flows = {}
        self._configured = True

        # Replay must never dial the real host, and a mapped host may not even resolve:
        # mitmproxy's default (eager) strategy connects upstream at CONNECT time.
        # (The option belongs to mitmproxy's proxyserver addon, absent in bare test contexts.)
        wants_lazy = config.mode is Mode.REPLAY or bool(config.upstream)
        if wants_lazy and "connection_strategy" in ctx.options and ctx.options.connection_strategy != "lazy":
            ctx.options.update(connection_strategy="lazy")

    @staticmethod
    def _record_command(config: AddonConfig) -> str:
        if config.spec is not None:
            return f"flowproof-run {config.spec.path} --record"
        target = config.cassette or "PATH"
        return f"mitmdump -s addon/flowproof_addon.py --set flowproof_mode=record --set flowproof_cassette={target}"

    # ------------------------------------------------------------------ lifecycle

    def running(self) -> None:
        listen: list[dict[str, Any]] = []
        proxyserver = ctx.master.addons.get("proxyserver")
        if proxyserver is not None:
            for server in proxyserver.servers:
                for addr in server.listen_addrs:
                    entry = {"mode": server.mode.full_spec, "host": addr[0], "port": addr[1]}
                    if entry not in listen:  # a mode may listen on TCP and UDP at one address
                        listen.append(entry)
        self.events.write("ready", listen=listen, mode=self.config.mode.value)
        _log.info("proxy_ready", mode=self.config.mode.value, listeners=len(listen))

    def done(self) -> None:
        try:
            if self.config.mode is Mode.RECORD:
                self._save()
            elif self.pairer is not None:
                # Recorded turns no live call reached are results too, delivered like any other.
                unreached = self.pairer.finish()
                for result in unreached:
                    self._deliver(None, result)
                self.events.write("done", unconsumed=[r.turn for r in unreached], text="")
            elif self.replayer is not None:
                missing = self.replayer.missing_divergence()
                unconsumed = [t.index for t in self.replayer.unconsumed()]
                text = missing.render(self._record_command(self.config)) if missing is not None else ""
                self.events.write("done", unconsumed=unconsumed, text=text)
                if unconsumed:
                    _log.warning("turns_unconsumed", count=len(unconsumed), first=unconsumed[:10])
        finally:
            self.events.close()

    def _save(self) -> None:
        path = self.config.cassette
        assert path is not None  # configure refuses record without a cassette
        cassette = Cassette(tuple(self.turns), route=self.config.route)  # type: ignore[arg-type]
        try:
            save_cassette(cassette, path)
        except FlowproofError as e:
            # A recording that silently fails to land is worse than a crash: say it everywhere.
            text = f"flowproof could not write the cassette: {e}"
            self.events.write("error", text=text)
            self.events.write("done", unconsumed=[], text=text)
            print(text, file=sys.stderr, flush=True)
            _log.error("cassette_write_failed", path=str(path))
            return
        text = f"recorded {len(self.turns)} turn{'s' if len(self.turns) != 1 else ''} to {path}"
        self.events.write("done", unconsumed=[], text=text)
        _log.info("cassette_written", path=str(path), turns=len(self.turns))

    def tls_failed_client(self, data: tls.TlsData) -> None:
        host = data.conn.sni
        if not host and data.context.server.address:
            host = data.context.server.address[0]
        host = host or "an unknown host"
        text = f"the client does not trust the proxy's certificate for {host}"
        if data.conn.error:
            text += f" ({data.conn.error})"
        self.events.write("tls_failed", host=host, text=text)
        _log.warning("client_tls_failed", host=host)

    # ------------------------------------------------------------------ requests

    def request(self, flow: http.HTTPFlow) -> None:
        try:
            self._request(flow)
        except Exception as e:  # noqa: BLE001 — see _hook_failed
            self._hook_failed(flow, "request", e)
            # mitmproxy would forward the call after a failed hook: in replay to the real
            # API with the agent's key. A call flowproof could not handle never leaves.
            flow.response = http.Response.make(
                400,
                json.dumps({"error": {"message": "flowproof could not handle this request; see its report"}}),
                _JSON,
            )

    def _hook_failed(self, flow: http.HTTPFlow, hook: str, error: Exception) -> None:
        """A bug of ours must fail the run visibly, never let a call pass unrecorded or unmatched."""
        self._flows.pop(flow.id, None)
        text = f"flowproof failed in its {hook} hook for {redact_url(flow.request.pretty_url)}: {type(error).__name__}: {error}"
        self.events.write("error", id=flow.id, text=text)
        _log.error("hook_failed", hook=hook, flow_id=flow.id, error=type(error).__name__)

    def _request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None:
            return  # another addon already answered it
        config = self.config
        req = flow.request
        host = req.pretty_host
        path = req.path.split("?", 1)[0]
        model_host = is_model_host(host, config.extra_hosts)

        if _is_websocket_upgrade(req):
            if model_host or detect("POST", host, path, config.extra_hosts) is not None:
                # codex tries Responses-over-WebSocket first; 426 makes it fall back to HTTP at once.
                flow.response = http.Response.make(
                    426,
                    json.dumps({"error": {"message": "flowproof: WebSocket is not supported, use HTTP"}}),
                    {**_JSON, "connection": "close"},
                )
                _log.info("websocket_refused", host=host, path=path)
            return

        codec = detect(req.method, host, path, config.extra_hosts)
        if codec is None:
            if model_host and config.mode is Mode.REPLAY:
                # Telemetry and settings on model hosts: answered locally so replay needs no network.
                flow.response = http.Response.make(
                    404,
                    json.dumps({"error": {"message": "flowproof replay: not a model call, answered locally"}}),
                    _JSON,
                )
            else:
                # The user mapped this host (a gateway, a local model): its other traffic
                # (traces, settings) goes there too, never to the real host with their key.
                self._map_upstream(req)
            return

        raw = _content(req)
        forwarded = raw
        if config.tool_results:
            try:
                forwarded = codec.rewrite_tool_results(raw, config.tool_results)
            except FlowproofError as e:
                # The codec cannot read the body: forward it as sent; the hash then says what it is.
                _log.warning("tool_results_not_substituted", provider=codec.name, reason=str(e))
            if forwarded != raw:
                req.content = forwarded
        normalized = config.normalizer.apply(forwarded)
        sha = body_sha256(normalized)
        self.events.write("request_started", id=flow.id)
        log = _log.bind(flow_id=flow.id, provider=codec.name)

        if config.mode is Mode.REPLAY:
            self._replay(flow, codec, sha, normalized, log)
            return

        self._flows[flow.id] = _FlowState(
            codec=codec,
            method=req.method,
            url=redact_url(req.pretty_url),
            headers=filter_headers(req.headers.items(multi=True)),
            sha=sha,
            body=_parse_body(normalized),
        )
        # The recorder taps the stream as SSE text; a compressed stream could not be read.
        req.headers["accept-encoding"] = "identity"
        mapped = self._map_upstream(req)
        log.debug("model_call_forwarded", mapped=mapped)

    def _map_upstream(self, req: http.Request) -> bool:
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

    def _replay(
        self, flow: http.HTTPFlow, codec: Codec, sha: str, normalized: bytes, log: Any
    ) -> None:
        assert self.replayer is not None  # configure builds it for replay
        decision = self.replayer.decide(codec.name, sha, _parse_body(normalized))
        if isinstance(decision, Miss):
            divergence = decision.divergence
            text = divergence.render(self._record_command(self.config))
            where = f"the flowproof report ({self.config.report})" if self.config.report else "the mitmproxy log"
            message = f"flowproof replay diverged: {divergence.summary()}. The full report is in {where}."
            # 400, never 5xx: SDKs and Claude Code retry 5xx for minutes.
            flow.response = http.Response.make(400, codec.error_body(400, message), _JSON)
            self.events.write("divergence", id=flow.id, text=text, divergence=divergence.to_json())
            log.warning("request_unmatched", kind=divergence.kind, closest=divergence.closest_index)
            return
        turn = decision.turn
        recorded = turn.response
        headers = dict(recorded.headers)
        if "content-type" not in headers:
            headers["content-type"] = (
                "text/event-stream" if recorded.events is not None
                else "application/json" if recorded.body is not None
                else "text/plain"
            )
        content = self.config.normalizer.restore(recorded.content())
        flow.response = http.Response.make(recorded.status, content, headers)
        self.events.write("turn", id=flow.id, mode="replay", turn=_turn_json(turn))
        log.info("turn_replayed", turn=turn.index)

    # ------------------------------------------------------------------ responses

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state = self._flows.get(flow.id)
        if state is None or flow.response is None:
            return
        headers = flow.response.headers
        if "text/event-stream" not in headers.get("content-type", "").lower():
            return
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            return  # left buffered: mitmproxy decodes it and `response` parses the whole body
        state.events = []
        state.decoder = SSEDecoder()
        flow.response.stream = _tap(state.decoder, state.events)

    def response(self, flow: http.HTTPFlow) -> None:
        try:
            self._response(flow)
        except Exception as e:  # noqa: BLE001 — see _hook_failed
            self._hook_failed(flow, "response", e)

    def _response(self, flow: http.HTTPFlow) -> None:
        state = self._flows.pop(flow.id, None)
        if state is None or flow.response is None:
            return
        try:
            recorded = self._recorded_response(flow.response, state)
        except FlowproofError as e:
            self.events.write("error", id=flow.id, text=f"cannot record the response to {state.url}: {e}")
            return
        turn = RecordedTurn(
            index=self._completed,
            provider=state.codec.name,
            request=RecordedRequest(state.method, state.url, state.headers, state.sha, state.body),
            response=recorded,
        )
        self._completed += 1
        # Compare logs the live turn too: the runner checks the spec against the live trajectory.
        self.events.write("turn", id=flow.id, mode=self.config.mode.value, turn=_turn_json(turn))
        if self.config.mode is Mode.RECORD:
            self.turns.append(turn)
            _log.info("turn_recorded", flow_id=flow.id, provider=turn.provider, turn=turn.index)
        else:
            self._compare(flow.id, turn)

    def error(self, flow: http.HTTPFlow) -> None:
        state = self._flows.pop(flow.id, None)
        if state is None:
            return
        reason = flow.error.msg if flow.error is not None else "unknown error"
        text = f"the model call to {state.url} failed before it completed: {reason}"
        self.events.write("error", id=flow.id, text=text)
        _log.warning("model_call_failed", flow_id=flow.id, provider=state.codec.name)

    def _recorded_response(self, response: http.Response, state: _FlowState) -> RecordedResponse:
        normalizer = self.config.normalizer
        headers = filter_headers(response.headers.items(multi=True))
        events: tuple[SSEEvent, ...] | None = None
        body: Any = None
        text: str | None = None
        if state.decoder is not None and state.events is not None:
            state.events.extend(state.decoder.close())  # idempotent; mitmproxy already sent b""
            events = tuple(state.events)
            if not normalizer.is_identity:
                data = encode_events(events)
                portable = normalizer.portable(data)
                if portable != data:
                    events = tuple(parse_sse(portable))
        else:
            data = normalizer.portable(_content(response))
            ctype = response.headers.get("content-type", "").lower()
            if "text/event-stream" in ctype:
                events = tuple(parse_sse(data))
            elif data:
                parsed = _parse_body(data) if "json" in ctype else None
                if parsed is not None and not isinstance(parsed, str):
                    body = parsed
                else:
                    text = data.decode("utf-8", "surrogateescape")
        return RecordedResponse(response.status_code, headers, body=body, events=events, text=text)

    def _compare(self, flow_id: str, live: RecordedTurn) -> None:
        assert self.pairer is not None  # configure builds it for compare
        try:
            view = turn_views(live)
        except FlowproofError as e:
            self.events.write("error", id=flow_id, text=f"cannot compare live call {live.index}: {e}")
            return
        try:
            result = self.pairer.pair(Call(view, live.request.body))
        except FlowproofError as e:  # the recorded turn at this place cannot be read
            self.events.write("error", id=flow_id, text=str(e))
            return
        self._deliver(flow_id, result)

    def _deliver(self, flow_id: str | None, result: CompareResult) -> None:
        """The seed's report step: the span, then the handler if there is one, else the verdict.

        With a handler every result (equal or not, paired, extra or missing) goes to
        it and it decides: an exception it raises rejects the result. Without one an
        unequal result is drift. The cassette is never touched.
        """
        record_on_span(result)
        handler = self.config.compare_handler
        if handler is not None:
            try:
                handler(result)
            except Exception as e:  # noqa: BLE001 — user code: its verdict, never a proxy crash
                text = (
                    f"the compare handler {self.config.compare_handler_name} rejected"
                    f" {result.place()}: {type(e).__name__}: {e}"
                )
                self.events.write("drift", id=flow_id, text=text, result=result.to_json(), handled=True)
            else:
                self.events.write("compared", id=flow_id, result=result.to_json(), handled=True)
        elif result.equal:
            self.events.write("compared", id=flow_id, result=result.to_json())
        else:
            self.events.write("drift", id=flow_id, text=result.render(), result=result.to_json())
        _log.info("compared", flow_id=flow_id, kind=result.kind, turn=result.turn, equal=result.equal)


def _pairer(cassette: Cassette, config: AddonConfig) -> Pairer:
    """The compare pairer over every recorded turn (parsed once, here).

    A turn whose response no codec reads keeps its place (a live call there gets an
    error, not a verdict); a turn whose request cannot be read has no place at all.
    """
    calls = []
    for turn in cassette.turns:
        try:
            calls.append(Call(turn_views(turn), turn.request.body))
            continue
        except FlowproofError as e:
            problem = str(e)
        request = codec_view(turn.provider, turn.request.body)
        if request is None:
            raise exceptions.OptionsError(
                f"Cannot compare against flowproof_cassette {config.cassette}: the request of"
                f" turn {turn.index} cannot be read ({problem}) — re-record the cassette"
            )
        calls.append(Call(Turn(turn.index, request, None), turn.request.body, problem=problem))
    return Pairer(calls)


def _tap(decoder: SSEDecoder, events: list[SSEEvent]) -> Callable[[bytes], bytes]:
    """A ``flow.response.stream`` callable: each chunk goes on unchanged, a copy feeds the decoder.

    mitmproxy calls it once more with ``b""`` when the stream ends.
    """

    def tap(chunk: bytes) -> bytes:
        if chunk:
            events.extend(decoder.feed(chunk))
        else:
            events.extend(decoder.close())
        return chunk

    return tap

