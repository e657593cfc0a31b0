"""The codec registry: detect(), codec_by_name(), model hosts."""

from __future__ import annotations

import pytest

from flowproof.errors import WireError
from flowproof.wire import (
    CODEC_NAMES,
    MODEL_HOSTS,
    available_codecs,
    codec_by_name,
    detect,
    is_model_host,
    normalize_host,
)


def _name(method: str, host: str, path: str, extra: tuple[str, ...] = ()) -> str | None:
    codec = detect(method, host, path, extra)
    return None if codec is None else codec.name


class TestDetectOpenAI:
    @pytest.mark.parametrize(
        ("host", "path"),
        [
            ("api.openai.com", "/v1/chat/completions"),
            ("my-res.openai.azure.com", "/openai/deployments/gpt4o/chat/completions"),
            ("openrouter.ai", "/api/v1/chat/completions"),
            ("api.groq.com", "/openai/v1/chat/completions"),
            ("127.0.0.1:11434", "/v1/chat/completions"),
            ("litellm.internal", "/chat/completions"),
        ],
        ids=["openai", "azure", "openrouter", "groq", "ollama", "litellm"],
    )
    def test_chat_completions_on_any_host(self, host: str, path: str) -> None:
        """Any POST ending in /chat/completions is a chat completion call."""
        assert _name("POST", host, path) == "openai-chat"

    @pytest.mark.parametrize(
        ("host", "path"),
        [
            ("api.openai.com", "/v1/responses"),
            ("127.0.0.1:8000", "/v1/responses"),
            ("openrouter.ai", "/api/v1/responses"),
            ("my-res.openai.azure.com", "/openai/responses"),
        ],
        ids=["openai", "local", "openrouter", "azure"],
    )
    def test_responses(self, host: str, path: str) -> None:
        """POST /v1/responses (and Azure's /openai/responses) is a Responses call."""
        assert _name("POST", host, path) == "openai-responses"

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", "/v1/responses/resp_123"),
            ("POST", "/v1/responses/resp_123/cancel"),
            ("POST", "/v1/responses/input_tokens"),
            ("GET", "/v1/responses"),
            ("GET", "/v1/models"),
            ("POST", "/v1/traces/ingest"),
            ("POST", "/v1/embeddings"),
            ("GET", "/v1/chat/completions"),
        ],
    )
    def test_non_model_calls_are_not_detected(self, method: str, path: str) -> None:
        """Retrieval, cancel, token counting, traces and GETs are not model calls."""
        assert detect(method, "api.openai.com", path) is None

    def test_query_string_is_ignored(self) -> None:
        """A path passed with its query still detects (Azure adds ?api-version=)."""
        assert _name(
            "POST",
            "x.openai.azure.com",
            "/openai/deployments/d/chat/completions?api-version=2024-10-21",
        ) == "openai-chat"

    def test_method_is_case_insensitive(self) -> None:
        """A lowercase method is still a POST."""
        assert _name("post", "api.openai.com", "/v1/chat/completions") == "openai-chat"


class TestDetectOtherProviders:
    def test_anthropic_messages(self) -> None:
        """POST /v1/messages is an Anthropic call, count_tokens is not."""
        assert _name("POST", "api.anthropic.com", "/v1/messages") == "anthropic"
        assert detect("POST", "api.anthropic.com", "/v1/messages/count_tokens") is None

    def test_anthropic_non_model_paths(self) -> None:
        """Claude Code's /api/... traffic is never a model call."""
        assert detect("POST", "api.anthropic.com", "/api/event_logging/batch") is None
        assert detect("GET", "api.anthropic.com", "/api/claude_code/settings") is None

    @pytest.mark.parametrize(
        "path",
        [
            "/v1beta/models/gemini-2.0-flash:generateContent",
            "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
            "/v1/models/gemini-2.0-flash:generateContent",
        ],
    )
    def test_gemini(self, path: str) -> None:
        """Gemini generateContent and streamGenerateContent are Gemini calls."""
        assert _name("POST", "generativelanguage.googleapis.com", path) == "gemini"


class TestExtraHosts:
    def test_unusual_paths_need_an_extra_host(self) -> None:
        """A gateway's /gw/responses is a model call only once its host is declared."""
        assert detect("POST", "gw.corp", "/gw/responses") is None
        assert _name("POST", "gw.corp", "/gw/responses", ("gw.corp",)) == "openai-responses"

    def test_extra_host_with_port_and_case(self) -> None:
        """Extra hosts compare without port and case."""
        assert _name("POST", "GW.corp:8443", "/x/chat/completions/", ("gw.corp",)) == "openai-chat"

    def test_extra_host_still_needs_a_known_suffix(self) -> None:
        """Other paths on an extra host are not model calls."""
        assert detect("POST", "gw.corp", "/gw/telemetry", ("gw.corp",)) is None
        assert detect("GET", "gw.corp", "/gw/responses", ("gw.corp",)) is None

    def test_extra_host_messages(self) -> None:
        """An extra host's /…/messages is an Anthropic call."""
        assert _name("POST", "gw.corp", "/claude/messages", ("gw.corp",)) == "anthropic"


class TestCodecByName:
    def test_every_available_codec_round_trips_its_name(self) -> None:
        """codec_by_name(c.name) returns c for each available codec."""
        codecs = available_codecs()
        assert [c.name for c in codecs][:2] == ["openai-chat", "openai-responses"]
        for codec in codecs:
            assert codec.name in CODEC_NAMES
            assert codec_by_name(codec.name) is codec

    def test_unknown_name_is_a_wire_error(self) -> None:
        """An unknown provider name raises WireError listing the known ones."""
        with pytest.raises(WireError, match="openai-chat"):
            codec_by_name("cohere")


class TestModelHosts:
    @pytest.mark.parametrize(
        "host",
        [
            "api.openai.com",
            "API.OpenAI.com:443",
            "api.anthropic.com",
            "generativelanguage.googleapis.com",
            "openrouter.ai",
            "api.groq.com",
            "myres.openai.azure.com",
            "api.openai.com.",
        ],
    )
    def test_known_model_hosts(self, host: str) -> None:
        """The well-known provider hosts are model hosts, whatever the case or port."""
        assert is_model_host(host)

    def test_other_hosts(self) -> None:
        """Other hosts are not model hosts unless declared extra."""
        assert not is_model_host("api.github.com")
        assert not is_model_host("openai.azure.com.evil.example")
        assert is_model_host("gw.corp:8080", ["gw.corp"])

    def test_model_hosts_is_frozen(self) -> None:
        """MODEL_HOSTS is an immutable set holding the OpenAI host."""
        assert isinstance(MODEL_HOSTS, frozenset) and "api.openai.com" in MODEL_HOSTS

    @pytest.mark.parametrize(
        ("raw", "bare"),
        [
            ("Api.OpenAI.com:443", "api.openai.com"),
            ("[::1]:8080", "[::1]"),
            ("localhost.", "localhost"),
        ],
    )
    def test_normalize_host(self, raw: str, bare: str) -> None:
        """normalize_host drops the port, the case and a trailing dot."""
        assert normalize_host(raw) == bare
