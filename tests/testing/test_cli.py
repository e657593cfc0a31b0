"""Tests for flowproof.testing.cli: python -m flowproof.testing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai

from flowproof.testing import close_after_terminal

from .helpers import (
    MESSAGES,
)


class TestCommandLine:
    def test_serves_a_script_until_sigterm(self, tmp_path: Path) -> None:
        """The entry point prints its URL first, serves the script, and exits 0 on SIGTERM."""
        script = tmp_path / "script.json"
        script.write_text(json.dumps([{"text": "from the file"}]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowproof.testing", "--port", "0", "--script", str(script), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("listening on http://127.0.0.1:")
            url = line.removeprefix("listening on ")
            client = openai.OpenAI(base_url=url + "/v1", api_key="test-key", max_retries=0, timeout=10)
            result = client.chat.completions.create(model="m", messages=MESSAGES)
            assert result.choices[0].message.content == "from the file"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
            proc.stdout.close()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]

    def test_bad_script_exits_2(self, tmp_path: Path) -> None:
        """A malformed script file exits 2 with a message naming the reply."""
        script = tmp_path / "bad.json"
        script.write_text(json.dumps([{"text": "ok"}, {"tool_calls": [{"arguments": {}}]}]))
        result = subprocess.run(
            [sys.executable, "-m", "flowproof.testing", "--script", str(script)],
            capture_output=True, text=True, timeout=20,
        )
        assert result.returncode == 2
        assert "replies[1].tool_calls[0]: a tool call needs a name" in result.stderr


class TestLiveLikeFlags:
    def test_tls_late_end_and_live_like_from_the_shell(self, tmp_path: Path) -> None:
        """--tls prints the certificate, --end-delay ends bodies late, --live-like mints ids."""
        script = tmp_path / "script.json"
        script.write_text(json.dumps([{"tool_calls": [{"name": "f", "arguments": {"a": 1, "b": 2}}]}]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowproof.testing", "--script", str(script), "--quiet", "--tls",
             "--end-delay", "30", "--live-like", "7"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip().removeprefix("listening on ")
            cert = proc.stdout.readline().strip().removeprefix("certificate ")
            assert url.startswith("https://127.0.0.1:") and Path(cert).is_file()
            result = close_after_terminal(url + "/v1/chat/completions",
                                          {"model": "m", "messages": [], "stream": True}, verify=cert)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
            proc.stdout.close()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]
        assert result.saw_terminal and not result.saw_end
        assert b'"id":"call_' in result.body and b"call_fake_" not in result.body
        chunks = [json.loads(line[6:]) for line in result.body.decode().splitlines()
                  if line.startswith("data: {")]
        arguments = "".join(call["function"].get("arguments", "") for chunk in chunks
                            for call in chunk["choices"][0]["delta"].get("tool_calls", []) if chunk["choices"])
        assert arguments == '{"b":2,"a":1}'
