"""The provider table: complete for every codec, the only list of model hosts, and true to the SDKs."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from flowproof.options import REVERSE_HOSTS
from flowproof.redact import ALLOWED_HEADERS, filter_headers
from flowproof.spec import volatile_refusal
from flowproof.wire import CODEC_NAMES, codec_by_name, detect, is_model_host
from flowproof.wire.providers import (
    PROVIDERS,
    Provider,
    allowed_headers,
    base_url_path,
    base_url_vars,
    conversation_vocabulary,
    genai_provider,
    model_host_suffixes,
    model_hosts,
    provider,
    reverse_hosts,
)

PACKAGE = Path(__file__).resolve().parents[2] / "flowproof"

#: Fields a row may leave empty, and why (the reason is the test id).
MAY_BE_EMPTY = {
    "host_suffixes": "only Azure and Vertex are host families",
    "system_roots": "chat completions carries the system prompt inside messages",
    "model_roots": "gemini names the model in the URL path",
    "base_url_aliases": "only the Vercel AI SDK's anthropic path differs from the API's own",
    "cache_ignored_keys": "only Anthropic marks cache breakpoints inside the cached prefix",
    "genai_hosts": "Anthropic's API is served under its own provider name only",
}


class TestEveryCodecDeclaresEveryField:
    def test_one_row_per_codec_in_detection_order(self) -> None:
        """The table and the codec registry name the same providers, in the same order."""
        assert tuple(p.name for p in PROVIDERS) == CODEC_NAMES
        for row in PROVIDERS:
            assert codec_by_name(row.name).name == row.name
            assert provider(row.name) is row

    @pytest.mark.parametrize("row", PROVIDERS, ids=lambda p: p.name)
    def test_fields_are_declared(self, row: Provider) -> None:
        """Every field holds strings (no duplicates), and only the documented ones may be empty."""
        for field in dataclasses.fields(Provider):
            value = getattr(row, field.name)
            if field.name in ("name", "base_url_host", "family", "sdk_key_var", "genai_provider", "genai_operation"):
                assert isinstance(value, str) and value, field.name
                continue
            assert isinstance(value, tuple), field.name
            if field.name not in MAY_BE_EMPTY:
                assert value, f"{row.name} declares no {field.name}"
            assert len(set(value)) == len(value), f"{row.name}.{field.name} repeats an entry"
        assert set(row.placeholder_vars) <= set(row.key_vars)
        assert row.sdk_key_var in row.key_vars

    def test_the_empty_fields_are_the_expected_ones(self) -> None:
        """Emptiness is a fact about one API, not an omission: each exception is where the docs say."""
        empty = {(p.name, f.name) for p in PROVIDERS for f in dataclasses.fields(Provider)
                 if getattr(p, f.name) == ()}
        assert empty == {
            ("anthropic", "host_suffixes"),
            ("gemini", "model_roots"),
            ("openai-chat", "system_roots"),
            ("openai-chat", "base_url_aliases"),
            ("openai-responses", "base_url_aliases"),
            ("gemini", "base_url_aliases"),
            ("openai-chat", "cache_ignored_keys"),
            ("openai-responses", "cache_ignored_keys"),
            ("gemini", "cache_ignored_keys"),
            ("anthropic", "genai_hosts"),
        }

    def test_the_genai_names_are_the_conventions_well_known_values(self) -> None:
        """gen_ai.provider.name and gen_ai.operation.name take the values the GenAI semantic
        conventions list (docs/otel.md), checked against the installed conventions package."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the registry marks the GenAI enums as moved
            from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
                GenAiOperationNameValues,
                GenAiProviderNameValues,
            )
        providers = {v.value for v in GenAiProviderNameValues}
        operations = {v.value for v in GenAiOperationNameValues}
        for row in PROVIDERS:
            assert row.genai_provider in providers and row.genai_operation in operations, row.name
            assert {named for _host, named in row.genai_hosts} <= providers, row.name
            assert all(any(host.endswith(h.lstrip(".")) for h in (*row.hosts, *row.host_suffixes))
                       for host, _ in row.genai_hosts), f"{row.name} names a host it does not serve"

    def test_a_call_is_named_by_its_host_first(self) -> None:
        assert genai_provider("openai-chat") == "openai"
        assert genai_provider("openai-chat", "API.Mistral.ai") == "mistral_ai"
        assert genai_provider("openai-responses", "me.openai.azure.com") == "azure.ai.openai"
        assert genai_provider("openai-chat", "openrouter.ai") == "openai"  # no name of its own
        assert genai_provider("anthropic", "api.anthropic.com") == "anthropic"

    @pytest.mark.parametrize("row", PROVIDERS, ids=lambda p: p.name)
    def test_the_cache_order_is_made_of_the_rows_own_roots(self, row: Provider) -> None:
        """The cache-prefix rule reads tools, system and conversation roots, and ends with the
        conversation: only its last root may grow between two requests."""
        roots = {*row.tool_roots, *row.system_roots, *row.message_roots}
        assert set(row.cache_order) <= roots
        assert row.cache_order[-1] in row.message_roots
        assert row.cache_order[0] in row.tool_roots

    @pytest.mark.parametrize("row", PROVIDERS, ids=lambda p: p.name)
    def test_headers_are_lowercase_and_never_credentials(self, row: Provider) -> None:
        """The allow-list can never keep a credential, whatever a row adds."""
        for header in row.allowed_headers:
            assert header == header.lower()
            assert "key" not in header and "auth" not in header and "cookie" not in header
            assert "token" not in header


class TestDetectionReadsTheTable:
    @pytest.mark.parametrize("row", PROVIDERS, ids=lambda p: p.name)
    def test_every_host_and_path_is_detected_as_its_codec(self, row: Provider) -> None:
        """Each official path on each declared host is a model call of that row's codec."""
        for host in row.hosts:
            assert is_model_host(host)
            for path in row.paths:
                codec = detect("POST", host, path.replace("{model}", "some-model"))
                assert codec is not None and codec.name == row.name, (host, path)

    @pytest.mark.parametrize("row", PROVIDERS, ids=lambda p: p.name)
    def test_every_base_url_alias_stands_for_one_of_the_row_s_own_paths(self, row: Provider) -> None:
        """An alias is a path the codec would not take by itself; what it stands for is one it
        takes, on the row's base-URL upstream."""
        for alias, api_path in row.base_url_aliases:
            assert api_path in row.paths, (alias, api_path)
            assert detect("POST", row.base_url_host, alias) is None
            assert base_url_path(row.base_url_host, alias) == api_path
            assert base_url_path(row.base_url_host, alias + "/") == api_path
            assert base_url_path("elsewhere.example", alias) is None

    def test_the_ai_sdk_s_anthropic_path_is_an_alias(self) -> None:
        assert base_url_path("api.anthropic.com", "/messages") == "/v1/messages"
        assert base_url_path("api.anthropic.com", "/v1/messages") is None
        assert base_url_path("api.openai.com", "/messages") is None

    @pytest.mark.parametrize("row", PROVIDERS, ids=lambda p: p.name)
    def test_path_suffixes_on_an_extra_host(self, row: Provider) -> None:
        """On an --extra-host gateway, any POST ending with a declared suffix is that API."""
        for suffix in row.path_suffixes:
            path = "/gateway/some-model" + suffix
            codec = detect("POST", "gw.corp.example", path, ["gw.corp.example"])
            assert codec is not None and codec.name == row.name, suffix

    def test_host_families(self) -> None:
        """A host of a declared family is a model host; the family's parent domain alone is not."""
        assert model_host_suffixes() == (".openai.azure.com", "aiplatform.googleapis.com")
        assert is_model_host("my-resource.openai.azure.com")
        assert is_model_host("us-central1-aiplatform.googleapis.com")
        assert not is_model_host("azure.com")

    def test_reverse_hosts_are_one_listener_per_upstream(self) -> None:
        """The base-URL route opens one listener per distinct upstream, in table order."""
        assert REVERSE_HOSTS == reverse_hosts()
        assert len(set(REVERSE_HOSTS)) == len(REVERSE_HOSTS) == 3
        assert {host for host, _ in base_url_vars()} == set(REVERSE_HOSTS)
        assert [var.name for _, var in base_url_vars()] == [
            "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL"]


class TestReadersDeriveFromTheTable:
    def test_cassette_allow_list_is_the_table(self) -> None:
        """The cassette keeps exactly the union of every row's headers."""
        assert ALLOWED_HEADERS == allowed_headers()
        kept = filter_headers({"x-goog-api-version": "v1beta", "x-goog-api-key": "AIza-secret",
                               "anthropic-beta": "b", "authorization": "Bearer x"})
        assert kept == {"anthropic-beta": "b", "x-goog-api-version": "v1beta"}

    def test_vocabulary_is_what_the_refusal_list_always_refused(self) -> None:
        """Moving the vocabulary into the table changed no refusal."""
        vocabulary = conversation_vocabulary()
        assert vocabulary.message_roots == {"messages", "input", "contents"}
        assert vocabulary.system_roots == {"system", "instructions", "systemInstruction",
                                           "system_instruction"}
        assert vocabulary.tool_roots == {"tools", "functions"}
        assert vocabulary.model_roots == {"model"}
        assert vocabulary.content_keys == {
            "content", "parts", "text", "output", "input", "arguments", "args", "tool_calls",
            "function", "function_call", "functionCall", "functionResponse", "function_response",
            "response", "result", "role", "name", "thinking", "summary", "type", "source", "data",
        }

    @pytest.mark.parametrize("row", PROVIDERS, ids=lambda p: p.name)
    def test_the_spec_loader_refuses_every_rows_roots(self, row: Provider) -> None:
        """A blanking rule on any row's tools, model, system prompt or message is refused."""
        for root in row.tool_roots:
            assert volatile_refusal((root, "0", "description"), True) == "the tool list"
        for root in row.model_roots:
            assert volatile_refusal((root,), True) == "the model"
        for root in row.system_roots:
            assert volatile_refusal((root,), False) == "a whole system prompt"
        for root in row.message_roots:
            assert volatile_refusal((root, "0", row.content_keys[0]), False) == "a whole message"


def _string_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


class TestTheHostListExistsOnce:
    def test_no_provider_host_literal_outside_the_table(self) -> None:
        """No module but the table spells a model host as a value (prose and examples may name one).

        The fake model server is exempt by design: it is an independent oracle for the codecs.
        """
        needles = {*model_hosts(), *model_host_suffixes()}
        table = PACKAGE / "wire" / "providers.py"
        found = []
        for path in sorted(PACKAGE.rglob("*.py")):
            relative = path.relative_to(PACKAGE)
            if path == table or relative.parts[0] in ("testing", "testing.py"):
                continue
            for line, value in _string_literals(path):
                if value.strip().lower() in needles:
                    found.append(f"flowproof/{relative}:{line}: {value!r}")
        assert found == []

    def test_the_check_sees_a_host_list(self, tmp_path: Path) -> None:
        """The literal scan above finds a host tuple like the ones this table replaced."""
        sample = tmp_path / "m.py"
        sample.write_text('HOSTS = ("api.openai.com", "openrouter.ai")\n"""api.openai.com docs"""\n')
        assert [v for _, v in _string_literals(sample) if v in model_hosts()] == [
            "api.openai.com", "openrouter.ai"]


class TestKeyOrderMatchesTheSdks:
    """The table's key order is the order the installed official clients read the variables."""

    def test_google_genai_reads_google_api_key_first(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from google.genai import Client

        first, second = provider("gemini").key_vars
        monkeypatch.setenv(first, "first-key")
        monkeypatch.setenv(second, "second-key")
        assert Client()._api_client.api_key == "first-key"
        monkeypatch.delenv(first)
        assert Client()._api_client.api_key == "second-key"

    def test_anthropic_prefers_the_api_key_over_the_auth_token(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import anthropic

        first, second, *_ = provider("anthropic").key_vars
        monkeypatch.setenv(first, "first-key")
        monkeypatch.setenv(second, "second-token")
        client = anthropic.Anthropic()
        assert (client.api_key, client.auth_token) == ("first-key", None)
        monkeypatch.delenv(first)
        assert anthropic.Anthropic().auth_token == "second-token"

    def test_openai_sdk_reads_its_variable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import openai

        assert "OPENAI_API_KEY" in provider("openai-chat").key_vars
        assert provider("openai-chat").key_vars == provider("openai-responses").key_vars
        monkeypatch.setenv("OPENAI_API_KEY", "sk-table")
        assert openai.OpenAI().api_key == "sk-table"

    def test_base_url_variables_are_the_ones_the_sdks_read(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import anthropic
        import openai
        from google.genai import Client

        for _, var in base_url_vars():
            monkeypatch.setenv(var.name, "http://127.0.0.1:9" + var.suffix)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("GEMINI_API_KEY", "k")
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
        assert str(openai.OpenAI().base_url) == "http://127.0.0.1:9/v1/"
        assert str(anthropic.Anthropic().base_url) == "http://127.0.0.1:9"
        assert Client()._api_client._http_options.base_url.rstrip("/") == "http://127.0.0.1:9"
