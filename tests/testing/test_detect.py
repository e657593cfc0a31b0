"""Tests for flowproof.testing.detect: which API a request is, and its lane key."""

from __future__ import annotations

import pytest

from flowproof.testing.detect import detect_api, system_prompt


class TestDetectApi:
    @pytest.mark.parametrize(
        ("path", "api"),
        [
            ("/v1/chat/completions", "openai-chat"),
            ("/openai/v1/responses", "openai-responses"),
            ("/v1/messages", "anthropic"),
            ("/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
            ("/v1/models/gemini-2.5-flash:streamGenerateContent", "gemini"),
            ("/v1/models", None),
        ],
    )
    def test_post_paths(self, path: str, api: str | None) -> None:
        """Each model endpoint is recognised by its path; anything else is None."""
        assert detect_api("POST", path) == api

    def test_only_post_is_a_model_call(self) -> None:
        """A GET on a model path is not a model call."""
        assert detect_api("GET", "/v1/chat/completions") is None


class TestSystemPrompt:
    def test_each_api_has_its_own_place(self) -> None:
        """The lane key is read from each API's own system field."""
        assert system_prompt("openai-chat", {"messages": [
            {"role": "system", "content": "A"}, {"role": "developer", "content": [{"text": "B"}]},
            {"role": "user", "content": "not me"}]}) == "A\nB"
        assert system_prompt("openai-responses", {"instructions": "I", "input": [
            {"role": "developer", "content": "D"}]}) == "I\nD"
        assert system_prompt("anthropic", {"system": [{"type": "text", "text": "S"}]}) == "S"
        assert system_prompt("gemini", {"systemInstruction": {"parts": [{"text": "G"}]}}) == "G"
        assert system_prompt("gemini", {"system_instruction": "g"}) == "g"

    def test_not_an_object_has_none(self) -> None:
        """A body that is not an object has no system prompt."""
        assert system_prompt("anthropic", ["x"]) == ""
