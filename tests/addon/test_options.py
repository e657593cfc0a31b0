"""Parsing the addon's options into an AddonConfig (no mitmproxy involved)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowproof.addon.options import Mode, Upstream, build_config, load_handler, parse_upstream


class TestParseUpstream:
    def test_host_and_url(self):
        """A HOST=URL map parses into a normalized host and its target."""
        assert parse_upstream("API.OpenAI.com=http://127.0.0.1:8000") == (
            "api.openai.com", Upstream("http", "127.0.0.1", 8000, ""))

    def test_path_prefix_and_default_port(self):
        """A path prefix is kept without its trailing slash and https defaults to 443."""
        assert parse_upstream("api.anthropic.com=https://gw.example/llm/") == (
            "api.anthropic.com", Upstream("https", "gw.example", 443, "/llm"))

    @pytest.mark.parametrize("value", ["nohost", "=http://x", "h=ftp://x", "h=http://", "h=http://x:99999",
                                       "h=http://x/?q=1"], ids=["no-eq", "no-host", "scheme", "no-url-host",
                                                                "bad-port", "query"])
    def test_bad_values_raise_value_error(self, value: str):
        """Malformed maps raise ValueError with a reason."""
        with pytest.raises(ValueError):
            parse_upstream(value)


class TestLoadHandler:
    def test_imports_a_function(self):
        """module:function imports the callable."""
        assert load_handler("json:dumps") is __import__("json").dumps

    @pytest.mark.parametrize("value", ["json", "json:", "no_such_mod_q:f", "json:nope", "json:decoder"])
    def test_bad_handlers_raise_value_error(self, value: str):
        """A malformed, missing or non-callable handler raises ValueError."""
        with pytest.raises(ValueError):
            load_handler(value)


class TestBuildConfig:
    def test_defaults_are_replay_with_identity_normalizer(self):
        """With nothing set the config is replay, no spec, and an identity normalizer."""
        config = build_config({})
        assert config.mode is Mode.REPLAY
        assert config.spec is None and config.normalizer.is_identity

    def test_comma_separated_upstreams(self):
        """One option value may hold several comma-separated maps, like FLOWPROOF_UPSTREAM."""
        config = build_config({"upstream": ["a.com=http://127.0.0.1:1,b.com=http://127.0.0.1:2"]})
        assert sorted(config.upstream) == ["a.com", "b.com"]

    def test_bad_route_is_refused(self):
        """An unknown route names the option."""
        with pytest.raises(ValueError, match="flowproof_route"):
            build_config({"route": "tunnel"})

    def test_spec_supplies_tools_and_portable_paths(self, tmp_path: Path):
        """A spec's tool results and presets reach the config, and HOME makes paths portable."""
        spec = tmp_path / "s.flow.yaml"
        spec.write_text(
            "name: s\napp: agent\nagent:\n  command: x\ntools:\n  - name: t\n    result: 1\n"
            "volatile:\n  - claude-code\nsteps:\n  - prompt: hi\n"
        )
        config = build_config({"spec": str(spec)}, environ={"HOME": str(tmp_path)})
        assert config.tool_results == {"t": 1}
        assert not config.normalizer.is_identity

    def test_spec_variables_and_escapes_resolve(self, tmp_path: Path):
        """Tool results get ${VAR} from the environment, and $${ always becomes a literal ${."""
        spec = tmp_path / "s.flow.yaml"
        spec.write_text(
            "name: s\nagent:\n  command: x\ntools:\n  - name: t\n    result: 'cost $${PRICE}'\n"
            "steps:\n  - prompt: hi\n"
        )
        assert build_config({"spec": str(spec)}, environ={}).tool_results == {"t": "cost ${PRICE}"}
        spec.write_text(
            "name: s\nagent:\n  command: x\ntools:\n  - name: t\n    result: 'id ${ORDER}'\n"
            "steps:\n  - prompt: hi\n"
        )
        config = build_config({"spec": str(spec)}, environ={"ORDER": "A-1"})
        assert config.tool_results == {"t": "id A-1"}
