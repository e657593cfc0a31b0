"""``flowproof doctor SPEC``: run the agent through the proxy against a stand-in model and
say what works, before anyone spends a key.

Every model host of the provider table is mapped (``--upstream``) to a fake model server
on 127.0.0.1 that answers every API with a short text; every key variable holds a marker
instead of a key (a real key never leaves the machine, nor reaches the stand-in), so what
arrives names the variable the agent read. The flow runs in compare mode against an empty
cassette in a scratch folder — compare never writes, and every call is simply "extra" — so
the spec's own cassette is never read or written. The verdict is `flowproof.doctor`'s.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from flowproof.cassette import Cassette, save_cassette, url_path
from flowproof.doctor import Call, Check, DoctorFacts, Received, diagnose, key_marker
from flowproof.events import TlsFailedEvent, TurnEvent
from flowproof.options import Mode, parse_upstreams
from flowproof.runner.flow import RunOptions, run_flow
from flowproof.spec import load_spec
from flowproof.testing import FakeModelServer, Reply
from flowproof.wire.providers import PROVIDERS, model_hosts

__all__ = ["DoctorRun", "doctor_environ", "run_doctor"]

#: What the stand-in says to every call (each API in its own wire format).
STAND_IN_REPLY = "flowproof doctor: the stand-in model answered; nothing was sent to a provider."
#: Calls the stand-in answers before it says its script is exhausted (an agent in a loop).
_STAND_IN_CALLS = 20


@dataclass(frozen=True, slots=True)
class DoctorRun:
    facts: DoctorFacts
    checks: list[Check]


def doctor_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with every key variable of the provider table removed, and a marker in each
    one a placeholder may go in (never in a login token: it could switch a client's auth mode)."""
    every = {v for p in PROVIDERS for v in p.key_vars}
    env = {k: v for k, v in environ.items() if k not in every and k != "FLOWPROOF_UPSTREAM"}
    for provider in PROVIDERS:
        for var in provider.placeholder_vars:
            env[var] = key_marker(var)
    return env


def run_doctor(spec_path: Path, *, timeout: float | None = None, ca_dir: Path | None = None,
               environ: Mapping[str, str] | None = None) -> DoctorRun:
    """Run the spec's agent against the stand-in and diagnose it (raises SpecError for a spec
    that does not load: there is no agent to start)."""
    spec = load_spec(spec_path)
    env = doctor_environ(os.environ if environ is None else environ)
    with FakeModelServer([Reply.text(STAND_IN_REPLY)] * _STAND_IN_CALLS) as server, \
            tempfile.TemporaryDirectory(prefix="flowproof-doctor-") as scratch, _process_environ(env):
        empty = Path(scratch) / "doctor.cassette.json"
        save_cassette(Cassette(turns=(), route=spec.agent.route), empty)
        options = RunOptions(
            mode=Mode.COMPARE,
            cassette=empty,
            upstream=parse_upstreams([f"{host}={server.url}" for host in model_hosts()], "doctor"),
            timeout=timeout,
            ca_dir=ca_dir,
        )
        result = run_flow(spec_path, options)
        received = tuple(
            Received((*r.headers.values(), *r.query.values())) for r in server.requests if r.api is not None
        )
    calls = tuple(
        Call(e.turn.provider, urlsplit(e.turn.request.url).hostname or "", url_path(e.turn.request.url),
             _model(e.turn.request.body))
        for e in result.events if isinstance(e, TurnEvent)
    )
    tls = tuple((e.host, e.text) for e in result.events if isinstance(e, TlsFailedEvent))
    # An error before the agent started (an unset variable, an MCP server down, a missing cwd).
    started = result.agent_returncode is not None or result.failure is not None or bool(calls)
    facts = DoctorFacts(
        route=spec.agent.route,
        calls=calls,
        received=received,
        tls_failures=tls,
        returncode=result.agent_returncode,
        timed_out=result.failure == "timeout",
        stderr_tail=result.agent_stderr[-2000:],
        error=None if started else result.error,
        spec_env=dict(spec.agent.env),
    )
    return DoctorRun(facts, diagnose(facts))


@contextmanager
def _process_environ(env: Mapping[str, str]) -> Iterator[None]:
    """This process's environment is ``env`` meanwhile: the proxy (which resolves the spec's
    variables too) and the agent both start from it, so neither ever sees a real key."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _model(body: object) -> str | None:
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None
