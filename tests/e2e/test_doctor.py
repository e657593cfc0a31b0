"""`flowproof doctor SPEC` with real agents, the real proxy and the stand-in model: what it
says works and what to change, and that it never touches the cassette or sends a real key."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import certifi

from flowproof.doctor import markers_in
from flowproof.runner.doctor import run_doctor

from .conftest import BIN, EXAMPLES, Flowproof, fingerprint, write_spec

CALLING_AGENT = """\
import os, sys
import openai
client = openai.OpenAI(max_retries=0, **({{"base_url": os.environ["MY_LLM_URL"], "api_key": os.environ["MY_KEY"]}}
                                         if "MY_LLM_URL" in os.environ else {{}}))
reply = client.chat.completions.create(model="gpt-4o-mini", messages=[{{"role": "user", "content": sys.stdin.read()}}])
print(reply.choices[0].message.content)
"""


def doctor(flowproof: Flowproof, spec: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "flowproof"), "doctor", str(spec)], cwd=spec.parent,
                          env=flowproof.env(**env), capture_output=True, text=True, timeout=120)


def agent_spec(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "agent.py").write_text(CALLING_AGENT.format(), encoding="utf-8")
    return write_spec(tmp_path / "agent.flow.yaml",
                      f"name: doctor\nagent:\n  command: python agent.py\n{extra}steps:\n  - prompt: hi\n")


def test_the_booking_example_is_ready_and_its_cassette_untouched(tmp_path: Path, flowproof: Flowproof) -> None:
    folder = tmp_path / "example"
    folder.mkdir()
    for name in ("booking.flow.yaml", "booking_agent.py", "booking.cassette.json"):
        shutil.copy(EXAMPLES / name, folder / name)
    before = fingerprint(folder / "booking.cassette.json")
    ran = doctor(flowproof, folder / "booking.flow.yaml", OPENAI_API_KEY="sk-doctor-real-key-0123456789")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for line in ("✓ it reached the proxy (HTTPS_PROXY): 1 model call",
                 "✓ it trusts flowproof's CA (TLS to api.openai.com through the proxy)",
                 "✓ it spoke openai-chat to api.openai.com (POST /v1/chat/completions, model gpt-4o-mini)",
                 "✓ it read OPENAI_API_KEY (the key it sent); record with it set",
                 "✓ it finished (exit 0)"):
        assert line in ran.stdout, ran.stdout
    assert "Ready to record: OPENAI_API_KEY=... flowproof-run" in ran.stdout
    assert "sk-doctor-real-key" not in ran.stdout + ran.stderr
    assert fingerprint(folder / "booking.cassette.json") == before
    assert sorted(p.name for p in folder.iterdir()) == [
        "booking.cassette.json", "booking.flow.yaml", "booking_agent.py"]


def test_an_agent_that_does_not_trust_the_ca(tmp_path: Path, flowproof: Flowproof) -> None:
    """An agent whose trust store leaves out flowproof's CA is told so, with the host."""
    spec = agent_spec(tmp_path, f"  env:\n    SSL_CERT_FILE: {certifi.where()}\n")
    ran = doctor(flowproof, spec)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "✗ it reached the proxy but does not trust flowproof's CA for api.openai.com" in ran.stdout
    assert "SSL_CERT_FILE" in ran.stdout and "✗ it exited with 1" in ran.stdout


def test_an_agent_that_calls_no_model(tmp_path: Path, flowproof: Flowproof) -> None:
    spec = write_spec(tmp_path / "quiet.flow.yaml",
                      f"name: quiet\nagent:\n  command: {sys.executable} -c pass\nsteps:\n  - prompt: hi\n")
    ran = doctor(flowproof, spec)
    assert ran.returncode == 1
    assert "✗ no model call reached the proxy: the agent ignores HTTPS_PROXY, or it called no model" in ran.stdout
    assert "agent.route: base_url" in ran.stdout


def test_an_agent_with_variables_of_its_own(tmp_path: Path, flowproof: Flowproof) -> None:
    """Its URL from a handle, its key from the spec: the doctor names both, and a real key in
    the environment never reaches the stand-in model (in-process, to read what it received)."""
    spec = agent_spec(tmp_path, "  route: base_url\n  env:\n    MY_LLM_URL: ${flowproof.base_url.openai}\n"
                                "    MY_KEY: ${OPENAI_API_KEY}\n")
    ran = run_doctor(spec, ca_dir=flowproof.ca_dir,
                     environ={**flowproof.env(), "OPENAI_API_KEY": "sk-doctor-real-key-0123456789"})
    lines = [c.render() for c in ran.checks]
    assert "  ✓ it reached the base-URL listeners: 1 model call" in lines
    assert "  ✓ it read OPENAI_BASE_URL or MY_LLM_URL (agent.env) (how its calls reached flowproof)" in lines
    assert markers_in([v for r in ran.facts.received for v in r.values]) == ["OPENAI_API_KEY"]
    assert not any("sk-doctor-real-key" in v for r in ran.facts.received for v in r.values)
    assert all(c.passed for c in ran.checks), lines
