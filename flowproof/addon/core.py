"""The root mitmproxy addon: the ``flowproof_*`` options, and the concern the mode selects.

A thin adapter over the pure core: `flowproof.request_key` builds the replay
key, `flowproof.recorder` assembles recorded turns, `flowproof.replay`
matches, `flowproof.compare` judges drift. The hooks live in one small addon
per concern — `Record`, `Replay`, `Compare` — composed the way mitmproxy
composes its own: the root's ``addons`` lists its children, and mitmproxy
invokes each hook on the root, then on every child, in order. The list is
read at every hook, so configuring a new mode swaps the concern; the event
log is the last child, so its ``done`` closes the file after the concern's
last event.

Per request the work is the hash path (O(body)) plus one dict lookup; the
cassette is parsed once, in ``configure``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mitmproxy import ctx, exceptions, tls
from mitmproxy.addonmanager import Loader
from mitmproxy.proxy import layer

from flowproof.addon.compare import Compare
from flowproof.addon.eventlog import EventLog
from flowproof.addon.inline import rest
from flowproof.addon.lean import drop_legacy_log, drop_unused, skip_idle, skip_message_checks
from flowproof.addon.mcp import McpBoundary
from flowproof.addon.options import AddonConfig, options_by_hand
from flowproof.addon.record import Record
from flowproof.addon.replay import Replay
from flowproof.addon.shared import Shared, config_record_command, log
from flowproof.addon.tunnel import TlsContexts, take
from flowproof.addon.warm import BuildState, WarmSessions
from flowproof.addon.witness import Witness
from flowproof.cassette import load_cassette
from flowproof.errors import FlowproofError, SpecError
from flowproof.log_events import Listener, ReadyEvent, TlsFailedEvent
from flowproof.options import OPTIONS, Mode, ProxyOptions
from flowproof.replay import Replayer, route_mismatch
from flowproof.wire import is_model_host

__all__ = ["CLIENT_TLS_MAX", "CONCERNS", "FlowState", "Flowproof", "build_flow_state", "cap_client_tls"]

_OPTIONS = frozenset(o.name for o in OPTIONS)

#: The addon that handles model calls in each mode.
CONCERNS: dict[Mode, type[Record | Replay | Compare]] = {
    Mode.RECORD: Record,
    Mode.REPLAY: Replay,
    Mode.COMPARE: Compare,
}


#: The highest TLS version mitmproxy offers an agent unless the user chose one (below).
CLIENT_TLS_MAX = "TLS1_2"


def cap_client_tls(options: Any) -> None:
    """Offer agents TLS 1.2 at most where mitmproxy does their TLS, unless the user set
    ``tls_version_client_max`` (``TLS1_3`` restores 1.3).

    Over TLS 1.3 the server's session tickets follow the handshake. From a proxy on the same
    machine they arrive while the agent writes its first request, and a client that reads and
    writes one `ssl` socket from two threads (the `websockets` sync client, which openai's
    ``responses.connect()`` uses) then loses that request now and then: 41 of 8,000
    connections against 0 of 8,000 without tickets (docs/addon.md). pyOpenSSL cannot turn the
    tickets off; over TLS 1.2 they come inside the handshake, before the client can write.
    `flowproof.addon.tunnel` does its own TLS, 1.3 without tickets."""
    if "tls_version_client_max" not in options:  # mitmproxy's tlsconfig addon is absent
        return
    if options.tls_version_client_max == options.default("tls_version_client_max"):
        options.update(tls_version_client_max=CLIENT_TLS_MAX)


@dataclass(slots=True)
class FlowState:
    """Everything one flow's model calls need: the shared state, the MCP boundary and the
    mode's concern. A single-flow proxy has one (from its options); a warm proxy one per
    session (`flowproof.addon.warm`)."""

    shared: Shared
    mcp: McpBoundary
    concern: Record | Replay | Compare
    witness: Witness

    @property
    def addons(self) -> list[object]:
        """In hook order: the witness (it only reads), the MCP boundary (it claims MCP traffic
        first), the concern, the log."""
        return [self.witness, self.mcp, self.concern, self.shared.events]


def build_flow_state(options: ProxyOptions, previous: Shared | None = None) -> FlowState:
    """The `FlowState` for one flow's resolved ``options``; raises mitmproxy's ``OptionsError``
    saying what is wrong. ``previous``'s open event log is kept when the log path did not
    change (a reconfigure never truncates it)."""
    try:
        config = AddonConfig.build(options)
    except ValueError as e:
        raise exceptions.OptionsError(f"Cannot parse {e}") from None
    replayer = Flowproof._replayer(config) if config.mode is not Mode.RECORD else None
    if config.mode is Mode.RECORD:
        _check_record_target(config)

    shared = Shared(config, replayer)
    if previous is not None:
        if config.report == previous.config.report:
            shared.events = previous.events  # keep the open log
        else:
            previous.events.close()
    return FlowState(shared, McpBoundary(shared, options.mcp), CONCERNS[config.mode](shared),
                     Witness(shared, options.mcp))


class Flowproof:
    """The flowproof addon (``mitmdump -s addon/flowproof_addon.py``); options in docs/internals.md."""

    def __init__(self, build: BuildState | None = None) -> None:
        #: What a session's options become on a warm proxy (`build_flow_state`; a test's
        #: stand-in addon builds scripted sessions instead).
        self._build: BuildState = build or build_flow_state
        self.shared = Shared()
        self.concern: Record | Replay | Compare = Replay(self.shared)
        self.mcp = McpBoundary(self.shared)
        self.witness = Witness(self.shared)
        self._last_error: exceptions.OptionsError | None = None
        #: Set when ``flowproof_control`` names a socket: this proxy serves many flows.
        self.warm: WarmSessions | None = None
        #: The replayed tunnels' TLS contexts (`flowproof.addon.tunnel`), one per leaf.
        self._tunnel_tls = TlsContexts()
        #: Puts back what `running` took out of mitmproxy for a runner's proxy (`skip_message_checks`).
        self._restore_checks: Callable[[], None] = lambda: None

    @property
    def addons(self) -> list[object]:
        """The children mitmproxy invokes after the root: the witness (egress and secrets; it
        only reads), the MCP boundary (it claims MCP traffic first), the mode's concern, then
        the event log. A warm proxy has one child,
        the router that hands each flow to its session's chain."""
        if self.warm is not None:
            return [self.warm]
        return [self.witness, self.mcp, self.concern, self.shared.events]

    @property
    def events(self) -> EventLog:
        """The event log (closed by mitmproxy's ``done``)."""
        return self.shared.events

    # ------------------------------------------------------------------ options

    def load(self, loader: Loader) -> None:
        for option in OPTIONS:  # the one table (flowproof.options, docs/internals.md)
            default = list(option.default) if isinstance(option.default, tuple) else option.default
            loader.add_option(option.name, option.typespec, default, option.help, choices=option.choices)

    def configure(self, updated: set[str]) -> None:
        if "tls_version_client_max" in updated:
            cap_client_tls(ctx.options)
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
        control = str(ctx.options.flowproof_control or "")
        if control:
            if self.warm is None:
                self.warm = WarmSessions(Path(control), self._build)
            self.shared.events.path = Path(ctx.options.flowproof_report) if ctx.options.flowproof_report else None
            return
        if self.warm is not None:
            raise exceptions.OptionsError("flowproof_control cannot be unset on a running proxy")
        values = {o.name: getattr(ctx.options, o.name) for o in OPTIONS}
        try:
            options = options_by_hand(values)
        except SpecError as e:
            raise exceptions.OptionsError(f"Cannot load flowproof_spec {values['flowproof_spec']}: {e}") from None
        except (ValueError, FlowproofError) as e:
            raise exceptions.OptionsError(f"Cannot parse {e}") from None
        state = build_flow_state(options, previous=self.shared)
        self.shared, self.mcp, self.concern = state.shared, state.mcp, state.concern
        self.witness = state.witness

        # (The option belongs to mitmproxy's proxyserver addon, absent in bare test contexts.)
        if (
            options.dials_lazily
            and "connection_strategy" in ctx.options
            and ctx.options.connection_strategy != "lazy"
        ):
            ctx.options.update(connection_strategy="lazy")

    @staticmethod
    def _replayer(config: AddonConfig) -> Replayer:
        command = config_record_command(config)
        if config.cassette is None:
            raise exceptions.OptionsError(
                f"Cannot {config.mode.value} without a cassette: add --set flowproof_cassette=PATH, "
                f"or record one first with: {command}"
            )
        try:
            cassette = load_cassette(config.cassette, record_command=command)
        except FlowproofError as e:
            raise exceptions.OptionsError(f"Cannot load flowproof_cassette {config.cassette}: {e}") from None
        if config.mode is Mode.REPLAY:
            mismatch = route_mismatch(cassette.route, config.route)
            if mismatch is not None:
                raise exceptions.OptionsError(f"Cannot replay flowproof_cassette {config.cassette}: {mismatch}")
        return Replayer(cassette)

    # ------------------------------------------------------------------ lifecycle

    def running(self) -> None:
        if self.warm is not None:
            # The listeners mitmdump started with belong to no flow: sessions bring their own.
            ctx.options.update(mode=[])
            # Only the runner starts a proxy with a control socket: what it never uses goes.
            log.debug("addons_dropped", names=",".join(drop_unused(ctx.master.addons)))
            skip_idle(ctx.master.addons)
            drop_legacy_log(ctx.master)
            self._restore_checks = skip_message_checks()
            self.warm.start()
            self.shared.events.write(ReadyEvent((), "warm"))
            log.info("proxy_ready", mode="warm")
            return
        listen: list[Listener] = []
        proxyserver = ctx.master.addons.get("proxyserver")
        if proxyserver is not None:
            for server in proxyserver.servers:
                for addr in server.listen_addrs:
                    entry = Listener(server.mode.full_spec, addr[0], addr[1])
                    if entry not in listen:  # a mode may listen on TCP and UDP at one address
                        listen.append(entry)
        mode = self.shared.config.mode.value
        self.shared.events.write(ReadyEvent(tuple(listen), mode))
        log.info("proxy_ready", mode=mode, listeners=len(listen))

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        """A runner's proxy serves a replaying session's model-host tunnels itself
        (`flowproof.addon.tunnel`); anything else is mitmproxy's own next layer's to choose."""
        if self.warm is not None:
            take(nextlayer, self._replay_config, self._tunnel_tls)

    async def flowproof_rest(self, task: asyncio.Task[None]) -> None:
        """The rest of a hook one of those layers ran inline (`flowproof.addon.inline`)."""
        await rest(task)

    def _replay_config(self, client: object) -> AddonConfig | None:
        session = self.warm.session_of(client) if self.warm is not None else None
        return None if session is None else session.state.shared.config

    def tls_failed_client(self, data: tls.TlsData) -> None:
        host = data.conn.sni
        if not host and data.context.server.address:
            host = data.context.server.address[0]
        host = host or "an unknown host"
        text = f"the client does not trust the proxy's certificate for {host}"
        if data.conn.error:
            text += f" ({data.conn.error})"
        shared = self.shared
        if self.warm is not None:
            session = self.warm.session_of(data.conn)
            if session is None:
                return
            shared = session.state.shared
        # Only a model host's failure stopped model calls; an agent's telemetry host is not the cause.
        model = is_model_host(host, shared.config.options.model_hosts)
        shared.events.write(TlsFailedEvent(host, text, model))
        log.warning("client_tls_failed", host=host, model=model)

    def done(self) -> None:
        if self.warm is not None:
            # Sessions still open when the proxy stops were given up by their runner: abort.
            self.warm.shutdown()
            self.shared.events.close()
            self._restore_checks()


def _check_record_target(config: AddonConfig) -> None:
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
