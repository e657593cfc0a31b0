"""The pure options module: modes and routes, the one upstream parser, the option table, the
session request's round trip, and the settings every entry point reads from the environment."""

from __future__ import annotations

import json
import os
import re
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowproof.errors import FlowproofError
from flowproof.mcp import parse_route
from flowproof.options import (
    OPTIONS,
    Mode,
    ProxyOptions,
    Route,
    Transport,
    Upstream,
    base_url_ports,
    choose,
    from_json,
    from_values,
    host_settings,
    listeners_for,
    parse_extra_host,
    parse_upstream,
    parse_upstreams,
    python_path,
    set_args,
    to_json,
    to_values,
    with_spec,
)
from flowproof.spec import load_spec, resolve_variables

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-options-secret-0123456789"


class TestModeAndRoute:
    def test_valid_values_are_members(self) -> None:
        assert choose(Mode, "compare", "mode") is Mode.COMPARE
        assert choose(Route, Route.BASE_URL, "route") is Route.BASE_URL
        assert Mode.REPLAY == "replay" and f"{Route.PROXY}" == "proxy"  # a str where a str is read

    @pytest.mark.parametrize(("kind", "what", "valid"), [
        (Mode, "mode", "replay, record, compare"), (Route, "route", "proxy, base_url"),
    ])
    def test_an_unknown_value_names_every_valid_one(self, kind: type, what: str, valid: str) -> None:
        """VCR's record_mode pattern: the error lists what may be written instead."""
        with pytest.raises(ValueError, match=f"^unknown {what} `nope` — use one of: {valid}$"):
            choose(kind, "nope", what)


#: Values every parser must refuse, each with a word of its reason.
BAD_UPSTREAMS = [
    ("nonsense", "HOST=URL"),
    ("=http://127.0.0.1:9", "HOST=URL"),
    ("api.openai.com=", "HOST=URL"),
    ("api openai=http://127.0.0.1:9", "not a host name"),
    ("api.openai.com=ftp://127.0.0.1:9", "http:// or https://"),
    ("api.openai.com=http://", "names no host"),
    ("api.openai.com=http://127.0.0.1:70000", "not valid"),
    (f"api.openai.com=http://user:{SECRET}@127.0.0.1:9/v1", "user name or password"),
    (f"api.openai.com=http://127.0.0.1:9/v1?key={SECRET}", "query string"),
    ("api.openai.com=http://127.0.0.1:9/#frag", "query string or fragment"),
    ("api.openai.com=http://127.0.0.1:9/?", "query string"),
    ("api.openai.com=http://127.0.0.1:0", "port 0"),
]


class TestParseUpstream:
    def test_host_and_url(self) -> None:
        """A HOST=URL map parses into a normalized host and its target."""
        assert parse_upstream("API.OpenAI.com=http://127.0.0.1:8000") == (
            "api.openai.com", Upstream("http", "127.0.0.1", 8000, ""))

    def test_path_prefix_and_default_port(self) -> None:
        """A path prefix is kept without its trailing slash and https defaults to 443."""
        assert parse_upstream("api.anthropic.com=https://gw.example/llm/") == (
            "api.anthropic.com", Upstream("https", "gw.example", 443, "/llm"))

    @pytest.mark.parametrize(("value", "reason"), BAD_UPSTREAMS, ids=[v for v, _ in BAD_UPSTREAMS])
    def test_refused_alike_by_the_runner_and_the_addon(self, value: str, reason: str) -> None:
        """One parser, one behaviour: a value flowproof-run refuses, the addon refuses too (it
        used to drop user:password and turn port 0 into 80), and neither shows the secret."""
        with pytest.raises(FlowproofError, match=re.escape(reason)) as runner:
            host_settings({}, upstream=[value])
        with pytest.raises(ValueError, match=re.escape(reason)) as addon:
            from_values({"flowproof_upstream": [value]})
        for error in (runner.value, addon.value):
            assert SECRET not in str(error)
        assert str(runner.value).startswith("bad --upstream ")
        assert str(addon.value).startswith("flowproof_upstream: ")

    @given(st.text(max_size=60))
    def test_any_text_parses_or_is_a_value_error(self, value: str) -> None:
        """Whatever a user types, the parser answers with a mapping or a reason, never a crash."""
        try:
            host, target = parse_upstream(value)
        except ValueError:
            return
        assert host and 0 < target.port < 65536 and target.scheme in ("http", "https")

    @given(st.text(alphabet=st.characters(blacklist_characters="@/?#:", blacklist_categories=["Cs"]),
                   min_size=1, max_size=20))
    def test_a_password_is_never_repeated(self, password: str) -> None:
        with pytest.raises(ValueError) as caught:
            parse_upstreams([f"api.openai.com=http://u:{password}@127.0.0.1:9"])
        assert f"u:{password}@" not in str(caught.value)

    def test_a_later_map_of_one_host_wins_and_commas_split(self) -> None:
        mapped = parse_upstreams(["a.com=http://127.0.0.1:1,b.com=http://127.0.0.1:2", "a.com=http://127.0.0.1:3"])
        assert {h: t.port for h, t in mapped.items()} == {"a.com": 3, "b.com": 2}


class TestExtraHost:
    def test_bare_hosts_pass_lower_cased(self) -> None:
        assert parse_extra_host("LLM-Gateway.internal") == "llm-gateway.internal"
        assert parse_extra_host("gw:8443") == "gw:8443"

    @pytest.mark.parametrize("host", ["http://gw", "gw internal", "gw/v1", "a=b", f"gw?key={SECRET}", "-gw"])
    def test_refused(self, host: str) -> None:
        with pytest.raises(ValueError, match="bare host name") as caught:
            parse_extra_host(host)
        assert SECRET not in str(caught.value)


class TestHostSettings:
    def test_environment_first_then_flags(self) -> None:
        """FLOWPROOF_UPSTREAM maps come first and flags override them; extra hosts combine,
        lower-cased, without repeats."""
        settings = host_settings(
            {"FLOWPROOF_UPSTREAM": "a.com=http://127.0.0.1:1, b.com=http://127.0.0.1:2,",
             "FLOWPROOF_EXTRA_HOSTS": "llm.example, gw.internal,"},
            upstream=["a.com=http://127.0.0.1:9"], extra_hosts=["GW.internal"],
        )
        assert [(h, t.port) for h, t in settings.upstream.items()] == [("a.com", 9), ("b.com", 2)]
        assert settings.extra_hosts == ("gw.internal", "llm.example")

    def test_a_bad_environment_value_names_the_variable(self) -> None:
        with pytest.raises(FlowproofError, match="bad FLOWPROOF_UPSTREAM .*query string") as caught:
            host_settings({"FLOWPROOF_UPSTREAM": f"api.openai.com=http://127.0.0.1:9/?key={SECRET}"})
        assert SECRET not in str(caught.value)
        with pytest.raises(FlowproofError, match="bare host name"):
            host_settings({"FLOWPROOF_EXTRA_HOSTS": "http://gw"})

    def test_nothing_set_is_nothing(self) -> None:
        assert host_settings({}) == host_settings({"FLOWPROOF_UPSTREAM": " ", "FLOWPROOF_EXTRA_HOSTS": ""})
        assert not host_settings({}).upstream and host_settings({}).extra_hosts == ()


class TestListeners:
    def test_the_explicit_proxy_first_then_the_base_url_route(self) -> None:
        assert listeners_for(Route.PROXY) == ("regular",)
        assert listeners_for(Route.PROXY, 8080, ["reverse:http://127.0.0.1:9@40001"]) == (
            "regular@8080", "reverse:http://127.0.0.1:9@40001")
        fixed = listeners_for(Route.BASE_URL, 8080)
        assert fixed[0] == "regular@8080"
        assert fixed[1:] == tuple(f"reverse:https://{h}@{p}" for h, p in base_url_ports(8080).items())
        assert fixed[1] == "reverse:https://api.openai.com@8081"
        assert all("@" not in spec for spec in listeners_for(Route.BASE_URL))


class TestOptionTable:
    def test_every_row_is_a_flowproof_option_with_one_sentence_of_help(self) -> None:
        names = [o.name for o in OPTIONS]
        assert len(set(names)) == len(names) and all(n.startswith("flowproof_") for n in names)
        for option in OPTIONS:
            # mitmproxy's style: one full sentence, capitalized, ending with a period.
            assert option.help[0].isupper() and option.help.endswith("."), option.name
            assert ". " not in option.help.replace("e.g. ", ""), option.name

    def test_every_flow_option_is_a_field_of_the_options_object(self) -> None:
        field_names = {f.name for f in fields(ProxyOptions)}
        flow_options = {o.key for o in OPTIONS if o.dump is not None}
        assert flow_options <= field_names
        assert {o.name for o in OPTIONS if o.dump is None} == {"flowproof_control"}
        assert [o.choices for o in OPTIONS if o.choices] == [
            ("replay", "record", "compare"), ("proxy", "base_url"), ("auto", "http")]

    def test_the_docs_table_is_the_code_table(self) -> None:
        """docs/internals.md's option table lists the code's options, in order, with their type,
        default and help sentence (the one place the names live is `OPTIONS`)."""
        text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
        section = text.split("## The addon's options (mitmproxy `--set`)", 1)[1].split("\n## ", 1)[0]
        rows = [line for line in section.splitlines() if line.startswith("| `flowproof_")]
        documented = [tuple(cell.strip() for cell in row.strip("|").split(" | ")) for row in rows]
        expected = [(f"`{o.name}`", o.type_text, o.default_text, o.help) for o in OPTIONS]
        assert documented == expected


def full_options(tmp_path: Path) -> ProxyOptions:
    """Options with every field away from its default, as the runner resolves a flow."""
    spec_path = tmp_path / "s.flow.yaml"
    spec_path.write_text(
        "name: s\nagent:\n  command: x\n  cwd: /srv/app\non_compare: mod:fn\n"
        "tools:\n  - name: t\n    result: {ok: true, items: [1, 2.5, null]}\n"
        "mcp:\n  - name: files\n    url: http://127.0.0.1:8931/mcp\n    tools:\n"
        "      - name: read\n        result: {text: hi}\n"
        "  - name: notes\n    command: python notes.py\n    tools:\n      - name: note\n"
        "volatile:\n  - name: stamp\n    path: metadata.stamp\n    pattern: '\\d{4}'\n  - claude-code\n"
        "steps:\n  - prompt: hi\n  - assert_no_secret_leak: ${TOKEN}\n"
    )
    spec = resolve_variables(load_spec(spec_path), {"TOKEN": "tok-1234567890"})
    base = ProxyOptions(
        mode=Mode.RECORD,
        cassette=tmp_path / "c.json",
        upstream=parse_upstreams(["api.openai.com=http://127.0.0.1:8000/v1"]),
        extra_hosts=("gw.internal",),
        route=Route.BASE_URL,
        report=tmp_path / "events.jsonl",
        mcp=(parse_route("files=http://127.0.0.1:8931/mcp"),),
        listeners=listeners_for(Route.BASE_URL, more=["reverse:http://127.0.0.1:8931@40001"]),
        handler_path=("/srv/app/checks",),
    )
    return with_spec(base, spec, cwd="/ignored", home="/home/u")


class TestRoundTrip:
    def test_the_session_request_reads_back_equal(self, tmp_path: Path) -> None:
        """Options -> session request (JSON text) -> options: nothing lost, nothing re-read."""
        options = full_options(tmp_path)
        assert options.tool_results and options.volatile and options.mcp_answers  # resolved
        assert [(s.label, s.placeholder) for s in options.secrets] == [("${TOKEN}", "«secret:TOKEN»")]
        assert options.mcp_stdio == ("notes",)
        assert options.compare_handler == "mod:fn" and options.cwd == "/srv/app"
        assert options.handler_path == ("/srv/app/checks",)
        assert from_json(json.loads(json.dumps(to_json(options)))) == options


class TestPythonPath:
    def test_the_folders_of_pythonpath_made_absolute_empty_ones_dropped(self) -> None:
        """A warm proxy runs in another folder: relative PYTHONPATH entries are the run's."""
        environ = {"PYTHONPATH": os.pathsep.join(["src", "", "/opt/lib/", "../common"])}
        assert python_path(environ, "/srv/app") == ("/srv/app/src", "/opt/lib", "/srv/common")
        assert python_path({}, "/srv/app") == ()

    def test_mitmproxy_values_read_back_equal_minus_the_resolved_data(self, tmp_path: Path) -> None:
        options = full_options(tmp_path)
        back = from_values(to_values(options))
        assert back == ProxyOptions(**{o.key: getattr(options, o.key) for o in OPTIONS if o.dump is not None})

    def test_set_args_leave_defaults_out(self) -> None:
        assert set_args(ProxyOptions()) == []
        assert set_args(ProxyOptions(mode=Mode.COMPARE, extra_hosts=("a", "b"))) == [
            "--set", "flowproof_mode=compare",
            "--set", "flowproof_extra_hosts=a", "--set", "flowproof_extra_hosts=b",
        ]

    def test_transport_comes_from_the_flag_else_the_spec_and_travels_in_both_forms(self, tmp_path: Path) -> None:
        """``--transport http`` wins; else the spec's ``transport:``; the addon gets it either way."""
        spec_path = tmp_path / "t.flow.yaml"
        spec_path.write_text("name: t\nagent:\n  command: a\ntransport: http\nsteps:\n  - prompt: hi\n")
        spec = resolve_variables(load_spec(spec_path), {})
        from_spec = with_spec(ProxyOptions(), spec, cwd="/w", home=None)
        assert from_spec.transport is Transport.HTTP and from_spec.refuses_websocket
        assert with_spec(ProxyOptions(transport=Transport.HTTP), spec, cwd="/w", home=None).refuses_websocket
        assert not ProxyOptions().refuses_websocket
        assert from_json(json.loads(json.dumps(to_json(from_spec)))).transport is Transport.HTTP
        assert set_args(ProxyOptions(transport=Transport.HTTP)) == ["--set", "flowproof_transport=http"]
        with pytest.raises(ValueError, match="flowproof_transport: unknown transport `ws`"):
            from_values({"flowproof_transport": "ws"})

    def test_a_malformed_request_is_a_value_error(self) -> None:
        with pytest.raises(ValueError, match="object"):
            from_json(None)
        with pytest.raises(ValueError, match="flowproof_mode"):
            from_json({"mode": "playback"})
        with pytest.raises(ValueError, match="malformed"):
            from_json({"volatile": [{"name": "x"}]})
        with pytest.raises(ValueError, match="listener"):
            from_json({"listeners": []})
