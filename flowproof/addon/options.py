"""The addon's ``flowproof_*`` options, parsed once into a frozen `AddonConfig`.

mitmproxy hands the addon raw option values; `build_config` turns them into
typed data in ``configure`` so no hook ever reads ``ctx.options`` again. This
module does not import mitmproxy: every parse error is a ``ValueError`` or a
`FlowproofError`, which the addon wraps into mitmproxy's ``OptionsError``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from flowproof.normalize import PRESETS, Normalizer
from flowproof.spec import FlowSpec, VolatileRule, load_spec, resolve_variables
from flowproof.wire import normalize_host

if TYPE_CHECKING:  # the compare engine loads only in compare mode (docs/hotpath.md)
    from flowproof.compare import CompareResult

__all__ = [
    "MODES",
    "ROUTES",
    "TRANSPORTS",
    "AddonConfig",
    "CompareHandler",
    "Mode",
    "Upstream",
    "build_config",
    "load_handler",
    "parse_upstream",
]

CompareHandler = Callable[["CompareResult"], object]


class Mode(StrEnum):
    """What the addon does with model calls."""

    RECORD = "record"
    REPLAY = "replay"
    COMPARE = "compare"


MODES: tuple[str, ...] = tuple(m.value for m in Mode)
ROUTES: tuple[str, ...] = ("proxy", "base_url")
#: ``auto`` records what the agent speaks (a WebSocket included); ``http`` refuses a WebSocket
#: upgrade to a model API with 426, so the agent falls back to HTTP (docs/design.md#websocket-upgrades).
TRANSPORTS: tuple[str, ...] = ("auto", "http")


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a mapped model host's requests really go (``flowproof_upstream``)."""

    scheme: str
    host: str
    port: int
    path_prefix: str = ""

    @property
    def url(self) -> str:
        """The mapping target as a URL (for messages)."""
        return f"{self.scheme}://{self.host}:{self.port}{self.path_prefix}"


def parse_upstream(value: str) -> tuple[str, Upstream]:
    """Parse ``host=URL`` (``api.openai.com=http://127.0.0.1:8000``) into ``(host, Upstream)``.

    Raises ``ValueError`` with the reason for anything else.

    >>> parse_upstream("api.openai.com=http://127.0.0.1:8000/v1")
    ('api.openai.com', Upstream(scheme='http', host='127.0.0.1', port=8000, path_prefix='/v1'))
    """
    host, sep, url = value.partition("=")
    host, url = host.strip(), url.strip()
    if not sep or not host or not url:
        raise ValueError("expected HOST=URL, e.g. api.openai.com=http://127.0.0.1:8000")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"the URL must start with http:// or https://, not {url!r}")
    if not parts.hostname:
        raise ValueError(f"the URL {url!r} has no host")
    if parts.query or parts.fragment:
        raise ValueError(f"the URL {url!r} may not have a query or fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise ValueError(f"the URL {url!r} has an invalid port ({e})") from None
    return normalize_host(host), Upstream(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


def load_handler(value: str) -> CompareHandler:
    """Import ``module:function`` and return the callable; ``ValueError`` says what is wrong."""
    module_name, sep, attr = value.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ValueError("expected module:function, e.g. mypkg.checks:on_compare")
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as e:
        raise ValueError(f"cannot import module {module_name!r} ({e})") from None
    target: Any = module
    for part in attr.strip().split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise ValueError(f"{value} is not callable")  # noqa: TRY004 — an option value, reported as one
    handler: CompareHandler = target
    return handler


@dataclass(frozen=True, slots=True)
class AddonConfig:
    """Every option the hooks need, typed and validated.

    ``upstream`` maps a normalized host to its target; ``tool_results`` are the
    spec's mocked tool results; ``normalizer`` applies the spec's volatile rules
    and portable paths.
    """

    mode: Mode = Mode.REPLAY
    cassette: Path | None = None
    spec: FlowSpec | None = None
    upstream: Mapping[str, Upstream] = field(default_factory=dict)
    extra_hosts: tuple[str, ...] = ()
    route: str = "proxy"
    report: Path | None = None
    compare_handler: CompareHandler | None = None
    tool_results: Mapping[str, Any] = field(default_factory=dict)
    normalizer: Normalizer = field(default_factory=Normalizer)
    transport: str = "auto"

    @property
    def refuses_websocket(self) -> bool:
        """True when a WebSocket upgrade to a model API is answered 426 (``transport: http``)."""
        return self.transport == "http"

    @property
    def compare_handler_name(self) -> str | None:
        """The handler's qualified name, for messages."""
        h = self.compare_handler
        if h is None:
            return None
        return f"{getattr(h, '__module__', '?')}:{getattr(h, '__qualname__', repr(h))}"


def _volatile_rules(spec: FlowSpec) -> tuple[VolatileRule, ...]:
    """The spec's own rules plus those of its presets, each (name, path) once."""
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


def _load_spec(path: str, environ: Mapping[str, str]) -> FlowSpec:
    spec: FlowSpec = load_spec(Path(path))
    # Tool results may hold ${VAR} (mitmdump inherits the runner's environment), and
    # even a spec without variables needs its $${ escapes turned into a literal ${.
    return resolve_variables(spec, environ)


def build_config(values: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> AddonConfig:
    """Build the config from raw option values (``flowproof_mode`` → ``values["mode"]`` …).

    Raises ``ValueError`` naming the option (``"flowproof_upstream: …"``) or the
    `FlowproofError` of a bad spec. ``environ`` supplies HOME for portable paths.
    """
    env = os.environ if environ is None else environ
    mode_value = values.get("mode", "replay")
    try:
        mode = Mode(mode_value)
    except ValueError:
        raise ValueError(f"flowproof_mode: {mode_value!r} is not one of {', '.join(MODES)}") from None
    route = values.get("route", "proxy")
    if route not in ROUTES:
        raise ValueError(f"flowproof_route: {route!r} is not one of {', '.join(ROUTES)}")
    # mitmproxy's default is "auto"; a spec's `transport: http` then still applies.
    transport = values.get("transport") or ""

    upstream: dict[str, Upstream] = {}
    for item in values.get("upstream", ()) or ():
        # FLOWPROOF_UPSTREAM is comma-separated; accept the same inside one option value.
        for piece in str(item).split(","):
            if not piece.strip():
                continue
            try:
                host, target = parse_upstream(piece)
            except ValueError as e:
                raise ValueError(f"flowproof_upstream {piece.strip()!r}: {e}") from None
            upstream[host] = target

    extra_hosts = tuple(normalize_host(h) for h in values.get("extra_hosts", ()) or () if h.strip())

    spec: FlowSpec | None = None
    spec_path = values.get("spec") or ""
    if spec_path:
        spec = _load_spec(spec_path, env)

    handler: CompareHandler | None = None
    handler_value = values.get("compare_handler") or (spec.on_compare if spec else None) or ""
    if handler_value:
        try:
            handler = load_handler(handler_value)
        except ValueError as e:
            raise ValueError(f"flowproof_compare_handler {handler_value!r}: {e}") from None

    cassette = Path(values["cassette"]) if values.get("cassette") else None
    report = Path(values["report"]) if values.get("report") else None

    rules: tuple[VolatileRule, ...] = ()
    tool_results: Mapping[str, Any] = {}
    cwd = values.get("cwd") or None
    home = values.get("home") or None
    if spec is not None:
        rules = _volatile_rules(spec)
        tool_results = spec.tool_results
        # Portable paths need the agent's cwd and HOME; with a spec the runner is in charge,
        # and the agent runs in spec.agent.cwd (else the runner's cwd, which is ours).
        if cwd is None:
            cwd = str(spec.agent.cwd) if spec.agent.cwd is not None else os.getcwd()
        if home is None:
            home = env.get("HOME") or None

    # The option wins over the spec; either way a value outside the choices is refused.
    if transport in ("", "auto") and spec is not None and spec.transport is not None:
        transport = spec.transport
    transport = transport or "auto"
    if transport not in TRANSPORTS:
        raise ValueError(f"flowproof_transport: {transport!r} is not one of {', '.join(TRANSPORTS)}")

    return AddonConfig(
        transport=transport,
        mode=mode,
        cassette=cassette,
        spec=spec,
        upstream=upstream,
        extra_hosts=extra_hosts,
        route=route,
        report=report,
        compare_handler=handler,
        tool_results=tool_results,
        normalizer=Normalizer(rules, cwd=cwd, home=home),
    )


def option_values(options: Any, names: Sequence[str]) -> dict[str, Any]:
    """``{"mode": options.flowproof_mode, …}`` for each short option name."""
    return {name: getattr(options, f"flowproof_{name}") for name in names}
