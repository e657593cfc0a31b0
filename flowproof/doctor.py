"""`flowproof doctor`'s verdict: what an agent did against a stand-in model, and what to change.

Pure: the runner (`flowproof.runner.doctor`) starts the agent through the proxy with every
model host mapped to the fake model server and a marker in each key variable, and hands
over what it saw (`DoctorFacts`); `diagnose` says what works and what to change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flowproof.options import Route
from flowproof.wire.providers import PROVIDERS, base_url_vars

__all__ = ["Call", "Check", "DoctorFacts", "Received", "diagnose", "healthy", "key_marker", "markers_in",
           "record_hint"]

_MARKER_PREFIX = "flowproof-doctor-"
_MARKER = re.compile(re.escape(_MARKER_PREFIX) + r"([A-Z][A-Z0-9_]*)")


def key_marker(variable: str) -> str:
    """The value the doctor puts in a key variable: what arrives at the stand-in names it."""
    return f"{_MARKER_PREFIX}{variable}"


def markers_in(values: Sequence[str]) -> list[str]:
    """The key variables whose markers appear in ``values`` (header and query values), in order."""
    found: list[str] = []
    for value in values:
        for name in _MARKER.findall(value):
            if name not in found:
                found.append(name)
    return found


@dataclass(frozen=True, slots=True)
class Call:
    """A model call the proxy recorded: its API, the host the agent addressed, the path, the model."""

    provider: str
    host: str
    path: str
    model: str | None


@dataclass(frozen=True, slots=True)
class Received:
    """A request the stand-in model received: the header and query values it carried."""

    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DoctorFacts:
    """What one doctor run saw."""

    route: Route
    calls: tuple[Call, ...] = ()
    received: tuple[Received, ...] = ()
    #: Hosts whose TLS handshake with the proxy failed, with mitmproxy's reason.
    tls_failures: tuple[tuple[str, str], ...] = ()
    returncode: int | None = None
    timed_out: bool = False
    stderr_tail: str = ""
    #: A run-stopping error other than the agent's (a spec, an MCP server, the proxy).
    error: str | None = None
    #: The spec's agent.env as written (handles unresolved): a variable given a handle is one
    #: the agent may have read instead of the standard one.
    spec_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the verdict: passed or not, what was seen, and what to do when not."""

    passed: bool
    text: str
    fix: str = ""

    def render(self) -> str:
        line = f"  {'✓' if self.passed else '✗'} {self.text}"
        return line + (f"\n      → {self.fix}" if self.fix else "")


_KEY_VARS = tuple(dict.fromkeys(v for p in PROVIDERS for v in p.key_vars))


def _base_url_var(host: str) -> str:
    return next((var.name for h, var in base_url_vars() if h == host), "its base-URL variable")


def diagnose(facts: DoctorFacts) -> list[Check]:
    """What works and what to change, in the order a newcomer would fix it."""
    if facts.error is not None:
        return [Check(False, f"the run stopped before the agent could be judged: {facts.error}")]
    checks: list[Check] = []
    proxy_route = facts.route == Route.PROXY
    if facts.calls:
        how = "the proxy (HTTPS_PROXY)" if proxy_route else "the base-URL listeners"
        count = len(facts.calls)
        checks.append(Check(True, f"it reached {how}: {count} model call{'s' if count != 1 else ''}"))
        if proxy_route:
            hosts = ", ".join(dict.fromkeys(c.host for c in facts.calls))
            checks.append(Check(True, f"it trusts flowproof's CA (TLS to {hosts} through the proxy)"))
        for call in dict.fromkeys(facts.calls):
            model = f", model {call.model}" if call.model else ""
            checks.append(Check(True, f"it spoke {call.provider} to {call.host} (POST {call.path}{model})"))
    elif facts.tls_failures:
        host, reason = facts.tls_failures[0]
        checks.append(Check(
            False, f"it reached the proxy but does not trust flowproof's CA for {host} ({reason})",
            "let it read the CA from the variable its runtime uses — flowproof sets SSL_CERT_FILE, "
            "REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS and others (docs/proxy-env.md); an agent with a CA "
            "setting of its own gets `${flowproof.ca_bundle}` through agent.env; one with built-in roots "
            "needs `agent.route: base_url`",
        ))
    elif proxy_route:
        checks.append(Check(
            False, "no model call reached the proxy: the agent ignores HTTPS_PROXY, or it called no model",
            "try `agent.route: base_url` (OPENAI_BASE_URL …); an agent with a URL variable of its own gets "
            "`${flowproof.base_url.openai}` (or .anthropic, .gemini) through agent.env",
        ))
    else:
        names = ", ".join(var.name for _h, var in base_url_vars())
        checks.append(Check(
            False, f"no model call reached the base-URL listeners: the agent reads none of {names}",
            "give the variable it does read `${flowproof.base_url.openai}` (or .anthropic, .gemini) "
            "in agent.env, or go back to `route: proxy` if it honours HTTPS_PROXY",
        ))
    checks += _variables(facts)
    checks.append(_exit(facts))
    return checks


def _variables(facts: DoctorFacts) -> list[Check]:
    if not facts.calls:
        return []
    read = markers_in([v for r in facts.received for v in r.values])
    if facts.route == Route.PROXY:
        standard, handle = ["HTTPS_PROXY"], "${flowproof.proxy_url}"
    else:
        standard = list(dict.fromkeys(_base_url_var(c.host) for c in facts.calls))
        handle = "${flowproof.base_url."
    # Both point at the same place, so which one it read cannot be told apart: say both.
    own = [f"{name} (agent.env)" for name, value in facts.spec_env.items() if handle in value]
    lines = [Check(True, f"it read {' or '.join(standard + own)} (how its calls reached flowproof)")]
    if read:
        lines.append(Check(True, f"it read {', '.join(read)} (the key it sent); record with it set"))
    elif facts.received:
        lines.append(Check(
            False, "the key it sent came from none of " + ", ".join(_KEY_VARS),
            "it reads its key elsewhere (a config file, a login): at record it sends that one; check that "
            "it is the account you mean",
        ))
    return lines


def _exit(facts: DoctorFacts) -> Check:
    if facts.timed_out:
        return Check(False, "it did not finish before the timeout",
                     "if it waits for input, it gets the prompt on stdin and in $FLOWPROOF_PROMPT "
                     "(or write {prompt} in agent.command); else raise agent.timeout")
    if facts.returncode not in (0, None):
        last = facts.stderr_tail.strip().splitlines()[-1:] or [""]
        return Check(False, f"it exited with {facts.returncode}" + (f": {last[0]}" if last[0] else ""),
                     "the stand-in model answers every call with a short text; an agent that needs a "
                     "tool call first still fails here — read its output above")
    return Check(True, "it finished (exit 0)")


def healthy(checks: Sequence[Check]) -> bool:
    """The agent can be recorded as it is: every check passed."""
    return all(c.passed for c in checks)


def record_hint(facts: DoctorFacts, spec: str) -> str:
    """The command to record next, naming the key variables the agent read."""
    keys = "".join(f"{name}=... " for name in markers_in([v for r in facts.received for v in r.values]))
    return f"{keys}flowproof-run {spec} --record"
