"""The addon's compiled options: a `flowproof.options.ProxyOptions` made ready for the hooks.

The option table, the parsers and the options object are pure
(`flowproof.options`); here the two things that are not: a compare handler is
imported, and a spec named by hand (``--set flowproof_spec=…``) is loaded and
resolved with `flowproof.options.with_spec` — the same function the runner
resolves it with, so a flow replays alike by hand and under ``flowproof-run``.
The runner's session requests carry that data resolved (the addon never reads
their spec). Every parse error is a ``ValueError`` or a `FlowproofError`, which
the addon wraps into mitmproxy's ``OptionsError``.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowproof.normalize import PRESETS, Normalizer
from flowproof.options import Mode, ProxyOptions, Route, Upstream, from_values, with_spec
from flowproof.witness import Secret

if TYPE_CHECKING:  # the compare engine loads only in compare mode (docs/hotpath.md)
    from flowproof.compare import CompareResult
    from flowproof.spec import FlowSpec

__all__ = ["AddonConfig", "CompareHandler", "load_handler", "options_by_hand"]

CompareHandler = Callable[["CompareResult"], object]


# sys.path is the process's: flows of a warm proxy build their options on threads of their own.
_IMPORT_LOCK = threading.Lock()


def load_handler(value: str, search: Sequence[str] = ()) -> CompareHandler:
    """Import ``module:function`` and return the callable, looking in the folders of
    ``search`` first (the run's PYTHONPATH: a warm proxy's own is that of the run that
    started it); ``ValueError`` says what is wrong."""
    module_name, sep, attr = value.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ValueError("expected module:function, e.g. mypkg.checks:on_compare")
    with _IMPORT_LOCK:
        added = [entry for entry in dict.fromkeys(search) if entry not in sys.path]
        sys.path[:0] = added
        try:
            module = importlib.import_module(module_name.strip())
        except ImportError as e:
            raise ValueError(f"cannot import module {module_name!r} ({e})") from None
        finally:
            for entry in added:
                sys.path.remove(entry)
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
    """One flow's options as the hooks read them: the `ProxyOptions`, the imported compare
    handler, and the normalizer of its volatile rules, portable paths and secret masks."""

    options: ProxyOptions = field(default_factory=ProxyOptions)
    compare_handler: CompareHandler | None = None
    normalizer: Normalizer = field(default_factory=Normalizer)

    @classmethod
    def build(cls, options: ProxyOptions) -> AddonConfig:
        """Compile ``options``; ValueError names the handler that cannot be imported."""
        handler: CompareHandler | None = None
        if options.compare_handler:
            try:
                handler = load_handler(options.compare_handler, options.handler_path)
            except ValueError as e:
                raise ValueError(f"flowproof_compare_handler {options.compare_handler!r}: {e}") from None
        normalizer = Normalizer(options.volatile, cwd=options.cwd, home=options.home,
                                secrets=[(s.value, s.placeholder) for s in options.secrets])
        return cls(options, handler, normalizer)

    @property
    def mode(self) -> Mode:
        return self.options.mode

    @property
    def cassette(self) -> Path | None:
        return self.options.cassette

    @property
    def report(self) -> Path | None:
        """The event log."""
        return self.options.report

    @property
    def route(self) -> Route:
        return self.options.route

    @property
    def upstream(self) -> Mapping[str, Upstream]:
        return self.options.upstream

    @property
    def extra_hosts(self) -> tuple[str, ...]:
        return self.options.extra_hosts

    @property
    def tool_results(self) -> Mapping[str, Any]:
        return self.options.tool_results

    @property
    def secrets(self) -> tuple[Secret, ...]:
        """The values of the spec's ``assert_no_secret_leak`` steps, scanned for in every request."""
        return self.options.secrets

    @property
    def runs_user_code(self) -> bool:
        """True when a hook may run code the user wrote: the compare handler, or a volatile
        pattern of the spec's own (a preset's patterns are flowproof's). A warm proxy runs such
        a flow's hooks on the session's worker, so that code cannot hold the other flows
        (`flowproof.addon.warm.Session.hook`)."""
        if self.compare_handler is not None:
            return True
        ours = {rule for rules in PRESETS.values() for rule in rules}
        return any(rule.pattern is not None and rule not in ours for rule in self.options.volatile)

    @property
    def compare_handler_name(self) -> str | None:
        """The handler's qualified name, for messages."""
        h = self.compare_handler
        if h is None:
            return None
        return f"{getattr(h, '__module__', '?')}:{getattr(h, '__qualname__', repr(h))}"


def _load_spec(path: Path, environ: Mapping[str, str]) -> FlowSpec:
    # Imported here: the spec loader and PyYAML are 0.05-0.1 s of the proxy's start (python
    # -X importtime), and only a spec named by hand is read here; a session request from the
    # runner carries its options resolved.
    from flowproof.spec.loader import load_spec
    from flowproof.spec.variables import resolve_variables

    spec: FlowSpec = load_spec(path)
    # Tool results may hold ${VAR} (mitmdump inherits the runner's environment), and
    # even a spec without variables needs its $${ escapes turned into a literal ${.
    return resolve_variables(spec, environ)


def options_by_hand(values: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> ProxyOptions:
    """`ProxyOptions` from the addon's mitmproxy option values (``{"flowproof_mode": …}``),
    with ``flowproof_spec`` loaded and resolved: the agent runs in its ``agent.cwd``, else
    here, and ``environ`` (default ``os.environ``) supplies ``${VAR}`` and HOME.

    Raises ``ValueError`` naming the option, or the `SpecError` of a bad spec."""
    env = os.environ if environ is None else environ
    options = from_values(values)
    if options.spec is None:
        return options
    spec = _load_spec(options.spec, env)
    return with_spec(options, spec, cwd=os.getcwd(), home=env.get("HOME") or None)
