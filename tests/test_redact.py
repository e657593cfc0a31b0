"""Redaction: the header allow-list and URLs without credentials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowproof.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
    save_cassette,
)
from flowproof.redact import (
    ALLOWED_HEADERS,
    REDACTED,
    filter_headers,
    is_secret_name,
    masked_url,
    redact_fields,
    redact_text,
    redact_url,
    secret_values,
)
from flowproof.request_key import body_sha256


def chat_body(text: str = "hi") -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


SECRETS = {
    "authorization": "Bearer sk-SECRET-authorization",
    "x-api-key": "sk-ant-SECRET-x-api-key",
    "api-key": "SECRET-azure-api-key",
    "x-goog-api-key": "SECRET-goog-key",
    "cookie": "session=SECRET-cookie",
    "set-cookie": "sid=SECRET-set-cookie",
    "proxy-authorization": "Basic SECRET-proxy",
    "statsig-api-key": "SECRET-statsig",
    "openai-organization": "org-SECRET-org",
    "openai-project": "proj_SECRET-project",
    "x-claude-code-session-id": "SECRET-session-id",
}


class TestRedaction:
    def test_filter_headers_keeps_only_the_allow_list(self):
        """filter_headers keeps allow-listed headers lowercased and drops every secret."""
        headers = [
            ("Content-Type", "application/json"),
            ("Anthropic-Beta", "a"),
            ("anthropic-beta", "b"),
        ]
        headers += list(SECRETS.items())
        assert filter_headers(headers) == {
            "anthropic-beta": "a, b",
            "content-type": "application/json",
        }

    def test_filter_headers_accepts_a_mapping(self):
        """filter_headers accepts a mapping as well as pairs."""
        assert filter_headers({"OpenAI-Beta": "assistants=v2", "Authorization": "Bearer x"}) == {
            "openai-beta": "assistants=v2"
        }

    def test_content_encoding_is_kept_on_requests_only(self):
        """A request's content-encoding says how its (decoded, stored) body travelled; a stored
        response is decoded, so its encoding must not be replayed with it."""
        headers = {"Content-Encoding": "zstd", "content-type": "application/json"}
        assert filter_headers(headers, request=True) == {"content-encoding": "zstd", "content-type": "application/json"}
        assert filter_headers(headers) == {"content-type": "application/json"}

    def test_allow_list_holds_no_secret_header(self):
        """No header name that carries a secret is on the allow-list."""
        assert not ALLOWED_HEADERS & set(SECRETS)
        assert not [
            h for h in ALLOWED_HEADERS if h.endswith("-key") or "auth" in h or "cookie" in h
        ]

    @pytest.mark.parametrize(
        ("url", "expected"),
        [
            pytest.param(
                "https://g.example/v1beta/models/m:streamGenerateContent?alt=sse&key=SECRET",
                "https://g.example/v1beta/models/m:streamGenerateContent?alt=sse",
                id="gemini-key",
            ),
            pytest.param(
                "https://x.example/p?a=1&API-KEY=s&Token=s&access_token=s&b=2&sig=s&signature=s"
                "&code=s&client_secret=s&api_key=s&apikey=s&c=3",
                "https://x.example/p?a=1&b=2&c=3",
                id="case-insensitive",
            ),
            pytest.param(
                "https://x.example/p?beta=true", "https://x.example/p?beta=true", id="kept"
            ),
            pytest.param("https://user:pw@x.example/p?key=s", "https://x.example/p", id="userinfo"),
            pytest.param(
                "https://x.example/p?q=a%20b&x_api_key=s",
                "https://x.example/p?q=a%20b",
                id="suffix",
            ),
        ],
    )
    def test_redact_url_drops_key_bearing_params(self, url, expected):
        """redact_url drops credentials and keeps other parameters in order and encoding."""
        assert redact_url(url) == expected

    def test_no_secret_reaches_the_saved_file(self, tmp_path: Path):
        """A turn built from a request with every secret header and a ?key= URL saves none of them."""
        request_headers = {"content-type": "application/json", **SECRETS}
        url = "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?key=SECRET-query-key"
        body = chat_body()
        turn = RecordedTurn(
            index=0,
            provider="gemini",
            request=RecordedRequest(
                "POST",
                redact_url(url),
                filter_headers(request_headers),
                body_sha256(json.dumps(body).encode()),
                body,
            ),
            response=RecordedResponse(
                200,
                filter_headers(
                    {"content-type": "application/json", "set-cookie": SECRETS["set-cookie"]}
                ),
                body={"ok": True},
            ),
        )
        path = tmp_path / "c.json"
        save_cassette(Cassette((turn,)), path)
        text = path.read_text()
        assert "SECRET" not in text
        for value in SECRETS.values():
            assert value not in text


class TestMaskedUrl:
    @pytest.mark.parametrize(("url", "shown"), [
        ("http://h:1/v1?key=sk-1", "http://h:1/v1?…"),
        ("https://u:pw@h/p#frag", "https://…@h/p#…"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://[::1", "<an unparsable URL>"),
    ])
    def test_masks_query_userinfo_fragment(self, url: str, shown: str) -> None:
        """A URL in a message about a setting shows none of the parts that may hold a key."""
        assert masked_url(url) == shown


class TestLogRedaction:
    """What `flowproof.log` applies to every event before it is rendered."""

    @pytest.mark.parametrize(
        "name",
        ["Authorization", "proxy-authorization", "Cookie", "x-api-key", "x-goog-api-key", "api_key",
         "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
         "client_secret"],
    )
    def test_credential_names(self, name: str) -> None:
        assert is_secret_name(name)

    @pytest.mark.parametrize("name", ["model", "provider", "turn", "ms", "outcome", "HOME", "PATH", "flow"])
    def test_ordinary_names(self, name: str) -> None:
        assert not is_secret_name(name)

    def test_secret_values_are_the_long_values_of_credential_variables(self) -> None:
        env = {"OPENAI_API_KEY": "sk-live-abcdef", "X_TOKEN": "short", "PATH": "/usr/bin:/bin-long"}
        assert secret_values(env) == frozenset({"sk-live-abcdef"})

    def test_text_loses_secret_values_auth_credentials_and_url_keys(self) -> None:
        text = redact_text(
            "call to https://user:pw@g.example/v1/m:gen?alt=sse&key=K1 failed (Bearer tok-123456789); "
            "env had sk-live-abcdef and sk-live-abcdef-longer",
            ["sk-live-abcdef", "sk-live-abcdef-longer"],
        )
        for secret in ("K1", "tok-123456789", "sk-live-abcdef", "user:pw"):
            assert secret not in text
        assert "https://g.example/v1/m:gen?alt=sse" in text
        assert text.count(REDACTED) == 3  # the Bearer credential and both env values, each whole

    def test_an_unparseable_url_is_masked_whole(self) -> None:
        assert redact_text("see http://[bad/x?key=K1") == f"see {REDACTED}"

    def test_fields_mask_by_name_filter_headers_and_recurse(self) -> None:
        fields = {
            "event": "model_call",
            "x-api-key": "K2",
            "headers": {"Authorization": "Bearer K3", "Content-Type": "application/json"},
            "calls": [{"url": "https://h.example/p?token=K4"}, ("Bearer K5-long-enough",)],
            "turn": 3,
            "ms": 1.5,
        }
        out = redact_fields(fields)
        assert out == {
            "event": "model_call",
            "x-api-key": REDACTED,
            "headers": {"content-type": "application/json"},
            "calls": [{"url": "https://h.example/p"}, [f"Bearer {REDACTED}"]],
            "turn": 3,
            "ms": 1.5,
        }
        assert fields["x-api-key"] == "K2"  # a copy: the caller's dict is untouched
