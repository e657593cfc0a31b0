"""The error tree: messages built from structured fields, and the exit-code contract."""

from __future__ import annotations

import pytest

from flowproof import errors
from flowproof.errors import (
    AgentError,
    CassetteError,
    CassetteNotFoundError,
    FlowFailure,
    FlowproofError,
    ProxyError,
    SpecError,
    SpecProblem,
    WireError,
)


class TestExitCodes:
    def test_exit_codes_are_the_documented_contract(self) -> None:
        """The exit codes match the command-line contract in docs/runner.md."""
        assert (
            errors.EXIT_OK,
            errors.EXIT_ASSERTION,
            errors.EXIT_USAGE,
            errors.EXIT_DIVERGENCE,
            errors.EXIT_DRIFT,
            errors.EXIT_AGENT,
        ) == (0, 1, 2, 3, 4, 5)

    @pytest.mark.parametrize(
        ("error", "code"),
        [
            pytest.param(SpecError([SpecProblem("a.yaml", 1, 1, "bad")]), 2, id="spec"),
            pytest.param(CassetteError("c.json", "corrupt"), 2, id="cassette"),
            pytest.param(WireError("anthropic", "messages", "is missing"), 2, id="wire"),
            pytest.param(AgentError("agent timed out"), 5, id="agent"),
            pytest.param(ProxyError("mitmdump died"), 5, id="proxy"),
        ],
    )
    def test_each_error_carries_its_exit_code(self, error: FlowproofError, code: int) -> None:
        """Each error class says which exit code the CLI uses for it."""
        assert error.exit_code == code

    def test_a_verdict_is_not_an_error(self) -> None:
        """FlowFailure is a verdict about the agent, kept apart from FlowproofError."""
        failure = FlowFailure("replay diverged", exit_code=errors.EXIT_DIVERGENCE)
        assert not isinstance(failure, FlowproofError)
        assert failure.exit_code == 3
        assert str(failure) == "replay diverged"


class TestMessages:
    def test_spec_problem_renders_file_line_col_and_hint(self) -> None:
        """A spec problem reads `file:line:col: what is wrong — what to do`."""
        problem = SpecProblem("flow.yaml", 4, 7, "unknown key 'step'", "did you mean 'steps'?")
        assert str(problem) == "flow.yaml:4:7: unknown key 'step' — did you mean 'steps'?"

    def test_spec_error_lists_every_problem(self) -> None:
        """A spec error keeps every problem, one per line, and points at the first."""
        error = SpecError(
            [SpecProblem("f.yaml", 2, 1, "first"), SpecProblem("f.yaml", 9, 3, "second")]
        )
        assert str(error) == "f.yaml:2:1: first\nf.yaml:9:3: second"
        assert (error.path, error.line) == ("f.yaml", 2)

    def test_spec_error_needs_a_problem(self) -> None:
        """An empty spec error is a programming mistake, refused at once."""
        with pytest.raises(ValueError):
            SpecError([])

    def test_missing_cassette_says_how_to_record(self) -> None:
        """A missing cassette names the file and the exact record command."""
        error = CassetteNotFoundError("b.cassette.json", "flowproof-run b.flow.yaml --record")
        assert str(error) == (
            "b.cassette.json: no cassette to replay — "
            "record one first with: flowproof-run b.flow.yaml --record"
        )
        assert isinstance(error, CassetteError)

    def test_wire_error_names_provider_and_field(self) -> None:
        """A wire error names the provider and the field that was wrong."""
        assert str(WireError("openai-chat", "messages", "is missing")) == (
            "openai-chat: messages: is missing"
        )


class TestInterrupted:
    @pytest.mark.parametrize(
        ("signum", "code", "name"), [(2, 130, "SIGINT"), (15, 143, "SIGTERM"), (None, 130, "SIGINT")]
    )
    def test_exit_code_is_128_plus_the_signal(self, signum: int | None, code: int, name: str) -> None:
        """flowproof-run interrupted exits 128 + the signal and says nothing was recorded."""
        error = errors.Interrupted(signum)
        assert error.exit_code == code
        assert name in str(error) and "nothing was recorded" in str(error)

    def test_ca_error_is_a_usage_error(self) -> None:
        """A CA directory problem is a FlowproofError with the usage exit code."""
        assert issubclass(errors.CAError, errors.FlowproofError)
        assert errors.CAError.exit_code == errors.EXIT_USAGE
