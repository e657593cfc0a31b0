"""Errors a user or the environment can cause, and the verdict type.

Our exception hierarchy::

    * FlowproofError                 base; .exit_code (2 unless a subclass says otherwise)
      x SpecError                    one or more problems in a flow spec, each with file:line:col
      x CassetteError   (.path)      corrupt, truncated or newer-format cassette
        + CassetteNotFoundError      says the exact record command to run
      x WireError       (.provider)  a body that is not what a provider codec expects
      x AgentError                   agent not found, crashed, or timed out (exit 5)
      x ProxyError                   the proxy could not start or died (exit 5)
      x CAError                      the CA directory cannot be created or read
      x OtelError                    --otel cannot run as configured, or its export failed
      x Interrupted                  flowproof-run got SIGINT/SIGTERM (exit 128 + signal)
    * FlowFailure                    not an error: the verdict that the agent did the wrong thing

Verdicts are kept apart from errors: a `FlowFailure` means the system under test
misbehaved, a `FlowproofError` means the user's input or the environment is wrong.
Every message is built from structured fields in ``__init__`` and ends with what
to do, so the CLI can print ``str(error)`` and nothing else.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

# Exit codes are a contract (docs/runner.md).
EXIT_OK = 0
EXIT_ASSERTION = 1
EXIT_USAGE = 2
EXIT_DIVERGENCE = 3
EXIT_DRIFT = 4
EXIT_AGENT = 5


class FlowproofError(Exception):
    """Base of every error flowproof raises on purpose; the CLI prints it without a traceback."""

    exit_code: ClassVar[int] = EXIT_USAGE


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One problem in a spec file: where it is, what is wrong, and what to do."""

    path: str
    line: int
    col: int
    message: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.path}:{self.line}:{self.col}: {self.message}"
        if self.hint:
            text += f" — {self.hint}"
        return text


class SpecError(FlowproofError):
    """A flow spec is invalid. Carries every problem found in the file, not just the first."""

    def __init__(self, problems: Sequence[SpecProblem]) -> None:
        if not problems:
            raise ValueError("SpecError needs at least one problem")
        self.problems: tuple[SpecProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def path(self) -> str:
        return self.problems[0].path

    @property
    def line(self) -> int:
        return self.problems[0].line


class CassetteError(FlowproofError):
    """A cassette file cannot be used as it is."""

    def __init__(self, path: Path | str, reason: str, hint: str = "") -> None:
        self.path = Path(path)
        self.reason = reason
        message = f"{self.path}: {reason}"
        if hint:
            message += f" — {hint}"
        super().__init__(message)


class CassetteNotFoundError(CassetteError):
    """Replay was asked for and there is nothing to replay. Nothing ever records implicitly."""

    def __init__(self, path: Path | str, record_command: str) -> None:
        self.record_command = record_command
        super().__init__(
            path,
            "no cassette to replay",
            f"record one first with: {record_command}",
        )


class WireError(FlowproofError):
    """A request or response body does not have the shape a provider codec expects.

    ``part`` says which body of a turn it was (``request``, ``response``), when the caller
    knows (`flowproof.views.turn_views`); the message is the same either way."""

    def __init__(self, provider: str, field: str, reason: str, part: str = "") -> None:
        self.provider = provider
        self.field = field
        self.reason = reason
        self.part = part
        super().__init__(f"{provider}: {field}: {reason}")


class AgentError(FlowproofError):
    """The agent under test could not be started, crashed, or did not finish in time."""

    exit_code: ClassVar[int] = EXIT_AGENT


class ProxyError(FlowproofError):
    """The intercepting proxy could not be started or stopped working."""

    exit_code: ClassVar[int] = EXIT_AGENT


class CAError(FlowproofError):
    """The flowproof CA directory cannot be created or read."""


class OtelError(FlowproofError):
    """``--otel`` cannot run as configured (no SDK, another OTLP protocol, a bad TRACEPARENT),
    or its spans could not be exported (docs/otel.md)."""


class Interrupted(FlowproofError):
    """flowproof-run itself got SIGINT/SIGTERM; exits 128 + the signal number (130, 143)."""

    def __init__(self, signum: int | None) -> None:
        signum = int(signum or signal.SIGINT)
        self.exit_code = 128 + signum  # type: ignore[misc]  # per instance: 130 or 143
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        super().__init__(
            f"interrupted by {name}: the agent and the proxy were stopped and nothing was recorded"
        )


class FlowFailure(Exception):
    """The verdict that a flow failed: an assertion, a replay divergence, or compare drift.

    Not a `FlowproofError`: nothing is wrong with the user's setup, the agent did
    something other than the spec and cassette say. ``report`` is the readable text.
    """

    def __init__(self, report: str, exit_code: int = EXIT_ASSERTION) -> None:
        self.report = report
        self.exit_code = exit_code
        super().__init__(report)
