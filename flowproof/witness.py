"""The wire as witness: which hosts the agent tried to reach, and where a known secret went.

The proxy sees every request the agent sends through it, to any host, in
every mode (an offline replay included). Two facts come of it, as data the
addon writes to the event log and the assertions read:

- `EgressHost`: a host the agent tried to reach (the target of a ``CONNECT``,
  or the host of a plain-HTTP request), whether it is a model API, one of the
  spec's ``mcp:`` servers, or something else;
- `SecretLeak`: a declared secret (``assert_no_secret_leak``) found in a
  request's body, URL or a header that is not a credential header, reported by
  where it went and never by its value.

`find_leaks` is the scan, `Secret` the value with its label and the
placeholder that stands for it wherever flowproof writes (`mask`).

Pure.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, quote_plus, urlsplit

from flowproof.outcome import AssertionResult, Mismatch
from flowproof.redact import is_secret_name

if TYPE_CHECKING:  # the parsed spec's other types: the proxy never builds them
    from flowproof.spec.types import EgressAssertion, SecretLeakAssertion

__all__ = [
    "EgressHost",
    "Role",
    "Secret",
    "SecretLeak",
    "Witness",
    "evaluate_egress",
    "evaluate_secret",
    "find_leaks",
    "host_allowed",
    "mask",
    "secret_placeholder",
]

#: What a reached host is to the flow: a model API, a spec ``mcp:`` server, or anything else.
Role = Literal["model", "mcp", "other"]


@dataclass(frozen=True, slots=True)
class EgressHost:
    """A host the agent tried to reach; ``via`` is ``connect`` (a tunnel) or ``http``."""

    host: str
    port: int
    role: Role
    via: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "role": self.role, "via": self.via}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> EgressHost:
        port = obj.get("port")
        role = obj.get("role")
        return cls(str(obj.get("host") or ""), port if isinstance(port, int) else 0,
                   role if role in ("model", "mcp") else "other", str(obj.get("via") or "http"))


@dataclass(frozen=True, slots=True)
class SecretLeak:
    """A secret found in a request: where it went (host, method, URL with the secret masked),
    where in the request (``body``, ``url`` or ``header``) and at what JSON path or header name."""

    label: str
    host: str
    method: str
    url: str
    where: str
    path: str
    model_call: bool = False

    def describe(self) -> str:
        at = {"body": "the body", "url": "the URL", "header": "header"}.get(self.where, self.where)
        if self.path:
            at = f"{at} at {self.path}" if self.where != "header" else f"header {self.path}"
        kind = "model call" if self.model_call else "request"
        return f"{self.label} went to {self.host}: {kind} {self.method} {self.url}, in {at}"

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "host": self.host, "method": self.method, "url": self.url,
                "where": self.where, "path": self.path, "model_call": self.model_call}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SecretLeak:
        label, host, method, url, where, path = (
            str(obj.get(k) or "") for k in ("label", "host", "method", "url", "where", "path"))
        return cls(label, host, method, url, where, path, model_call=obj.get("model_call") is True)


@dataclass(frozen=True, slots=True)
class Witness:
    """What the proxy saw of a run beyond its model calls."""

    egress: tuple[EgressHost, ...] = ()
    leaks: tuple[SecretLeak, ...] = ()

    def hosts(self) -> tuple[str, ...]:
        """Every reached address once, in the order first reached."""
        return tuple(dict.fromkeys(e.address for e in self.egress))


@dataclass(frozen=True, slots=True)
class Secret:
    """A value to look for, how reports name it, and the placeholder written in its place."""

    label: str
    value: str
    placeholder: str


def secret_placeholder(label: str, number: int) -> str:
    """``«secret:CUSTOMER_TOKEN»`` for ``${CUSTOMER_TOKEN}``, ``«secret:N»`` for a literal."""
    name = label[2:-1] if label.startswith("${") and label.endswith("}") else str(number)
    return f"«secret:{name}»"


def _forms(value: str) -> tuple[str, ...]:
    """The ways a value can appear in a URL, a header or a raw body: as is, percent-encoded,
    form-encoded and JSON-escaped."""
    return tuple(dict.fromkeys((value, quote(value, safe=""), quote_plus(value),
                                json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1])))


def mask(text: str, secrets: Iterable[Secret]) -> str:
    """``text`` with every form of every secret replaced by its placeholder (longest first)."""
    for secret in sorted(secrets, key=lambda s: len(s.value), reverse=True):
        for form in _forms(secret.value):
            if form and form in text:
                text = text.replace(form, secret.placeholder)
    return text


def _json_paths(value: Any, needle: str, path: str = "") -> list[str]:
    """The dotted paths (as where clauses write them) of the strings holding ``needle``."""
    found: list[str] = []
    if isinstance(value, str):
        if needle in value:
            found.append(path or "(the whole body)")
    elif isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if needle in str(key):
                found.append(here)
            found.extend(_json_paths(item, needle, here))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(_json_paths(item, needle, f"{path}.{i}" if path else str(i)))
    return found


def find_leaks(
    secrets: Sequence[Secret],
    *,
    method: str,
    url: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    model_call: bool = False,
) -> list[SecretLeak]:
    """Every place of this request that holds a secret: the URL, each non-credential header,
    and the body (by JSON path when it is JSON, else as raw text). The URL in each leak has
    the secrets masked."""
    if not secrets:
        return []
    host = (urlsplit(url).hostname or "").lower()
    shown = mask(url, secrets)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = body.decode("latin-1")
    try:
        data: Any = json.loads(text) if text.strip() else None
        parsed = text.strip() != ""
    except (ValueError, RecursionError):
        data, parsed = None, False
    headers = list(headers)
    leaks: list[SecretLeak] = []
    for secret in secrets:
        def leak(where: str, path: str, s: Secret = secret) -> None:
            leaks.append(SecretLeak(s.label, host, method, shown, where, path, model_call))

        forms = _forms(secret.value)
        parts = urlsplit(url)
        if any(f in parts.query for f in forms):
            leak("url", "query")
        elif any(f in url for f in forms):
            leak("url", "path")
        for name, value in headers:
            if not is_secret_name(name) and any(f in value for f in forms):
                leak("header", name.lower())
        if parsed:
            for path in _json_paths(data, secret.value):
                leak("body", path)
        elif any(f in text for f in forms):
            leak("body", "")
    return leaks


def host_allowed(address: str, patterns: Sequence[str]) -> bool:
    """True when ``address`` (``host:port``) matches a pattern, written with or without a port."""
    host = address.rsplit(":", 1)[0]
    return any(fnmatch.fnmatchcase(address, p) or fnmatch.fnmatchcase(host, p) for p in patterns)


def evaluate_egress(step: EgressAssertion, witness: Witness) -> AssertionResult:
    """``assert_no_egress``: every reached host is a model API, an ``mcp:`` server or allowed."""
    reached = witness.hosts()
    outside = [
        e for e in dict((e.address, e) for e in witness.egress).values()
        if e.role == "other" and not host_allowed(e.address, step.allowed)
    ]
    allowed = " and " + ", ".join(step.allowed) if step.allowed else ""
    if not outside:
        hosts = ", ".join(reached) or "none"
        return AssertionResult(step, True, f"no host beyond the model APIs, mcp: servers{allowed} "
                               f"(reached: {hosts})", step.location)
    lines = [f"expected the agent to reach only its model APIs and mcp: servers{allowed}",
             "  but it reached:"]
    lines.extend(f"  - {e.address} ({'CONNECT' if e.via == 'connect' else 'plain HTTP'})" for e in outside)
    why = tuple(Mismatch("egress", expected=list(step.allowed), actual=e.address) for e in outside)
    return AssertionResult(step, False, "\n".join(lines), step.location, why)


def evaluate_secret(step: SecretLeakAssertion, witness: Witness) -> AssertionResult:
    """``assert_no_secret_leak``: the proxy found the value in no request."""
    leaks = [leak for leak in witness.leaks if leak.label == step.label]
    if not leaks:
        return AssertionResult(step, True, f"{step.label} was in no request the agent sent", step.location)
    lines = [f"expected {step.label} in no request the agent sent (shown masked)"]
    lines.extend(f"  - {leak.describe()}" for leak in leaks)
    why = tuple(Mismatch("secret leak", path=leak.path, expected=step.label,
                         actual=f"{leak.method} {leak.url} ({leak.where})") for leak in leaks)
    return AssertionResult(step, False, "\n".join(lines), step.location, why)
