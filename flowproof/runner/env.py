"""The agent's environment: the per-user CA, the trust bundle, and the injected variables.

The CA is trusted only by the agent process, through its environment — never
installed system-wide. docs/proxy-env.md explains every variable set here and
which client honours it.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import certifi

from flowproof.errors import CAError
from flowproof.options import Route
from flowproof.runner.proxy import default_ca_dir as default_ca_dir  # where it was, for its callers
from flowproof.runner.spawn import CA_BASENAME
from flowproof.spec.variables import BASE_URL_HANDLE
from flowproof.wire.providers import PROVIDERS, base_url_families, base_url_vars, model_host_suffixes
from flowproof.wire.providers import (
    model_hosts as _wire_model_hosts,  # `model_hosts` is a parameter below
)

#: The combined bundle (system or certifi roots + the flowproof CA) inside the CA dir.
BUNDLE_NAME = "flowproof-ca-bundle.pem"
#: Where Debian/Ubuntu/Alpine keep the system roots; other systems fall back to certifi.
SYSTEM_BUNDLES = (
    Path("/etc/ssl/certs/ca-certificates.crt"),
    Path("/etc/pki/tls/certs/ca-bundle.crt"),
    Path("/etc/ssl/cert.pem"),
)
#: Set in replay (and with ``--upstream``) when the user has no key for a provider: no
#: request reaches the provider, but SDKs refuse to start without one.
PLACEHOLDER_KEY = "flowproof-replay-placeholder"
#: Always direct: the agent keeps reaching its own local services (and base-URL listeners).
LOCAL_NO_PROXY = ("localhost", "127.0.0.1", "::1")
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")


@dataclass(frozen=True, slots=True)
class CAFiles:
    """The CA certificate alone (PEM) and the combined trust bundle handed to agents."""

    cert: Path
    bundle: Path


def system_bundle() -> Path:
    """The system root bundle when present, else certifi's."""
    for candidate in SYSTEM_BUNDLES:
        if candidate.is_file():
            return candidate
    return Path(certifi.where())


def ensure_ca(confdir: Path, roots: Path | None = None) -> CAFiles:
    """Create (first use) or reuse the flowproof CA in ``confdir`` and refresh the trust bundle.

    The directory is 0700 and every file holding a private key is 0600. The bundle
    is ``roots`` (default: `system_bundle`) plus the CA cert, rewritten atomically
    only when it would change.
    """
    confdir = Path(confdir)
    cert = confdir / f"{CA_BASENAME}-ca-cert.pem"
    try:
        confdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(confdir, 0o700)
        if not (confdir / f"{CA_BASENAME}-ca.pem").exists():
            # Imported here: mitmproxy.certs pulls in cryptography, 0.14-0.26 s (python
            # -X importtime, 3 runs), and only the first run on a machine creates the CA.
            from mitmproxy.certs import CertStore

            CertStore.create_store(confdir, CA_BASENAME, 2048)
        for path in confdir.iterdir():
            if _holds_private_key(path):
                os.chmod(path, 0o600)
        bundle = confdir / BUNDLE_NAME
        roots_path = roots or system_bundle()
        content = _join_pem(roots_path.read_bytes(), cert.read_bytes())
        _write_if_changed(bundle, content)
    except OSError as e:
        raise CAError(
            f"{confdir}: cannot set up the flowproof CA ({e.strerror or e}) — "
            "set FLOWPROOF_CA_DIR to a writable directory"
        ) from None
    return CAFiles(cert=cert, bundle=bundle)


def _holds_private_key(path: Path) -> bool:
    # mitmproxy writes the key into mitmproxy-ca.pem and mitmproxy-ca.p12 (not the -cert files).
    if not path.is_file() or "-cert." in path.name:
        return False
    if path.suffix == ".p12":
        return True
    try:
        return b"PRIVATE KEY" in path.read_bytes()
    except OSError:
        return False


def _join_pem(*parts: bytes) -> bytes:
    return b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)


def _write_if_changed(path: Path, content: bytes) -> None:
    try:
        if path.read_bytes() == content:
            return
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(tmp, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def no_proxy_value(existing: str, model_hosts: Iterable[str], host_suffixes: Iterable[str] = ()) -> str:
    """``existing`` NO_PROXY entries minus those that would bypass a model host, plus loopback.

    An entry bypasses a host when it is ``*``, the host itself, or a domain suffix
    of it (``.openai.com``, ``openai.com``). It bypasses a host family of
    ``host_suffixes`` (``.openai.azure.com``) when it names a host of the family
    (``res.openai.azure.com``) or a domain above it (``azure.com``).
    """
    hosts = [h.lower() for h in model_hosts]
    families = [s.lower() for s in host_suffixes]
    kept: list[str] = []
    for raw in existing.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name = entry.lower().split(":")[0] if entry.count(":") == 1 else entry.lower()
        bare = name.lstrip("*").lstrip(".").rstrip(".")
        if name == "*" or any(h == bare or h.endswith("." + bare) for h in hosts):
            continue
        if any(_covers_family(bare, suffix) for suffix in families):
            continue
        if entry not in kept:
            kept.append(entry)
    for local in LOCAL_NO_PROXY:
        if local not in kept:
            kept.append(local)
    return ",".join(kept)


def _covers_family(bare: str, suffix: str) -> bool:
    root = suffix.lstrip(".")
    return bare.endswith(suffix) or bare == root or root.endswith("." + bare)


def placeholder_key_vars(env: Mapping[str, str]) -> tuple[str, ...]:
    """The key variables that get `PLACEHOLDER_KEY` in ``env``: those of every provider with no key.

    A provider's key variables are read in a precedence order (google-genai reads
    ``GOOGLE_API_KEY`` before ``GEMINI_API_KEY``; the anthropic SDK prefers
    ``ANTHROPIC_API_KEY`` over ``ANTHROPIC_AUTH_TOKEN``), so a placeholder in any
    of them could shadow the user's key in another. A provider gets placeholders
    only when none of its variables holds a key (an empty value is no key: every
    SDK treats it as missing), and then in its ``placeholder_vars``.
    """
    names: list[str] = []
    for row in PROVIDERS:
        if any(env.get(var) for var in row.key_vars):
            continue
        names.extend(var for var in row.placeholder_vars if var not in names)
    return tuple(names)


def agent_env(
    base: Mapping[str, str],
    *,
    proxy_url: str,
    ca: CAFiles,
    route: Route = Route.PROXY,
    reverse_urls: Mapping[str, str] | None = None,
    placeholder_keys: bool = False,
    model_hosts: Iterable[str] = (),
    overrides: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
) -> dict[str, str]:
    """The environment for the agent process: ``base`` plus proxy, CA and routing variables.

    ``reverse_urls`` maps a model host to its reverse listener (``http://127.0.0.1:P``)
    for ``route="base_url"``. ``placeholder_keys`` gives a placeholder key to each
    provider the user has no key for (replay, ``--upstream``; see `placeholder_key_vars`).
    ``model_hosts`` adds hosts (upstream maps, gateways) that NO_PROXY must not bypass.
    ``overrides`` (the spec's ``agent.env``) are applied last, and a key set there
    counts as the user's when placeholders are chosen.
    """
    env = dict(base)
    for name in PROXY_VARS:
        env[name] = proxy_url
    # ALL_PROXY is left as the user set it: every client that reads it prefers the
    # scheme-specific variables above, and curl treats it as "any protocol" (socks too).
    # Every model host of the provider table, plus the run's own: a NO_PROXY entry that
    # covers one would let the agent's model calls bypass the proxy unrecorded.
    hosts = (*_wire_model_hosts(), *model_hosts)
    no_proxy = no_proxy_value(
        ",".join(v for v in (base.get("NO_PROXY", ""), base.get("no_proxy", "")) if v),
        hosts,
        model_host_suffixes(),
    )
    env["NO_PROXY"] = no_proxy
    env["no_proxy"] = no_proxy

    bundle, cert = str(ca.bundle), str(ca.cert)
    # Everything that goes through the proxy is re-signed by the flowproof CA, so every
    # client that honours the proxy variables must also trust it: the bundle where a
    # variable REPLACES the trust store, the CA alone where it ADDS to it.
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "AWS_CA_BUNDLE"):
        env[name] = bundle
    env["NODE_EXTRA_CA_CERTS"] = cert
    env["CODEX_CA_CERTIFICATE"] = cert
    env["DENO_CERT"] = cert
    # Node 22.21+/24+ built-in fetch honours HTTPS_PROXY only with this opt-in.
    env["NODE_USE_ENV_PROXY"] = "1"
    # Claude Code retries a failed call 10 times over minutes; a replay miss or an
    # injected error should fail fast (docs/proxy-env.md).
    env.setdefault("CLAUDE_CODE_MAX_RETRIES", "2")

    if route == Route.BASE_URL:
        for host, var in base_url_vars():
            url = (reverse_urls or {}).get(host)
            if url:
                env[var.name] = url.rstrip("/") + var.suffix
    # The spec keeps agent.env as (name, value) pairs (frozen data); a caller may pass a dict.
    env.update(overrides.items() if isinstance(overrides, Mapping) else (overrides or ()))
    if placeholder_keys:
        for name in placeholder_key_vars(env):
            env[name] = PLACEHOLDER_KEY
    return env


def handle_values(proxy_url: str, ca: CAFiles, reverse_urls: Mapping[str, str]) -> dict[str, str]:
    """What each ``${flowproof.…}`` handle of a spec (`flowproof.spec.variables.HANDLES`)
    stands for in this run: the proxy, the CA files, and a base URL per reverse listener
    (``reverse_urls``: host -> ``http://127.0.0.1:P``; only the base-URL route has them)."""
    values = {
        "flowproof.proxy_url": proxy_url,
        "flowproof.ca_bundle": str(ca.bundle),
        "flowproof.ca_cert": str(ca.cert),
    }
    for family, host, suffix in base_url_families():
        url = reverse_urls.get(host)
        if url:
            values[f"{BASE_URL_HANDLE}{family}"] = url.rstrip("/") + suffix
    return values


def interpreter_first_path(path: str | None, *, executable: str | None = None,
                           in_virtualenv: bool | None = None) -> str | None:
    """``path`` with the directory of flowproof's own interpreter first, when it runs in a virtualenv.

    A spec's ``command: python agent.py`` then runs under the interpreter (and the
    packages) flowproof itself runs under, even when that environment is not
    activated (``.venv/bin/flowproof-run``). Outside a virtualenv ``path`` is kept.
    """
    executable = executable if executable is not None else sys.executable
    if in_virtualenv is None:
        in_virtualenv = sys.prefix != sys.base_prefix
    if not in_virtualenv or not executable:
        return path
    # Not resolved: a venv's bin/python is a symlink to the base interpreter.
    bindir = os.path.dirname(os.path.abspath(executable))
    entries = [e for e in (path or "").split(os.pathsep) if e]
    if entries[:1] == [bindir]:
        return path
    return os.pathsep.join([bindir, *(e for e in entries if e != bindir)])


def export_lines(env: Mapping[str, str], base: Mapping[str, str]) -> list[str]:
    """``export NAME=value`` lines (shell-quoted) for the variables ``env`` adds or changes."""
    return [
        f"export {name}={shlex.quote(value)}"
        for name, value in sorted(env.items())
        if base.get(name) != value
    ]
