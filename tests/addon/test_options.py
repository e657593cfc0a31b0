"""The addon's compiled options: a handler imported, a spec given by hand resolved (no mitmproxy)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from mitmproxy.test import taddons

from flowproof.addon import Flowproof
from flowproof.addon.core import build_flow_state
from flowproof.addon.options import AddonConfig, load_handler, options_by_hand
from flowproof.mcp import parse_route
from flowproof.options import Mode, ProxyOptions, Route, from_json, parse_upstreams, set_args, with_spec
from flowproof.runner.proxy import session_request
from flowproof.spec import load_spec, resolve_variables


class TestLoadHandler:
    def test_imports_a_function(self):
        """module:function imports the callable."""
        assert load_handler("json:dumps") is __import__("json").dumps

    @pytest.mark.parametrize("value", ["json", "json:", "no_such_mod_q:f", "json:nope", "json:decoder"])
    def test_bad_handlers_raise_value_error(self, value: str):
        """A malformed, missing or non-callable handler raises ValueError."""
        with pytest.raises(ValueError):
            load_handler(value)

    def test_a_module_found_only_on_the_run_s_path_is_imported_and_the_path_restored(
        self, tmp_path: Path
    ) -> None:
        """A warm proxy's sys.path is that of the run that started it: a later run's handler
        is looked for in the folders that run gives (its PYTHONPATH), which stay its own."""
        (tmp_path / "later_run_checks.py").write_text("def on_compare(result):\n    return None\n")
        before = list(sys.path)
        with pytest.raises(ValueError, match="cannot import module 'later_run_checks'"):
            load_handler("later_run_checks:on_compare")
        handler = load_handler("later_run_checks:on_compare", [str(tmp_path)])
        assert handler.__module__ == "later_run_checks" and sys.path == before


class TestAddonConfig:
    def test_defaults_are_replay_with_identity_normalizer(self):
        """With nothing set the config is replay, no spec, and an identity normalizer."""
        config = AddonConfig.build(options_by_hand({}))
        assert config.mode is Mode.REPLAY
        assert config.options.spec is None and config.normalizer.is_identity

    def test_the_handler_is_imported_and_named(self):
        """A compare handler given as module:function is imported once, and named in messages."""
        config = AddonConfig.build(options_by_hand({"flowproof_compare_handler": "json:dumps"}))
        assert config.compare_handler is __import__("json").dumps
        assert config.compare_handler_name == "json:dumps"

    def test_a_bad_handler_names_the_option(self):
        with pytest.raises(ValueError, match="flowproof_compare_handler"):
            AddonConfig.build(options_by_hand({"flowproof_compare_handler": "no_such_mod_q:f"}))

    def test_user_code_is_a_compare_handler_or_a_spec_s_own_pattern(self):
        """What sends a warm session's hooks to its worker: code the user wrote. A preset's
        patterns and a rule without a pattern (a whole value) are flowproof's own work."""
        from flowproof.normalize import PRESETS
        from flowproof.spec.types import Location, VolatileRule

        def rule(pattern: str | None) -> VolatileRule:
            return VolatileRule("stamp", "metadata.at", ("metadata", "at"),
                                re.compile(pattern) if pattern else None, Location("s.yaml", 3, 5))

        def user_code(**kw: object) -> bool:
            return AddonConfig.build(ProxyOptions(**kw)).runs_user_code  # type: ignore[arg-type]

        assert not user_code()
        assert not user_code(volatile=tuple(r for rules in PRESETS.values() for r in rules))
        assert not user_code(volatile=(rule(None),))
        assert user_code(volatile=(rule(r"\d+"),))
        assert user_code(compare_handler="json:dumps")
        # Through the session request the runner sends (a JSON round trip), presets stay ours.
        presets = ProxyOptions(volatile=PRESETS["claude-code"])
        sent = json.loads(json.dumps(session_request(presets)))["options"]
        assert not AddonConfig.build(from_json(sent)).runs_user_code

    def test_bad_route_is_refused(self):
        """An unknown route names the option and the valid values."""
        with pytest.raises(ValueError, match="flowproof_route: unknown route `tunnel` — use one of: proxy, base_url"):
            options_by_hand({"flowproof_route": "tunnel"})


class TestSpecByHand:
    def test_spec_supplies_tools_and_portable_paths(self, tmp_path: Path):
        """A spec's tool results and presets reach the config, and HOME makes paths portable."""
        spec = tmp_path / "s.flow.yaml"
        spec.write_text(
            "name: s\napp: agent\nagent:\n  command: x\ntools:\n  - name: t\n    result: 1\n"
            "volatile:\n  - claude-code\nsteps:\n  - prompt: hi\n"
        )
        config = AddonConfig.build(options_by_hand({"flowproof_spec": str(spec)}, environ={"HOME": str(tmp_path)}))
        assert config.tool_results == {"t": 1}
        assert config.options.home == str(tmp_path) and config.options.cwd
        assert not config.normalizer.is_identity

    def test_spec_variables_and_escapes_resolve(self, tmp_path: Path):
        """Tool results get ${VAR} from the environment, and $${ always becomes a literal ${."""
        spec = tmp_path / "s.flow.yaml"
        spec.write_text(
            "name: s\nagent:\n  command: x\ntools:\n  - name: t\n    result: 'cost $${PRICE}'\n"
            "steps:\n  - prompt: hi\n"
        )
        assert options_by_hand({"flowproof_spec": str(spec)}, environ={}).tool_results == {"t": "cost ${PRICE}"}
        spec.write_text(
            "name: s\nagent:\n  command: x\ntools:\n  - name: t\n    result: 'id ${ORDER}'\n"
            "steps:\n  - prompt: hi\n"
        )
        assert options_by_hand({"flowproof_spec": str(spec)}, environ={"ORDER": "A-1"}).tool_results == {"t": "id A-1"}

    def test_an_explicit_cwd_and_home_win_over_the_spec(self, tmp_path: Path):
        spec = tmp_path / "s.flow.yaml"
        spec.write_text("name: s\nagent:\n  command: x\n  cwd: /somewhere\nsteps:\n  - prompt: hi\n")
        options = options_by_hand({"flowproof_spec": str(spec)}, environ={"HOME": "/h"})
        assert (options.cwd, options.home) == ("/somewhere", "/h")
        options = options_by_hand({"flowproof_spec": str(spec), "flowproof_cwd": "/c", "flowproof_home": "/o"},
                                  environ={"HOME": "/h"})
        assert (options.cwd, options.home) == ("/c", "/o")


class TestRoundTrip:
    """The runner's options reach the addon's config unchanged, by either way in."""

    SPEC = (
        "name: s\nagent:\n  command: x\non_compare: json:dumps\n"
        "tools:\n  - name: t\n    result: {ok: true, id: '${ORDER}'}\n"
        "mcp:\n  - name: files\n    url: http://127.0.0.1:8931/mcp\n    tools:\n"
        "      - name: read\n        result: {text: hi}\n"
        "volatile:\n  - name: stamp\n    path: metadata.stamp\n    pattern: '\\d{4}'\n  - claude-code\n"
        "steps:\n  - prompt: hi\n"
    )

    def runner_options(self, tmp_path: Path) -> ProxyOptions:
        """What `flowproof-run` resolves for a record flow of this spec."""
        spec_path = tmp_path / "s.flow.yaml"
        spec_path.write_text(self.SPEC)
        spec = resolve_variables(load_spec(spec_path), {"ORDER": "A-1"})
        return with_spec(
            ProxyOptions(
                mode=Mode.RECORD, cassette=tmp_path / "c.json", report=tmp_path / "events.jsonl",
                upstream=parse_upstreams(["api.openai.com=http://127.0.0.1:8000/v1"]),
                extra_hosts=("gw.internal",), route=Route.BASE_URL,
                mcp=(parse_route("files=http://127.0.0.1:8931/mcp"),),
            ),
            spec, cwd=str(tmp_path), home="/home/someone",
        )

    def test_by_hand_with_set_strings(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """options -> ``--set`` strings (parsed by mitmproxy's own option manager) -> the
        addon loads the spec itself -> the config's options equal the runner's."""
        expected = self.runner_options(tmp_path)
        args = set_args(expected)
        assert args[::2] == ["--set"] * (len(args) // 2)
        addon = Flowproof()
        monkeypatch.setenv("ORDER", "A-1")  # the spec's ${ORDER}, resolved by the addon itself
        with taddons.context(addon) as tctx:
            tctx.options.set(*args[1::2])
            assert addon.shared.config.options == expected
            assert addon.shared.config.compare_handler is __import__("json").dumps
            addon.shared.events.close()

    def test_through_a_session_request(self, tmp_path: Path) -> None:
        """options -> the session request's JSON text -> the session's config: equal, and the
        spec file is never read (it is gone by then)."""
        expected = self.runner_options(tmp_path)
        text = json.dumps(session_request(expected))
        assert expected.spec is not None
        expected.spec.unlink()
        state = build_flow_state(from_json(json.loads(text)["options"]))
        assert state.shared.config.options == expected
        assert state.mcp.answers == {"files": {"read": {"text": "hi"}}}
        state.shared.events.close()
