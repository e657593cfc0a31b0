"""flowproof.runner.doctor: the environment the agent and the proxy get, and the run's shape
(the end-to-end behaviour with real agents is tests/e2e/test_doctor.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flowproof.doctor import key_marker
from flowproof.errors import SpecError
from flowproof.runner.doctor import doctor_environ, run_doctor
from flowproof.wire.providers import PROVIDERS


def test_no_real_key_and_a_marker_where_a_placeholder_may_go() -> None:
    every = {v for p in PROVIDERS for v in p.key_vars}
    real = {name: f"real-{name}" for name in every}
    env = doctor_environ({**real, "PATH": "/bin", "FLOWPROOF_UPSTREAM": "api.openai.com=http://x"})
    assert env["PATH"] == "/bin" and "FLOWPROOF_UPSTREAM" not in env
    assert not any(value.startswith("real-") for value in env.values())
    assert env["OPENAI_API_KEY"] == key_marker("OPENAI_API_KEY")
    # A login token gets no marker: it could switch a client (Claude Code) to another auth mode.
    assert "CLAUDE_CODE_OAUTH_TOKEN" not in env and "ANTHROPIC_AUTH_TOKEN" not in env


def test_a_spec_that_does_not_load_is_a_spec_error_and_the_environment_is_kept(tmp_path: Path) -> None:
    spec = tmp_path / "bad.flow.yaml"
    spec.write_text("name: x\n")
    before = dict(os.environ)
    with pytest.raises(SpecError):
        run_doctor(spec)
    assert dict(os.environ) == before


def test_an_error_before_the_agent_starts_is_reported_and_nothing_is_written(
        tmp_path: Path, ca_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset variable stops the run before the agent: the doctor says so, writes nothing
    beside the spec, and puts this process's environment back."""
    monkeypatch.delenv("DOCTOR_TEST_BIN", raising=False)
    spec = tmp_path / "a.flow.yaml"
    spec.write_text("name: a\nagent:\n  command: ${DOCTOR_TEST_BIN}\nsteps:\n  - prompt: hi\n")
    before = dict(os.environ)
    ran = run_doctor(spec, ca_dir=ca_dir)
    (check,) = ran.checks
    assert not check.passed and "${DOCTOR_TEST_BIN} is not set" in check.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.flow.yaml"]
    assert dict(os.environ) == before
