"""Tests for flowproof.runner.env: CA creation, trust bundle, injected variables."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from flowproof.runner.env import (
    PLACEHOLDER_KEY,
    CAFiles,
    agent_env,
    default_ca_dir,
    ensure_ca,
    export_lines,
    no_proxy_value,
    placeholder_key_vars,
)
from flowproof.wire.providers import PROVIDERS, Provider, model_hosts


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class TestDefaultCaDir:
    def test_flowproof_ca_dir_wins(self) -> None:
        """$FLOWPROOF_CA_DIR takes precedence over XDG_DATA_HOME."""
        assert default_ca_dir({"FLOWPROOF_CA_DIR": "/x/ca", "XDG_DATA_HOME": "/y"}) == Path("/x/ca")

    def test_xdg_data_home(self) -> None:
        """$XDG_DATA_HOME/flowproof/ca is used when set."""
        assert default_ca_dir({"XDG_DATA_HOME": "/y"}) == Path("/y/flowproof/ca")

    def test_home_fallback(self) -> None:
        """Without either variable the CA lives under ~/.local/share."""
        assert default_ca_dir({}) == Path.home() / ".local/share/flowproof/ca"


class TestEnsureCa:
    def test_creates_private_dir_and_keys(self, ca_dir: Path, ca_files: CAFiles) -> None:
        """The CA dir is 0700 and every private-key file is 0600."""
        assert mode(ca_dir) == 0o700
        assert mode(ca_dir / "mitmproxy-ca.pem") == 0o600
        assert mode(ca_dir / "mitmproxy-ca.p12") == 0o600
        assert b"PRIVATE KEY" not in ca_files.cert.read_bytes()

    def test_bundle_is_roots_plus_ca(self, ca_files: CAFiles) -> None:
        """The bundle holds the system roots and ends with the flowproof CA."""
        bundle = ca_files.bundle.read_bytes()
        assert bundle.endswith(ca_files.cert.read_bytes())
        assert bundle.count(b"BEGIN CERTIFICATE") > 1

    def test_reuses_ca_and_leaves_bundle_untouched(self, ca_dir: Path, ca_files: CAFiles) -> None:
        """A second call keeps the same CA and does not rewrite an unchanged bundle."""
        key_before = (ca_dir / "mitmproxy-ca.pem").read_bytes()
        inode_before = ca_files.bundle.stat().st_ino
        again = ensure_ca(ca_dir)
        assert (ca_dir / "mitmproxy-ca.pem").read_bytes() == key_before
        assert again.bundle.stat().st_ino == inode_before

    def test_bundle_rewritten_when_roots_change(self, tmp_path: Path, ca_dir: Path, ca_files: CAFiles) -> None:
        """A different root file produces a new bundle atomically."""
        roots = tmp_path / "roots.pem"
        roots.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
        files = ensure_ca(ca_dir, roots=roots)
        assert files.bundle.read_bytes().startswith(roots.read_bytes())
        ensure_ca(ca_dir)  # restore for the other tests

    def test_unwritable_dir_is_a_clear_error(self, tmp_path: Path) -> None:
        """A CA dir that cannot be created raises CAError naming FLOWPROOF_CA_DIR."""
        blocker = tmp_path / "file"
        blocker.write_text("x")
        from flowproof.errors import CAError

        with pytest.raises(CAError, match="FLOWPROOF_CA_DIR"):
            ensure_ca(blocker / "ca")


class TestNoProxy:
    def test_drops_entries_covering_model_hosts(self) -> None:
        """Wildcards and suffixes of model hosts are removed, others kept, loopback added."""
        value = no_proxy_value("*,.openai.com,corp.internal,anthropic.com:443", ["api.openai.com", "api.anthropic.com"])
        assert value.split(",") == ["corp.internal", "localhost", "127.0.0.1", "::1"]

    def test_host_families_are_not_bypassed(self) -> None:
        """An Azure resource, Vertex region or a parent domain of either is dropped; a sibling is kept."""
        value = no_proxy_value(
            "res.openai.azure.com,azure.com,.googleapis.com,europe-west4-aiplatform.googleapis.com,"
            "blob.core.windows.net",
            [],
            [".openai.azure.com", "aiplatform.googleapis.com"],
        )
        assert value.split(",") == ["blob.core.windows.net", "localhost", "127.0.0.1", "::1"]


def _effective_key(env: dict[str, str], row: Provider) -> str | None:
    """The key the row's official client sends: the first variable, in the table's order, that holds one."""
    return next((env[var] for var in row.key_vars if env.get(var)), None)


class TestAgentEnv:
    def make(self, ca_files: CAFiles, **kw) -> dict[str, str]:
        base = kw.pop("base", {"PATH": "/bin", "NO_PROXY": "api.openai.com,intranet"})
        return agent_env(base, proxy_url="http://127.0.0.1:9999", ca=ca_files, **kw)

    def test_proxy_and_ca_variables(self, ca_files: CAFiles) -> None:
        """Proxy variables point at the proxy, replacing stores get the bundle, additive ones the CA."""
        env = self.make(ca_files)
        for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
            assert env[name] == "http://127.0.0.1:9999"
        assert env["SSL_CERT_FILE"] == env["REQUESTS_CA_BUNDLE"] == str(ca_files.bundle)
        assert env["NODE_EXTRA_CA_CERTS"] == str(ca_files.cert)
        assert env["NODE_USE_ENV_PROXY"] == "1"
        assert env["CLAUDE_CODE_MAX_RETRIES"] == "2"
        assert env["NO_PROXY"] == "intranet,localhost,127.0.0.1,::1"
        assert "ALL_PROXY" not in env
        assert "OPENAI_BASE_URL" not in env
        assert env["PATH"] == "/bin"

    def test_base_url_route(self, ca_files: CAFiles) -> None:
        """Route base_url points each SDK at its reverse listener."""
        env = self.make(
            ca_files,
            route="base_url",
            reverse_urls={"api.openai.com": "http://127.0.0.1:1", "api.anthropic.com": "http://127.0.0.1:2"},
        )
        assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:1/v1"
        assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:2"
        assert "GOOGLE_GEMINI_BASE_URL" not in env

    def test_placeholder_keys_only_when_missing(self, ca_files: CAFiles) -> None:
        """Replay fills missing keys with the placeholder and keeps the user's own."""
        env = self.make(ca_files, base={"OPENAI_API_KEY": "sk-user"}, placeholder_keys=True)
        assert env["OPENAI_API_KEY"] == "sk-user"
        assert env["ANTHROPIC_API_KEY"] == PLACEHOLDER_KEY
        assert "ANTHROPIC_API_KEY" not in self.make(ca_files, base={})

    @pytest.mark.parametrize(
        "user_entry",
        ["openrouter.ai", "api.openai.com", ".groq.com", "x.ai", "chatgpt.com", "*.mistral.ai",
         "my-res.openai.azure.com", "googleapis.com"],
    )
    def test_a_model_host_in_the_users_no_proxy_still_goes_through_the_proxy(
        self, ca_files: CAFiles, user_entry: str
    ) -> None:
        """No model host of the provider table bypasses the proxy, whatever NO_PROXY the user had.

        Checked with the standard library's own NO_PROXY reading (urllib), as a client would.
        """
        from urllib.request import proxy_bypass_environment

        env = self.make(ca_files, base={"NO_PROXY": f"intranet,{user_entry}", "no_proxy": user_entry})
        assert env["NO_PROXY"] == env["no_proxy"] == "intranet,localhost,127.0.0.1,::1"
        for host in [*model_hosts(), "my-res.openai.azure.com", "us-central1-aiplatform.googleapis.com"]:
            assert not proxy_bypass_environment(host, {"no": env["no_proxy"]}), host
        assert proxy_bypass_environment("intranet", {"no": env["no_proxy"]})

    def test_gateway_and_upstream_hosts_are_not_bypassed(self, ca_files: CAFiles) -> None:
        """A run's own model hosts (--upstream, --extra-host) are protected the same way."""
        env = self.make(ca_files, base={"NO_PROXY": "llm.corp,intranet"}, model_hosts=["llm.corp"])
        assert env["NO_PROXY"] == "intranet,localhost,127.0.0.1,::1"

    def test_base_url_route_covers_gemini(self, ca_files: CAFiles) -> None:
        """Every upstream of the table gets its base-URL variable when its listener exists."""
        env = self.make(ca_files, route="base_url",
                        reverse_urls={"generativelanguage.googleapis.com": "http://127.0.0.1:3/"})
        assert env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:3"
        assert "OPENAI_BASE_URL" not in env


    def test_user_retry_setting_is_kept(self, ca_files: CAFiles) -> None:
        """A CLAUDE_CODE_MAX_RETRIES the user set is not overridden."""
        assert self.make(ca_files, base={"CLAUDE_CODE_MAX_RETRIES": "7"})["CLAUDE_CODE_MAX_RETRIES"] == "7"

    def test_export_lines_quote_values(self) -> None:
        """Only changed variables are exported, shell-quoted."""
        lines = export_lines({"A": "1", "B": "x y"}, {"A": "1"})
        assert lines == ["export B='x y'"]


class TestPlaceholderKeys:
    """A placeholder never shadows a key the user set under another name the client reads."""

    def make(self, ca_files: CAFiles, base: dict[str, str], **kw) -> dict[str, str]:
        return agent_env(base, proxy_url="http://127.0.0.1:9999", ca=ca_files,
                         placeholder_keys=True, **kw)

    def test_only_gemini_api_key_reaches_google_genai(self, ca_files: CAFiles) -> None:
        """google-genai reads GOOGLE_API_KEY first: with only GEMINI_API_KEY set, it stays unset."""
        env = self.make(ca_files, {"GEMINI_API_KEY": "AIza-user"})
        assert "GOOGLE_API_KEY" not in env
        assert env["GEMINI_API_KEY"] == "AIza-user"

    def test_an_anthropic_auth_token_is_not_shadowed(self, ca_files: CAFiles) -> None:
        """The anthropic SDK prefers ANTHROPIC_API_KEY: none is invented beside the user's token."""
        env = self.make(ca_files, {"ANTHROPIC_AUTH_TOKEN": "user-token"})
        assert "ANTHROPIC_API_KEY" not in env

    def test_an_openai_key_is_not_shadowed_for_codex(self, ca_files: CAFiles) -> None:
        """Codex reads CODEX_API_KEY first: a user's OPENAI_API_KEY gets no placeholder beside it."""
        env = self.make(ca_files, {"OPENAI_API_KEY": "sk-user"})
        assert "CODEX_API_KEY" not in env
        assert env["OPENAI_API_KEY"] == "sk-user"

    def test_no_key_at_all_gets_every_placeholder(self, ca_files: CAFiles) -> None:
        """Without any key every placeholder variable gets the placeholder (SDKs insist on one).

        The set is the one flowproof always filled; login tokens are never invented.
        """
        env = self.make(ca_files, {"GEMINI_API_KEY": ""})
        filled = {name for name, value in env.items() if value == PLACEHOLDER_KEY}
        assert filled == {"OPENAI_API_KEY", "CODEX_API_KEY", "ANTHROPIC_API_KEY",
                          "GOOGLE_API_KEY", "GEMINI_API_KEY"}

    def test_a_claude_code_login_token_is_not_shadowed(self, ca_files: CAFiles) -> None:
        """An ANTHROPIC_API_KEY placeholder would override Claude Code's own login token."""
        env = self.make(ca_files, {"CLAUDE_CODE_OAUTH_TOKEN": "user-oauth"})
        assert "ANTHROPIC_API_KEY" not in env

    @pytest.mark.parametrize(
        ("row", "var"),
        [(row, var) for row in PROVIDERS for var in row.key_vars],
        ids=lambda item: item if isinstance(item, str) else item.name,
    )
    def test_the_users_key_is_the_one_each_client_sends(
        self, ca_files: CAFiles, row: Provider, var: str
    ) -> None:
        """Whichever variable holds the user's key, the client's first choice is still that key."""
        env = self.make(ca_files, {var: "user-key"})
        assert _effective_key(env, row) == "user-key"
        assert set(placeholder_key_vars({var: "user-key"})).isdisjoint(row.key_vars)

    def test_a_key_in_the_spec_env_counts_as_the_users(self, ca_files: CAFiles) -> None:
        """`agent.env` (overrides) is applied last and is seen when placeholders are chosen."""
        env = self.make(ca_files, {}, overrides={"GEMINI_API_KEY": "AIza-spec"})
        assert "GOOGLE_API_KEY" not in env
        assert env["GEMINI_API_KEY"] == "AIza-spec"
        assert env["OPENAI_API_KEY"] == PLACEHOLDER_KEY

    def test_no_placeholders_unless_asked(self, ca_files: CAFiles) -> None:
        """Record against real providers gets no placeholder at all."""
        env = agent_env({}, proxy_url="http://127.0.0.1:9999", ca=ca_files)
        assert not [name for name, value in env.items() if value == PLACEHOLDER_KEY]
