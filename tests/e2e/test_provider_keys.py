"""Placeholder keys never shadow the user's own, end to end: flowproof-run --upstream -> real
mitmdump -> a google-genai streaming agent on the proxy route -> the fake model."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from flowproof.testing import FakeModelServer, Reply

from .conftest import Flowproof, write_spec

Fake = Callable[..., FakeModelServer]

#: Clearly fake, and distinct from every other key in the suite.
GEMINI_KEY = "AIza-e2e-user-gemini-key-0815"

AGENT = '''\
import os
import sys

from google import genai

prompt = os.environ["FLOWPROOF_PROMPT"]
client = genai.Client()
text = "".join(chunk.text or "" for chunk in client.models.generate_content_stream(
    model="gemini-2.5-flash", contents=prompt))
print(text)
'''


class TestGeminiKeyReachesTheUpstream:
    def test_only_gemini_api_key_set(self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake) -> None:
        """With only GEMINI_API_KEY set, google-genai sends the user's key, not a placeholder.

        google-genai reads GOOGLE_API_KEY first; a placeholder there would shadow the key.
        """
        (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
        spec = write_spec(tmp_path / "gemini.flow.yaml", "\n".join([
            "name: gemini agent answers",
            "agent:",
            f"  command: {sys.executable} agent.py",
            "steps:",
            "  - prompt: Say hello",
            "  - assert: reply contains hello",
        ]) + "\n")
        server = fake_model([Reply.text("hello from the fake gemini")])
        ran = flowproof.run(spec, "--upstream", f"generativelanguage.googleapis.com={server.url}",
                            "--record", GEMINI_API_KEY=GEMINI_KEY)
        assert ran.code == 0, ran.failure
        requests = server.model_requests
        assert [r.api for r in requests] == ["gemini"]
        assert requests[0].headers.get("x-goog-api-key") == GEMINI_KEY
        cassette = tmp_path / "gemini.cassette.json"
        assert "gemini-2.5-flash" in cassette.read_text(encoding="utf-8")
        assert GEMINI_KEY not in cassette.read_text(encoding="utf-8")
        assert GEMINI_KEY not in ran.stdout and GEMINI_KEY not in ran.stderr
