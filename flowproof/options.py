"""One flow's proxy options: the modes and routes, one typed object, one option table, one parser.

A flow's proxy is described once, by a frozen `ProxyOptions`. It crosses the
process boundary in one of two forms, both derived from `OPTIONS` (the one
table of the addon's ``flowproof_*`` mitmproxy options: name, type, default,
help):

- the session request (`to_json` / `from_json`): what the runner sends the
  addon's control socket (``flowproof_control``, docs/runner.md). It carries
  *resolved* data — the spec's tool results, its volatile rules with their
  presets expanded, its MCP answers, the values of its ``assert_no_secret_leak``
  steps, the agent's cwd and HOME, the compare handler's name — so the addon
  never loads the YAML spec;
- mitmproxy option values (`to_values` / `from_values`, and `set_args` for
  ``mitmdump --set``): what a person gives ``mitmdump -s addon/flowproof_addon.py``
  by hand. There ``flowproof_spec`` names the spec and the addon resolves it with
  `with_spec`, the very function the runner resolves it with.

`parse_upstream` is the one parser of a ``HOST=URL`` mapping: the runner's flag
checks and the addon call it, so a value is refused (or accepted) the same way
everywhere. `host_settings` reads ``FLOWPROOF_UPSTREAM`` and
``FLOWPROOF_EXTRA_HOSTS`` for every entry point (flowproof-run, pytest items,
the ``flowproof_proxy`` fixture).

Pure: no mitmproxy, no click, no I/O. Errors are ``ValueError``s whose text
never repeats a URL's userinfo or query (callers show values through
`flowproof.redact.masked_url`), or `FlowproofError` where a user's setting is
refused at an entry point.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from flowproof.errors import FlowproofError
from flowproof.mcp import McpRoute, parse_route
from flowproof.normalize import PRESETS
from flowproof.redact import masked_url
from flowproof.spec.base import Location, VolatileRule
from flowproof.wire import normalize_host
from flowproof.wire.providers import reverse_hosts
from flowproof.witness import Secret, secret_placeholder

if TYPE_CHECKING:  # the parsed spec's other types: the proxy never builds them
    from flowproof.spec.types import FlowSpec

__all__ = [
    "OPTIONS",
    "REVERSE_HOSTS",
    "HostSettings",
    "Mode",
    "Option",
    "ProxyOptions",
    "Route",
    "Transport",
    "Upstream",
    "base_url_ports",
    "choose",
    "expand_volatile",
    "from_json",
    "from_values",
    "host_settings",
    "listeners_for",
    "parse_extra_host",
    "parse_upstream",
    "parse_upstreams",
    "python_path",
    "set_args",
    "to_json",
    "to_values",
    "with_spec",
]


class Mode(StrEnum):
    """What the proxy does with model calls (replay, the default, first)."""

    REPLAY = "replay"
    RECORD = "record"
    COMPARE = "compare"


class Route(StrEnum):
    """How the agent reaches the proxy: HTTPS_PROXY, or base-URL variables to reverse listeners."""

    PROXY = "proxy"
    BASE_URL = "base_url"


class Transport(StrEnum):
    """What the proxy lets the agent speak to a model API: ``auto`` records what it speaks (a
    WebSocket included); ``http`` answers a WebSocket upgrade with 426, so the agent falls back
    to HTTP (docs/design.md#websocket-upgrades)."""

    AUTO = "auto"
    HTTP = "http"


E = TypeVar("E", bound=StrEnum)


def choose(kind: type[E], value: object, what: str) -> E:
    """``value`` as a member of ``kind``; a ValueError naming ``what`` and every valid value.

    >>> choose(Mode, "record", "mode")
    <Mode.RECORD: 'record'>
    >>> choose(Mode, "playback", "mode")
    Traceback (most recent call last):
    ...
    ValueError: unknown mode `playback` — use one of: replay, record, compare
    >>> choose(Route, "tunnel", "route")
    Traceback (most recent call last):
    ...
    ValueError: unknown route `tunnel` — use one of: proxy, base_url
    """
    try:
        return kind(str(value))
    except ValueError:
        valid = ", ".join(member.value for member in kind)
        raise ValueError(f"unknown {what} `{value}` — use one of: {valid}") from None


#: Reverse listeners opened on the base-URL route: one per upstream of the provider table.
REVERSE_HOSTS: tuple[str, ...] = reverse_hosts()

# A DNS name or an IPv4 address, with an optional port: what mitmproxy can route on.
_HOST = re.compile(r"(?=.{1,253}(:\d+)?$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?(:\d{1,5})?")


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a mapped model host's requests really go (``--upstream HOST=URL``)."""

    scheme: str
    host: str
    port: int
    path_prefix: str = ""

    @property
    def url(self) -> str:
        """The mapping target as a URL (for messages and the option's text form)."""
        return f"{self.scheme}://{self.host}:{self.port}{self.path_prefix}"


def parse_upstream(value: str) -> tuple[str, Upstream]:
    """Parse ``HOST=URL`` into ``(normalized host, Upstream)``; ValueError with the reason.

    The URL is ``http(s)://host[:port][/path]``: a user name or password, a query
    string, a fragment or port 0 are refused (the reason never repeats the URL).

    >>> parse_upstream("API.OpenAI.com=http://127.0.0.1:8000/v1/")
    ('api.openai.com', Upstream(scheme='http', host='127.0.0.1', port=8000, path_prefix='/v1'))
    >>> parse_upstream("api.openai.com=http://user:pw@127.0.0.1:8000")
    Traceback (most recent call last):
    ...
    ValueError: the URL carries a user name or password — remove it; the agent's own key is forwarded upstream
    """
    host, sep, url = value.partition("=")
    host, url = host.strip(), url.strip()
    if not sep or not host or not url:
        raise ValueError("write HOST=URL, e.g. api.openai.com=http://127.0.0.1:8000")
    if not _HOST.fullmatch(host):
        raise ValueError(f"`{host}` is not a host name")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"the URL is not valid ({e}) — write http(s)://host[:port][/path]") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("the URL must start with http:// or https://")
    if not parts.hostname:
        raise ValueError("the URL names no host — e.g. http://127.0.0.1:8000")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the URL carries a user name or password — remove it; the agent's own key is "
                         "forwarded upstream")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError("the URL has a query string or fragment, which flowproof does not forward — "
                         "remove it (and keep keys out of URLs)")
    if port == 0:
        raise ValueError("port 0 cannot be dialled")
    default = 443 if parts.scheme == "https" else 80
    return normalize_host(host), Upstream(parts.scheme, parts.hostname, port or default, parts.path.rstrip("/"))


def parse_upstreams(items: Iterable[str], what: str = "flowproof_upstream") -> dict[str, Upstream]:
    """Every ``HOST=URL`` of ``items`` (each may hold several, comma-separated, as
    ``FLOWPROOF_UPSTREAM`` does), in order; a later map of one host wins. A ValueError
    names ``what`` and the value, its URL masked."""
    out: dict[str, Upstream] = {}
    for item in items:
        for piece in str(item).split(","):
            if not piece.strip():
                continue
            try:
                host, target = parse_upstream(piece)
            except ValueError as e:
                raise ValueError(f"bad {what} {_shown_map(piece)}: {e}") from None
            out[host] = target
    return out


def _shown_map(value: str) -> str:
    host, sep, url = value.strip().partition("=")
    return f"{host}={masked_url(url)}" if sep else f"`{masked_url(value.strip())}`"


def parse_extra_host(value: str) -> str:
    """An OpenAI-compatible gateway host, lower-cased: a bare host name, optionally ``:port``."""
    host = value.strip()
    if not _HOST.fullmatch(host):
        shown = masked_url(host) if "://" in host or "@" in host or "?" in host else host
        raise ValueError(f"bad extra host `{shown}` — give a bare host name, e.g. llm-gateway.internal")
    return host.lower()


# ------------------------------------------------------------------ the options object


@dataclass(frozen=True, slots=True)
class ProxyOptions:
    """One flow's proxy: what the addon does, where it writes, and what it listens on.

    The fields named like an `OPTIONS` row (``mode`` is ``flowproof_mode``, …) are the
    addon's mitmproxy options; the rest is resolved data only the session request
    carries (the addon derives it from ``spec`` when given the options by hand).
    ``cwd``/``home`` None leaves the portable-path default (`with_spec`).
    """

    mode: Mode = Mode.REPLAY
    cassette: Path | None = None
    #: The flow spec: by hand the addon loads it (`with_spec`); in a session request it is only
    #: named in messages (the record command), its data already resolved below.
    spec: Path | None = None
    upstream: Mapping[str, Upstream] = field(default_factory=dict)
    extra_hosts: tuple[str, ...] = ()
    route: Route = Route.PROXY
    #: The event log the runner reads (docs/internals.md, "The event log").
    report: Path | None = None
    compare_handler: str = ""
    transport: Transport = Transport.AUTO
    cwd: str | None = None
    home: str | None = None
    mcp: tuple[McpRoute, ...] = ()
    # Resolved from the spec.
    tool_results: Mapping[str, Any] = field(default_factory=dict)
    volatile: tuple[VolatileRule, ...] = ()
    #: ``mcp:`` server name -> tool name -> the result flowproof answers with.
    mcp_answers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The spec's declared secrets: scanned for in every request, masked wherever flowproof writes.
    secrets: tuple[Secret, ...] = ()
    #: The ``mcp:`` servers the agent launches over stdio (``command:``): their stand-ins'
    #: relay requests are answered (docs/mcp.md, "MCP over stdio").
    mcp_stdio: tuple[str, ...] = ()
    #: Where the runner's Python finds modules beyond the proxy's own (its PYTHONPATH, made
    #: absolute): a warm proxy, started by an earlier run, imports this flow's compare handler
    #: from there too.
    handler_path: tuple[str, ...] = ()
    #: The flow's listeners as mitmproxy mode specs (``regular``, ``reverse:https://api.openai.com``,
    #: ``regular@8080``); one without ``@PORT`` gets a free port.
    listeners: tuple[str, ...] = ("regular",)

    @property
    def dials_lazily(self) -> bool:
        """Replay must never dial the real host, and a mapped host may not even resolve: the
        upstream is connected only when a request needs it (mitmproxy's ``connection_strategy``)."""
        return self.mode is Mode.REPLAY or bool(self.upstream)

    @property
    def refuses_websocket(self) -> bool:
        """True when a WebSocket upgrade to a model API is answered 426 (``transport: http``)."""
        return self.transport is Transport.HTTP

    @property
    def model_hosts(self) -> tuple[str, ...]:
        """The hosts beyond the provider table that carry model calls: mapped and gateway hosts."""
        return (*self.upstream, *self.extra_hosts)


def expand_volatile(spec: FlowSpec) -> tuple[VolatileRule, ...]:
    """The spec's own volatile rules, then those of its presets, each (name, path) once."""
    rules: list[VolatileRule] = []
    seen: set[tuple[str, str]] = set()
    for preset in spec.presets:
        if preset not in PRESETS:
            raise ValueError(f"unknown volatile preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
    for rule in (*spec.volatile, *(r for p in spec.presets for r in PRESETS[p])):
        key = (rule.name, rule.path)
        if key not in seen:
            seen.add(key)
            rules.append(rule)
    return tuple(rules)


def spec_secrets(spec: FlowSpec) -> tuple[Secret, ...]:
    """The spec's ``assert_no_secret_leak`` values (resolved), each once, with its placeholder."""
    secrets: dict[str, Secret] = {}
    for number, step in enumerate(spec.secrets, start=1):
        secrets.setdefault(step.value, Secret(step.label, step.value, secret_placeholder(step.label, number)))
    return tuple(secrets.values())


def with_spec(options: ProxyOptions, spec: FlowSpec, *, cwd: str, home: str | None) -> ProxyOptions:
    """``options`` with a resolved spec's data: tool results, volatile rules (presets
    expanded), MCP answers and stdio servers, its ``on_compare`` unless a handler is set, its
    ``transport`` unless one is set, and for portable
    paths unless they are set the agent's working directory (``agent.cwd``, else ``cwd``:
    where the agent is started) and ``home``. The runner and the addon (given
    ``flowproof_spec`` by hand) both resolve a spec here."""
    agent_cwd = str(spec.agent.cwd) if spec.agent.cwd is not None else cwd
    return replace(
        options,
        spec=spec.path,
        tool_results=spec.tool_results,
        volatile=expand_volatile(spec),
        mcp_answers={
            server.name: {t.name: t.result for t in server.tools if t.has_result} for server in spec.mcp
        },
        secrets=spec_secrets(spec),
        mcp_stdio=tuple(server.name for server in spec.mcp if server.command is not None),
        compare_handler=options.compare_handler or spec.on_compare or "",
        # ``--transport http`` (or the option) wins; else the spec's ``transport:``.
        transport=options.transport if options.transport is not Transport.AUTO else
        choose(Transport, spec.transport or Transport.AUTO.value, "transport"),
        cwd=options.cwd or agent_cwd,
        home=options.home or home,
    )


def python_path(environ: Mapping[str, str], cwd: str) -> tuple[str, ...]:
    """The folders of ``environ``'s PYTHONPATH, made absolute against ``cwd`` (a warm proxy
    runs elsewhere), for `ProxyOptions.handler_path`."""
    entries = environ.get("PYTHONPATH", "").split(os.pathsep)
    return tuple(os.path.normpath(os.path.join(cwd, entry)) for entry in entries if entry)


def base_url_ports(proxy_port: int) -> dict[str, int]:
    """The reverse listeners' ports next to a fixed explicit-proxy port (``flowproof env
    --base-url --proxy-port N`` and ``flowproof-run --proxy-port N`` agree on them)."""
    return {host: proxy_port + 1 + i for i, host in enumerate(REVERSE_HOSTS)}


def listeners_for(route: Route, proxy_port: int = 0, more: Sequence[str] = ()) -> tuple[str, ...]:
    """A flow's listeners: the explicit proxy (on ``proxy_port``, else a free port), on the
    base-URL route one reverse listener per model host (`base_url_ports` with a fixed port),
    then ``more`` (the reverse listeners of redirected ``mcp:`` entries)."""
    at = f"@{proxy_port}" if proxy_port else ""
    out = [f"regular{at}"]
    if route is Route.BASE_URL:
        fixed = base_url_ports(proxy_port) if proxy_port else {}
        out += [f"reverse:https://{host}" + (f"@{fixed[host]}" if fixed else "") for host in REVERSE_HOSTS]
    return (*out, *more)


# ------------------------------------------------------------------ the option table


@dataclass(frozen=True, slots=True)
class Option:
    """One ``flowproof_*`` mitmproxy option: the addon's ``load`` registers every row.

    ``dump`` turns the `ProxyOptions` field of the same name (``flowproof_mode`` is
    ``mode``) into the option's value, ``load`` back; a row without them belongs to the
    proxy, not to a flow (``flowproof_control``).
    """

    name: str
    #: ``str`` or ``Sequence[str]``, as mitmproxy's ``loader.add_option`` takes it.
    typespec: Any
    default: str | tuple[str, ...]
    help: str
    choices: tuple[str, ...] | None = None
    dump: Callable[[Any], str | list[str]] | None = None
    load: Callable[[Any], Any] | None = None

    @property
    def key(self) -> str:
        """The `ProxyOptions` field (and session-request key) of this option."""
        return self.name.removeprefix("flowproof_")

    @property
    def type_text(self) -> str:
        """The type as docs/internals.md's option table writes it."""
        if self.choices:
            return "choice " + "/".join(f"`{c}`" for c in self.choices)
        return "Sequence[str]" if self.typespec is not str else "str"

    @property
    def default_text(self) -> str:
        """The default as docs/internals.md's option table writes it."""
        if isinstance(self.default, tuple):
            return "`[]`" if not self.default else "`[" + ", ".join(self.default) + "]`"
        return f"`{self.default}`" if self.default else '`""`'


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _path(value: object) -> Path | None:
    return Path(str(value)) if value else None


def _optional(value: object) -> str | None:
    return str(value) if value else None


def _strings(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Iterable):
        raise ValueError(f"expected a list of text, not {type(value).__name__}")
    return tuple(str(v) for v in value)


def _load_mode(value: object) -> Mode:
    return choose(Mode, value or Mode.REPLAY.value, "mode")


def _load_route(value: object) -> Route:
    return choose(Route, value or Route.PROXY.value, "route")


def _load_transport(value: object) -> Transport:
    return choose(Transport, value or Transport.AUTO.value, "transport")


def _dump_upstream(value: Mapping[str, Upstream]) -> list[str]:
    return [f"{host}={target.url}" for host, target in value.items()]


def _load_upstream(value: object) -> dict[str, Upstream]:
    return parse_upstreams(_strings(value))


def _load_extra_hosts(value: object) -> tuple[str, ...]:
    return tuple(dict.fromkeys(parse_extra_host(h) for item in _strings(value) for h in item.split(",")
                               if h.strip()))


def _load_mcp(value: object) -> tuple[McpRoute, ...]:
    return tuple(parse_route(item) for item in _strings(value))


OPTIONS: tuple[Option, ...] = (
    Option(
        "flowproof_mode", str, Mode.REPLAY.value,
        "What flowproof does with model calls: record them into the cassette, replay the cassette "
        "strictly, or compare live calls with it.",
        choices=tuple(m.value for m in Mode), dump=str, load=_load_mode,
    ),
    Option(
        "flowproof_cassette", str, "",
        "The cassette path, read in replay and compare and written atomically at shutdown in record.",
        dump=_text, load=_path,
    ),
    Option(
        "flowproof_spec", str, "",
        "The flow spec whose tools, volatile rules, mcp answers and on_compare handler apply to "
        "the model calls (flowproof-run sends them resolved instead).",
        dump=_text, load=_path,
    ),
    Option(
        "flowproof_upstream", Sequence[str], (),
        "Send a model host's calls elsewhere, as HOST=URL (api.openai.com=http://127.0.0.1:8000), "
        "one per value or comma-separated; a URL with a path prefixes it to every request path.",
        dump=_dump_upstream, load=_load_upstream,
    ),
    Option(
        "flowproof_extra_hosts", Sequence[str], (),
        "Extra OpenAI-compatible gateway hosts whose POSTs to a model API path are model calls.",
        dump=list, load=_load_extra_hosts,
    ),
    Option(
        "flowproof_route", str, Route.PROXY.value,
        "The route the agent takes to the proxy, stored in recorded cassettes; replay refuses a "
        "cassette recorded on the other route.",
        choices=tuple(r.value for r in Route), dump=str, load=_load_route,
    ),
    Option(
        "flowproof_report", str, "",
        "The JSON-lines event log the runner reads, one event a line, flushed per line.",
        dump=_text, load=_path,
    ),
    Option(
        "flowproof_compare_handler", str, "",
        "A module:function that receives each compare result and decides instead of drift "
        "failing the run (default: the spec's on_compare).",
        dump=_text, load=_text,
    ),
    Option(
        "flowproof_transport", str, Transport.AUTO.value,
        "What the agent may speak to a model API: auto records what it speaks, a WebSocket "
        "included; http answers a WebSocket upgrade with 426 (default: the spec's transport).",
        choices=tuple(t.value for t in Transport), dump=str, load=_load_transport,
    ),
    Option(
        "flowproof_cwd", str, "",
        "The agent's working directory, stored as «cwd» in cassettes (default with a spec: its "
        "agent.cwd, else the proxy's own).",
        dump=_text, load=_optional,
    ),
    Option(
        "flowproof_home", str, "",
        "The agent's HOME, stored as «home» in cassettes (default with a spec: $HOME; "
        "flowproof-run gives the agent's effective HOME).",
        dump=_text, load=_optional,
    ),
    Option(
        "flowproof_mcp", Sequence[str], (),
        "A spec's mcp: entry and its real server url, as NAME=URL: requests to it are MCP traffic "
        "and its declared tools are answered here.",
        dump=lambda routes: [f"{r.name}={r.url}" for r in routes], load=_load_mcp,
    ),
    Option(
        "flowproof_control", str, "",
        "A Unix socket path on which the runner opens one session per flow, each with its own "
        "options and listeners; the other flowproof options are then unused.",
    ),
)

_FLOW_OPTIONS = tuple(o for o in OPTIONS if o.dump is not None)


def to_values(options: ProxyOptions) -> dict[str, str | list[str]]:
    """The mitmproxy option values (``{"flowproof_mode": "replay", …}``) of ``options``."""
    return {o.name: o.dump(getattr(options, o.key)) for o in _FLOW_OPTIONS if o.dump is not None}


def from_values(values: Mapping[str, Any]) -> ProxyOptions:
    """`ProxyOptions` from mitmproxy option values (an absent option keeps its default).
    Nothing of a spec is resolved here (`with_spec`). ValueError names the option."""
    kwargs: dict[str, Any] = {}
    for option in _FLOW_OPTIONS:
        if option.name not in values or option.load is None:
            continue
        try:
            kwargs[option.key] = option.load(values[option.name])
        except ValueError as e:
            raise ValueError(f"{option.name}: {e}") from None
    return ProxyOptions(**kwargs)


def set_args(options: ProxyOptions) -> list[str]:
    """``--set NAME=VALUE`` arguments for ``mitmdump -s addon/flowproof_addon.py`` that give
    the addon ``options`` by hand (options at their default are left out; resolved data
    travels as ``flowproof_spec``, which the addon loads)."""
    defaults = to_values(ProxyOptions())
    args: list[str] = []
    for name, value in to_values(options).items():
        if value == defaults[name]:
            continue
        for item in [value] if isinstance(value, str) else value:
            args += ["--set", f"{name}={item}"]
    return args


# ------------------------------------------------------------------ the session request


def _rule_json(rule: VolatileRule) -> dict[str, Any]:
    loc = rule.location
    return {
        "name": rule.name, "path": rule.path, "segments": list(rule.segments),
        "pattern": rule.pattern.pattern if rule.pattern is not None else None,
        "location": [loc.path, loc.line, loc.col],
    }


def _rule_from_json(obj: Mapping[str, Any]) -> VolatileRule:
    path, line, col = obj.get("location") or ("<session>", 0, 0)
    pattern = obj.get("pattern")
    return VolatileRule(
        name=str(obj["name"]), path=str(obj["path"]), segments=tuple(str(s) for s in obj["segments"]),
        pattern=re.compile(pattern) if pattern is not None else None,
        location=Location(str(path), int(line), int(col)),
    )


def to_json(options: ProxyOptions) -> dict[str, Any]:
    """``options`` as the ``options`` of a session request: the option values by field name,
    plus the resolved data and the listeners."""
    values = to_values(options)
    out: dict[str, Any] = {o.key: values[o.name] for o in _FLOW_OPTIONS}
    out.update(
        tool_results=dict(options.tool_results),
        volatile=[_rule_json(r) for r in options.volatile],
        mcp_answers={name: dict(answers) for name, answers in options.mcp_answers.items()},
        secrets=[{"label": s.label, "value": s.value, "placeholder": s.placeholder} for s in options.secrets],
        mcp_stdio=list(options.mcp_stdio),
        handler_path=list(options.handler_path),
        listeners=list(options.listeners),
    )
    return out


def from_json(obj: object) -> ProxyOptions:
    """The `ProxyOptions` of a session request's ``options``; ValueError says what is wrong."""
    if not isinstance(obj, Mapping):
        raise ValueError("a session's options must be an object")
    options = from_values({o.name: obj[o.key] for o in _FLOW_OPTIONS if o.key in obj})
    try:
        listeners = _strings(obj.get("listeners", ["regular"]))
        volatile = tuple(_rule_from_json(r) for r in obj.get("volatile") or ())
        tool_results = dict(obj.get("tool_results") or {})
        mcp_answers = {str(k): dict(v) for k, v in (obj.get("mcp_answers") or {}).items()}
        secrets = tuple(Secret(str(d["label"]), str(d["value"]), str(d["placeholder"]))
                        for d in obj.get("secrets") or ())
        mcp_stdio = _strings(obj.get("mcp_stdio", []))
        handler_path = _strings(obj.get("handler_path", []))
    except (KeyError, TypeError, ValueError, re.error) as e:
        raise ValueError(f"a session's resolved options are malformed ({type(e).__name__}: {e})") from None
    if not listeners:
        raise ValueError("a session needs at least one listener")
    return replace(options, listeners=listeners, volatile=volatile, tool_results=tool_results,
                   mcp_answers=mcp_answers, secrets=secrets, mcp_stdio=mcp_stdio, handler_path=handler_path)


# ------------------------------------------------------------------ settings from the environment


@dataclass(frozen=True, slots=True)
class HostSettings:
    """The model-host settings every entry point takes from flags and the environment."""

    upstream: Mapping[str, Upstream] = field(default_factory=dict)
    extra_hosts: tuple[str, ...] = ()


def host_settings(
    environ: Mapping[str, str], *, upstream: Sequence[str] = (), extra_hosts: Sequence[str] = ()
) -> HostSettings:
    """``FLOWPROOF_UPSTREAM`` (``h1=u1,h2=u2``) then ``upstream`` (a later map of one host
    wins), and ``extra_hosts`` plus ``FLOWPROOF_EXTRA_HOSTS`` (``h1,h2``), checked the
    same way at every entry point: flowproof-run, pytest items, the ``flowproof_proxy``
    fixture. A bad value is a `FlowproofError` naming where it came from (URLs masked)."""
    try:
        mapped = parse_upstreams([environ.get("FLOWPROOF_UPSTREAM", "")], "FLOWPROOF_UPSTREAM")
        mapped.update(parse_upstreams(upstream, "--upstream"))
        hosts = [parse_extra_host(h) for h in (*extra_hosts, *environ.get("FLOWPROOF_EXTRA_HOSTS", "").split(","))
                 if h.strip()]
    except ValueError as e:
        raise FlowproofError(str(e)) from None
    return HostSettings(mapped, tuple(dict.fromkeys(hosts)))
