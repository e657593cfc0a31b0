"""Tests for flowproof.runner.cli: every command and its error paths, through CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowproof.errors import FlowproofError
from flowproof.options import ProxyOptions, parse_upstreams
from flowproof.runner.cli import cli, parse_shard, run_command, select_shard

from .conftest import FAKE_ADDON
from .helpers import BOOKING_TURNS, cassette_text, chat_turn, turn_events, write_script, write_spec


@pytest.fixture
def fake_env(ca_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Point the CLI at the stand-in addon and the session CA; returns a script setter."""
    monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))
    monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
    monkeypatch.delenv("FLOWPROOF_UPSTREAM", raising=False)
    monkeypatch.delenv("FLOWPROOF_EXTRA_HOSTS", raising=False)

    def set_script(**script) -> None:
        monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(write_script(tmp_path / "script.json", **script)))

    return set_script


def invoke(command, args):
    return CliRunner().invoke(command, [str(a) for a in args], catch_exceptions=False)


class TestRun:
    def test_replay_pass(self, tmp_path: Path, fake_env) -> None:
        """A passing replay exits 0 and prints the verdict."""
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        res = invoke(run_command, [spec])
        assert res.exit_code == 0, res.output
        assert "1 of 1 flow(s) passed" in res.output

    def test_missing_cassette(self, tmp_path: Path, fake_env) -> None:
        """A missing cassette exits 2 with the record command and no traceback."""
        spec = write_spec(tmp_path)
        res = invoke(run_command, [spec])
        assert res.exit_code == 2
        assert f"flowproof-run {spec} --record" in res.output
        assert "Traceback" not in res.output

    def test_an_absolute_spec_inside_the_working_directory_is_named_relative(
        self, tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The record command reads as the user types it, not as the machine's folders."""
        (tmp_path / "flows").mkdir()
        spec = write_spec(tmp_path / "flows")
        monkeypatch.chdir(tmp_path)
        res = invoke(run_command, [spec.resolve()])
        assert res.exit_code == 2
        assert "record one first with: flowproof-run flows/booking.flow.yaml --record" in res.output
        assert f"{tmp_path}/flows/booking.flow.yaml --record" not in res.output

    def test_several_diverged_flows_get_one_command_naming_each(
        self, tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        specs = [write_spec(tmp_path, name=n) for n in ("a", "b")]
        for name in ("a", "b"):
            (tmp_path / f"{name}.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        divergence = {"event": "divergence", "id": "1", "divergence": {
            "kind": "unmatched", "request_number": 1, "closest_index": 0, "envelope": [], "fields": []}}
        fake_env(events=[{"event": "request_started", "id": "1"}, divergence])
        monkeypatch.chdir(tmp_path)
        res = invoke(run_command, [s.resolve() for s in specs])
        assert res.exit_code == 3, res.output
        command = "flowproof-run a.flow.yaml b.flow.yaml --record"
        last = res.output.rstrip().splitlines()[-1]
        assert last.startswith(f"If the change is intended, re-record with: {command} —")
        assert res.output.count("--record") == 1

    def test_bad_spec_points_at_line(self, tmp_path: Path, fake_env) -> None:
        """A bad spec exits 2 with file:line:col and no traceback."""
        spec = tmp_path / "bad.flow.yaml"
        spec.write_text(
            "name: x\napp: agent\nagent:\n  command: a\nsteps:\n  - assert_tool_call: 'q where a matches ['\n"
        )
        res = invoke(run_command, [spec])
        assert res.exit_code == 2
        assert f"{spec}:6:" in res.output
        assert "Traceback" not in res.output

    def test_json_and_junit(self, tmp_path: Path, fake_env) -> None:
        """--json prints a machine report and --junit writes XML; exit is the worst code."""
        spec = write_spec(tmp_path)
        turns = [BOOKING_TURNS[0], chat_turn(1, text="no")]
        (tmp_path / "booking.cassette.json").write_text(cassette_text(turns))
        fake_env(events=turn_events(turns))
        junit = tmp_path / "out" / "junit.xml"
        res = invoke(run_command, [spec, "--json", "--junit", junit])
        assert res.exit_code == 1
        flow = json.loads(res.output)["flows"][0]
        assert flow["exit_code"] == 1
        # The failed steps are data too: their kind and the spec lines they sit on.
        assert [(f["kind"], f["location"]) for f in flow["findings"]] == [
            ("assertion", f"{spec}:13:5"),
            ("assertion", f"{spec}:14:5"),
        ]
        # … with what each expected and what the trajectory held, as separate fields.
        assert [(f["matcher"], f["expected"], f["actual"]) for f in flow["findings"]] == [
            ("called", "create_booking", ["search_flights"]),
            ("reply contains", "booked", "no"),
        ]
        assert "<testcase" in junit.read_text() and 'type="flowproof.assertion"' in junit.read_text()

    def test_several_flows_in_parallel(self, tmp_path: Path, fake_env) -> None:
        """-j 2 runs two flows and exits with the worst code (here: a missing cassette)."""
        a = write_spec(tmp_path, name="a")
        b = write_spec(tmp_path, name="b")
        (tmp_path / "a.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        res = invoke(run_command, [a, b, "-j", "2"])
        assert res.exit_code == 2
        assert "1 of 2 flow(s) passed" in res.output

    def test_cassette_needs_one_spec(self, tmp_path: Path, fake_env) -> None:
        """--cassette with two specs is a usage error."""
        res = invoke(run_command, [tmp_path / "a.yaml", tmp_path / "b.yaml", "--cassette", tmp_path / "c.json"])
        assert res.exit_code == 2 and "exactly one spec" in res.output

    def test_bad_upstream(self, tmp_path: Path, fake_env) -> None:
        """A malformed --upstream is a usage error saying the format."""
        res = invoke(run_command, [write_spec(tmp_path), "--upstream", "nonsense"])
        assert res.exit_code == 2 and "HOST=URL" in res.output

    def test_upstream_reaches_addon(self, tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch,
                                    sent_options: list[ProxyOptions]) -> None:
        """FLOWPROOF_UPSTREAM then --upstream, and --extra-host plus FLOWPROOF_EXTRA_HOSTS, reach
        the addon (`flowproof.options.host_settings`, as for every entry point)."""
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        monkeypatch.setenv("FLOWPROOF_UPSTREAM", "api.anthropic.com=http://127.0.0.1:2")
        monkeypatch.setenv("FLOWPROOF_EXTRA_HOSTS", "gw.internal")
        res = invoke(run_command, [spec, "--upstream", "api.openai.com=http://127.0.0.1:1", "--json",
                                   "--extra-host", "llm.example"])
        assert res.exit_code == 0, res.output
        assert "proxy_startup_seconds" in res.output
        [sent] = sent_options
        assert sent.upstream == parse_upstreams(
            ["api.anthropic.com=http://127.0.0.1:2", "api.openai.com=http://127.0.0.1:1"])
        assert list(sent.upstream) == ["api.anthropic.com", "api.openai.com"]
        assert sent.extra_hosts == ("llm.example", "gw.internal")

    def test_bad_environment_upstream_is_a_usage_error(self, tmp_path: Path, fake_env,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FLOWPROOF_UPSTREAM", "api.openai.com=http://u:secret-pw@127.0.0.1:1")
        res = invoke(run_command, [write_spec(tmp_path)])
        assert res.exit_code == 2 and "FLOWPROOF_UPSTREAM" in res.output and "secret-pw" not in res.output


class TestModes:
    @pytest.mark.parametrize(
        "flags",
        [["--compare", "--record"], ["--replay", "--record"], ["--record", "--compare"],
         ["--replay", "--compare"], ["--record-missing", "--record"], ["--record-missing", "--compare"]],
    )
    def test_two_mode_flags_are_a_usage_error(self, tmp_path: Path, fake_env, flags: list[str]) -> None:
        """Two mode flags never mean "the last one wins" (which would rewrite a committed
        cassette): exit 2 with one line naming both, and nothing runs or is written."""
        spec = write_spec(tmp_path)
        cassette = tmp_path / "booking.cassette.json"
        cassette.write_text(cassette_text(BOOKING_TURNS))
        before = cassette.read_bytes()
        fake_env(events=turn_events(BOOKING_TURNS), cassette=cassette_text([BOOKING_TURNS[0]]))
        res = CliRunner().invoke(run_command, [str(spec), *flags])
        assert res.exit_code == 2, res.output
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and all(flag in lines[0] for flag in flags), res.output
        assert "different modes" in lines[0] and "Traceback" not in res.output
        assert cassette.read_bytes() == before

    def test_a_mode_flag_given_twice_is_one_mode(self, tmp_path: Path, fake_env) -> None:
        """The same flag twice is one mode, not a conflict."""
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        res = invoke(run_command, [spec, "--replay", "--replay"])
        assert res.exit_code == 0, res.output

    def test_record_missing_records_only_the_flows_without_a_cassette(self, tmp_path: Path, fake_env) -> None:
        """--record-missing records a flow whose cassette does not exist and replays the one
        whose cassette does, leaving that cassette as it was."""
        have = write_spec(tmp_path, name="have")
        new = write_spec(tmp_path, name="new")
        (tmp_path / "have.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        # The stand-in addon writes `cassette` at shutdown to the file it was given: in record
        # mode that is the staging file, which the runner keeps as the new cassette. Both flows
        # get the same script, so its turns are live ones (a replay reads them as it would).
        fake_env(events=turn_events(BOOKING_TURNS, "record"), cassette=cassette_text(BOOKING_TURNS))
        res = invoke(run_command, [have, new, "--record-missing", "--json"])
        assert res.exit_code == 0, res.output
        modes = {Path(f["spec"]).name: f["mode"] for f in json.loads(res.output)["flows"]}
        assert modes == {"have.flow.yaml": "replay", "new.flow.yaml": "record"}
        assert (tmp_path / "new.cassette.json").exists()
        assert not list(tmp_path.glob("*.recording.json"))

    def test_record_missing_with_every_cassette_present_records_nothing(self, tmp_path: Path, fake_env) -> None:
        """With every cassette in place, --record-missing is a replay: a missing-key CI job
        that runs it never reaches a model."""
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        res = invoke(run_command, [spec, "--record-missing", "--json"])
        assert res.exit_code == 0, res.output
        assert [f["mode"] for f in json.loads(res.output)["flows"]] == ["replay"]


def with_result_of(turn: dict, call_id: str, content: str) -> dict:
    """``turn`` whose request carries the result of the earlier call ``call_id`` (as the agent
    sends it back), so the tool span ends there."""
    turn = json.loads(json.dumps(turn))
    messages = turn["request"]["body"]["messages"]
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "search_flights", "arguments": "{}"}}]})
    messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return turn


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SDK_DISABLED",
                 "OTEL_SERVICE_NAME", "TRACEPARENT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


class TestOtel:
    def test_a_replay_sends_its_spans_timed_by_the_proxy(self, tmp_path: Path, fake_env, otel_env) -> None:
        """--otel: the flow's agent, chat and tool spans reach the collector, each chat span at
        the time the proxy logged, the mocked search marked as the spec's result."""
        from .otlp_receiver import OtlpReceiver

        spec = write_spec(tmp_path)
        turns = [BOOKING_TURNS[0], with_result_of(BOOKING_TURNS[1], "call_0", '{"flights": []}'), BOOKING_TURNS[2]]
        (tmp_path / "booking.cassette.json").write_text(cassette_text(turns))
        events = turn_events(turns)
        for number, event in enumerate(e for e in events if e["event"] == "request_started"):
            event["at"] = 1767225600.0 + number
        for event in events:
            if event["event"] == "turn":
                event["ms"] = 250.0
        fake_env(events=events)
        with OtlpReceiver() as receiver:
            otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
            res = invoke(run_command, [spec, "--otel"])
        assert res.exit_code == 0, res.output
        names = sorted(s.name for s in receiver.spans)
        assert names == ["chat gpt-4o"] * 3 + ["execute_tool create_booking", "execute_tool search_flights",
                                              "invoke_agent Booking assistant books a flight"]
        chats = sorted((s for s in receiver.spans if s.name.startswith("chat")), key=lambda s: s.start_ns)
        assert [(s.start_ns, s.end_ns - s.start_ns) for s in chats] == [
            (1767225600_000_000_000 + n * 1_000_000_000, 250_000_000) for n in range(3)]
        tools = {s.attributes["gen_ai.tool.name"]: s.attributes["flowproof.tool.result"]
                 for s in receiver.spans if s.name.startswith("execute_tool")}
        assert tools == {"search_flights": "mocked", "create_booking": "none"}
        assert len({s.trace_id for s in receiver.spans}) == 1
        assert not any("KQ311" in str(v) or "NBO" in str(v) for s in receiver.spans for v in s.attributes.values())

    def test_a_collector_that_refuses_fails_the_run_after_its_flows(self, tmp_path: Path, fake_env, otel_env) -> None:
        from .otlp_receiver import OtlpReceiver

        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        with OtlpReceiver(status=400) as receiver:
            otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
            res = invoke(run_command, [spec, "--otel"])
        assert res.exit_code == 2
        assert "1 of 1 flow(s) passed" in res.output
        assert f"flowproof-run: could not export 6 span(s) to {receiver.endpoint}/v1/traces" in res.output

    def test_a_protocol_it_does_not_speak_stops_the_run_before_any_flow(
        self, tmp_path: Path, fake_env, otel_env
    ) -> None:
        spec = write_spec(tmp_path)
        otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        res = invoke(run_command, [spec, "--otel"])
        assert res.exit_code == 2
        assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: --otel exports over OTLP/HTTP" in res.output
        assert "flow(s) passed" not in res.output and "cassette" not in res.output

    def test_otel_content_needs_otel(self, tmp_path: Path, fake_env) -> None:
        res = invoke(run_command, [write_spec(tmp_path), "--otel-content"])
        assert res.exit_code == 2
        assert "--otel-content says what the --otel spans carry, so it needs --otel" in res.output


class TestProgramName:
    def test_flowproof_run_is_flowproof_dash_run(self, tmp_path: Path, fake_env) -> None:
        """`flowproof run SPEC` runs the flow exactly as `flowproof-run SPEC` does."""
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        res = invoke(cli, ["run", spec])
        assert res.exit_code == 0, res.output
        assert "1 of 1 flow(s) passed" in res.output

    def test_help_lists_run(self) -> None:
        """`flowproof --help` names the run command and says it is flowproof-run."""
        res = invoke(cli, ["--help"])
        assert res.exit_code == 0
        assert "flowproof-run" in res.output
        assert any(line.split()[:1] == ["run"] for line in res.output.splitlines())

    @pytest.mark.parametrize(
        ("main", "argv", "prefix", "help_hint"),
        [
            ("run_main", [], "flowproof-run: ", "see flowproof-run --help"),
            ("main", ["run"], "flowproof: ", "see flowproof run --help"),
            ("run_main", ["--proxy-port", "http", "x.flow.yaml"], "flowproof-run: ", "see flowproof-run --help"),
        ],
    )
    def test_a_usage_error_names_the_command_typed(
        self, capsys: pytest.CaptureFixture[str], main: str, argv: list[str], prefix: str, help_hint: str
    ) -> None:
        """A missing argument or a bad value is one line that starts with the command the user
        typed and points at that command's --help."""
        from flowproof.runner import cli as cli_module

        with pytest.raises(SystemExit) as exited:
            getattr(cli_module, main)(argv)
        assert exited.value.code == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(prefix) and lines[0].endswith(help_hint), lines

    def test_a_flowproof_error_of_flowproof_run_is_signed_flowproof_run(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An error raised inside the run (here: a spec file that is not there) is signed
        with the command too."""
        from flowproof.runner import cli as cli_module

        with pytest.raises(SystemExit) as exited:
            cli_module.run_main([str(tmp_path / "nope.flow.yaml")])
        assert exited.value.code == 2
        assert capsys.readouterr().err.startswith("flowproof-run: ")


class TestHelpers:
    def test_shard_selection_is_deterministic(self) -> None:
        """Shards split the sorted specs round-robin and cover each exactly once."""
        specs = [Path(f"s{i}.flow.yaml") for i in (3, 1, 2, 4)]
        parts = [select_shard(specs, (i, 2)) for i in (1, 2)]
        assert parts == [[Path("s1.flow.yaml"), Path("s3.flow.yaml")], [Path("s2.flow.yaml"), Path("s4.flow.yaml")]]

    @pytest.mark.parametrize("value", ["0/2", "3/2", "a/b", "1"])
    def test_bad_shard(self, value: str) -> None:
        """A malformed --shard raises a usage error."""
        with pytest.raises(FlowproofError, match="I/N"):
            parse_shard(value)

    def test_bad_extra_host(self, tmp_path: Path, fake_env) -> None:
        """A URL given where a host belongs is a usage error saying what to write."""
        res = invoke(run_command, [write_spec(tmp_path), "--extra-host", "https://gw.internal/v1"])
        assert res.exit_code == 2 and "bare host name" in res.output

class TestCheck:
    def test_all_valid(self, tmp_path: Path) -> None:
        """Valid specs exit 0 with 'N specs OK'."""
        res = invoke(cli, ["check", write_spec(tmp_path, name="a"), write_spec(tmp_path, name="b")])
        assert res.exit_code == 0 and "2 specs OK" in res.output

    def test_invalid_listed(self, tmp_path: Path) -> None:
        """Every problem is printed and the exit code is 2."""
        bad = tmp_path / "bad.flow.yaml"
        bad.write_text("name: x\n")
        res = invoke(cli, ["check", write_spec(tmp_path), bad])
        assert res.exit_code == 2
        assert f"{bad}:" in res.output and "1 spec OK, 1 invalid" in res.output

    def test_a_stdio_mcp_entry(self, tmp_path: Path) -> None:
        """`command:` checks like any entry; both url and command is one clear problem, no traceback."""
        entry = "mcp:\n  - name: notes\n    command: python notes.py\n    tools:\n      - name: t\n"
        good = tmp_path / "good.flow.yaml"
        good.write_text(f"name: n\nagent:\n  command: a\n{entry}steps:\n  - prompt: x\n")
        assert invoke(cli, ["check", good]).exit_code == 0
        bad = tmp_path / "bad.flow.yaml"
        bad.write_text(good.read_text().replace("    command: python notes.py\n",
                                                "    command: python notes.py\n    url: http://x/\n"))
        res = invoke(cli, ["check", bad])
        assert res.exit_code == 2 and "an `mcp` entry has both a `url` and a `command`" in res.output
        assert "Traceback" not in res.output


    def test_handles_are_checked(self, tmp_path: Path) -> None:
        """`flowproof check` accepts the handles where they belong and names a wrong one
        at its line and column, with what was meant."""
        good = tmp_path / "good.flow.yaml"
        good.write_text("name: g\nagent:\n  command: a ${flowproof.proxy_url}\n  route: base_url\n  env:\n"
                        "    U: ${flowproof.base_url.openai}\n    C: ${flowproof.ca_bundle}\nsteps:\n  - prompt: hi\n")
        res = invoke(cli, ["check", good])
        assert res.exit_code == 0 and "1 spec OK" in res.output, res.output
        assert "warning" not in res.output
        bad = tmp_path / "bad.flow.yaml"
        bad.write_text("name: b\nagent:\n  command: a\n  env:\n    U: ${flowproof.base_url.openia}\n"
                       "steps:\n  - prompt: hi\n")
        res = invoke(cli, ["check", bad])
        assert res.exit_code == 2
        assert f"{bad}:5:8: unknown handle `${{flowproof.base_url.openia}}`" in res.output
        assert "did you mean `${flowproof.base_url.openai}`?" in res.output


class TestDiffShow:
    def test_diff(self, tmp_path: Path) -> None:
        """flowproof diff prints the moved argument."""
        old, new = tmp_path / "old.json", tmp_path / "new.json"
        old.write_text(cassette_text(BOOKING_TURNS))
        new.write_text(
            cassette_text(
                [BOOKING_TURNS[0], chat_turn(1, call=("create_booking", {"flight": {"id": "KQ999"}})), BOOKING_TURNS[2]]
            )
        )
        res = invoke(cli, ["diff", old, new])
        # diff(1)'s exit codes: 1 when the inputs differ.
        assert res.exit_code == 1 and "flight.id: KQ311 -> KQ999" in res.output

    def test_diff_same(self, tmp_path: Path) -> None:
        """Identical cassettes say there is no change and exit 0."""
        old = tmp_path / "old.json"
        old.write_text(cassette_text(BOOKING_TURNS))
        res = invoke(cli, ["diff", old, old])
        assert res.exit_code == 0 and "no change" in res.output

    def test_diff_of_a_changed_request_body_only_is_a_difference(self, tmp_path: Path) -> None:
        """A request body that changed with the same trajectory still differs (exit 1)."""
        old, new = tmp_path / "old.json", tmp_path / "new.json"
        old.write_text(cassette_text(BOOKING_TURNS))
        moved = json.loads(json.dumps(BOOKING_TURNS))
        moved[0]["request"]["body_sha256"] = "f" * 64
        new.write_text(cassette_text(moved))
        res = invoke(cli, ["diff", old, new])
        assert res.exit_code == 1 and "request body changed" in res.output

    def test_show_corrupt_cassette(self, tmp_path: Path) -> None:
        """A corrupt cassette exits 2 with one paragraph and no traceback."""
        bad = tmp_path / "c.json"
        bad.write_text("{not json")
        res = invoke(cli, ["show", bad])
        assert res.exit_code == 2 and "not valid JSON" in res.output and "Traceback" not in res.output

    @pytest.mark.parametrize("command", ["diff", "show"])
    def test_missing_cassette_file_is_named(self, tmp_path: Path, command: str) -> None:
        """A cassette path that does not exist is a usage error naming it, not a record hint."""
        present = tmp_path / "c.json"
        present.write_text(cassette_text(BOOKING_TURNS))
        args = [command, tmp_path / "nope.json"] + ([present] if command == "diff" else [])
        res = invoke(cli, args)
        assert res.exit_code == 2
        assert "nope.json" in res.output and "does not exist" in res.output
        assert "--record" not in res.output

    def test_show(self, tmp_path: Path) -> None:
        """flowproof show prints the conversation."""
        c = tmp_path / "c.json"
        c.write_text(cassette_text(BOOKING_TURNS))
        res = invoke(cli, ["show", c])
        assert res.exit_code == 0 and "→ tool call search_flights" in res.output

    def test_show_one_turn(self, tmp_path: Path) -> None:
        """show --turn N prints that turn only; a turn that is not there exits 2 in one line."""
        c = tmp_path / "c.json"
        c.write_text(cassette_text(BOOKING_TURNS))
        res = invoke(cli, ["show", c, "--turn", "1", "--thread", "0"])
        assert res.exit_code == 0 and "→ tool call create_booking" in res.output
        assert "search_flights {" not in res.output
        res = invoke(cli, ["show", c, "--turn", "5"])
        assert res.exit_code == 2 and "has no turn 5 — its turns are: 0, 1, 2" in res.output
        assert "Traceback" not in res.output


class TestEnv:
    def test_exports(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """flowproof env prints shell exports for the proxy and the CA."""
        monkeypatch.setenv("FLOWPROOF_CA_DIR", str(tmp_path / "ca"))
        res = invoke(cli, ["env", "--proxy-port", "9123"])
        assert res.exit_code == 0
        assert "export HTTPS_PROXY=http://127.0.0.1:9123" in res.output
        assert f"export SSL_CERT_FILE={tmp_path / 'ca'}" in res.output

    def test_base_url_exports(self, tmp_path: Path, ca_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """--base-url exports the reverse listeners on the ports after the proxy port."""
        monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
        res = invoke(cli, ["env", "--proxy-port", "9123", "--base-url"])
        assert "export OPENAI_BASE_URL=http://127.0.0.1:9124/v1" in res.output
        assert "export ANTHROPIC_BASE_URL=http://127.0.0.1:9125" in res.output


#: An agent that logs when it starts and ends, and waits (up to 15 s) until a second agent
#: has started, so a run that never overlaps two flows fails visibly instead of passing slowly.
COUNTING_AGENT = """\
import os, sys, time
name, log = sys.argv[1], sys.argv[2]
def write(line):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (line + "\\n").encode())
    os.close(fd)
def starts():
    with open(log) as fh:
        return sum(1 for line in fh if line.startswith("start "))
write("start " + name)
deadline = time.monotonic() + 15
while starts() < int(sys.argv[3]) and time.monotonic() < deadline:
    time.sleep(0.05)
write("end " + name)
"""


def counting_tree(tmp_path: Path, count: int, barrier: int) -> tuple[Path, Path]:
    """``count`` passing specs spread over nested folders of ``tmp_path/flows``; returns the
    folder and the log every agent writes its start and end to."""
    agent = tmp_path / "agent.py"
    agent.write_text(COUNTING_AGENT, encoding="utf-8")
    log = tmp_path / "runs.log"
    root = tmp_path / "flows"
    for i in range(count):
        folder = root / f"group{i % 2}" / ("deep" if i % 3 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        write_spec(folder, command=f"python {agent} f{i} {log} {barrier}", name=f"f{i}")
        (folder / f"f{i}.cassette.json").write_text(cassette_text(BOOKING_TURNS))
    return root, log


def runs(log: Path) -> list[str]:
    return [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start ")]


class TestManyFlows:
    def test_directory_with_two_jobs_runs_each_spec_once_two_at_a_time(self, tmp_path: Path, fake_env) -> None:
        """A directory is searched recursively; -j 2 runs every spec exactly once, two at a time
        (never three), and the run ends with one table row per flow."""
        root, log = counting_tree(tmp_path, 4, barrier=2)
        fake_env(events=turn_events(BOOKING_TURNS))
        res = invoke(run_command, [root, "-j", "2"])
        assert res.exit_code == 0, res.output
        assert sorted(runs(log)) == ["f0", "f1", "f2", "f3"]
        running = peak = 0
        for line in log.read_text().splitlines():
            running += 1 if line.startswith("start ") else -1
            peak = max(peak, running)
        assert peak == 2
        table = res.output.split("\n\n")[-2].splitlines()
        assert table[0].split() == ["verdict", "mode", "time", "spec", "flow"]
        assert len(table) == 5 and all(row.split()[:3] == ["✓", "passed", "replay"] for row in table[1:])
        assert "4 of 4 flow(s) passed" in res.output

    def test_shards_cover_every_spec_exactly_once(self, tmp_path: Path, fake_env) -> None:
        """--shard 1/3, 2/3 and 3/3 over the same directory run disjoint sets whose union is
        every spec; a quoted glob selects the same specs as the directory."""
        root, log = counting_tree(tmp_path, 5, barrier=1)
        fake_env(events=turn_events(BOOKING_TURNS))
        per_shard = []
        for index in (1, 2, 3):
            before = len(runs(log)) if log.exists() else 0
            res = invoke(run_command, [f"{root}/**/*.flow.yaml", "--shard", f"{index}/3", "--json"])
            assert res.exit_code == 0, res.output
            per_shard.append(runs(log)[before:])
            assert [Path(f["spec"]).name for f in json.loads(res.output)["flows"]] == [
                f"{n}.flow.yaml" for n in per_shard[-1]
            ]
        assert all(per_shard) and sorted(sum(per_shard, [])) == ["f0", "f1", "f2", "f3", "f4"]

    def test_a_directory_without_flows_is_a_usage_error(self, tmp_path: Path, fake_env) -> None:
        """Naming a folder with no *.flow.yaml exits 2 with one line, running nothing."""
        res = invoke(run_command, [tmp_path])
        assert res.exit_code == 2 and "no *.flow.yaml" in res.output and "Traceback" not in res.output

    def test_cassette_option_refuses_a_directory_of_several_flows(self, tmp_path: Path, fake_env) -> None:
        """--cassette counts the specs a directory expands to, not the arguments."""
        root, _ = counting_tree(tmp_path, 2, barrier=1)
        res = invoke(run_command, [root, "--cassette", tmp_path / "c.json"])
        assert res.exit_code == 2 and "exactly one spec" in res.output


class TestRunFlowsWait:
    def test_the_main_thread_sleeps_while_a_slow_flow_runs(self) -> None:
        """Once one flow has finished, waiting for the others costs the main thread no CPU (no spin)."""
        import threading
        import time

        from flowproof.runner.cli import _run_flows

        release = threading.Event()

        def run_flow(path: Path, _options: object) -> str:
            if path.name == "slow":
                release.wait(5)
            return path.name

        timer = threading.Timer(0.8, release.set)
        timer.start()
        try:
            cpu_before = time.thread_time()
            results = _run_flows([Path("fast"), Path("slow")], None, 2, threading.Event(), run_flow)
            cpu = time.thread_time() - cpu_before
        finally:
            timer.cancel()
        assert results == ["fast", "slow"]
        # A spinning wait burns about the whole 0.8 s; 16 wake-ups of a sleeping one, a few ms.
        assert cpu < 0.15, f"the main thread used {cpu:.3f} CPU-s while waiting 0.8 s"


class TestMarkdownFlag:
    def test_a_run_writes_its_summary(self, tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch) -> None:
        """--markdown PATH: the table and the failing flow's section; the exit code is the run's."""
        monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
        a = write_spec(tmp_path, name="a")
        b = write_spec(tmp_path, name="b")
        (tmp_path / "a.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        out = tmp_path / "summary.md"
        res = CliRunner().invoke(run_command, [str(a), str(b), "--markdown", str(out)], catch_exceptions=False)
        assert res.exit_code == 2, res.output
        text = out.read_text(encoding="utf-8")
        assert "**2 flow(s): 1 passed, 1 failed** · mode replay · exit code 2" in text
        assert "| ✓ passed |" in text and "b.flow.yaml: " in text and "no cassette to replay" in text

    def test_the_step_summary_is_appended_to(self, tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch) -> None:
        summary = tmp_path / "step_summary"
        summary.write_text("from an earlier step\n")
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        res = CliRunner().invoke(run_command, [str(spec), "--markdown", str(summary)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        text = summary.read_text()
        assert text.startswith("from an earlier step\n\n### flowproof\n") and "1 passed, 0 failed" in text

    def test_an_unwritable_path_is_one_line_and_exit_2(self, tmp_path: Path, fake_env) -> None:
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        res = CliRunner().invoke(run_command, [str(spec), "--markdown", str(blocker / "s.md")], catch_exceptions=False)
        assert res.exit_code == 2
        assert f"cannot write the Markdown report to {blocker / 's.md'}" in res.output
        assert "Traceback" not in res.output


class TestRunFlowsAfterTheGrace:
    def test_a_runner_that_exits_without_waiting_names_the_cassettes_already_kept(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A flow stuck where it cannot see the signal: once the grace has passed the runner exits
        at once, saying which cassette a finished flow kept and which flow recorded nothing."""
        import threading

        from flowproof.runner import cli as cli_module
        from flowproof.runner.flow import Cancel
        from flowproof.verdict import FlowResult

        release = threading.Event()
        cancel = Cancel()

        def run_flow(path: Path, _options: object) -> FlowResult:
            if path.name == "stuck.flow.yaml":
                cancel.set()  # the signal arrives once the other flow has finished
                release.wait(30)
            return FlowResult(spec_path=path, name=path.name, mode="record", exit_code=0,
                              cassette=Path("kept.cassette.json"))

        def exit_now(code: int) -> None:
            raise SystemExit(code)

        monkeypatch.setattr(cli_module.os, "_exit", exit_now)
        monkeypatch.setattr(cli_module, "CANCEL_GRACE", 0.1)
        try:
            with pytest.raises(SystemExit) as exited:
                # One worker: the kept flow has finished before the stuck one starts.
                cli_module._run_flows([Path("kept.flow.yaml"), Path("stuck.flow.yaml")], None, 1, cancel, run_flow)
        finally:
            release.set()
        assert exited.value.code == 130
        err = capsys.readouterr().err
        assert "  kept: kept.cassette.json (cassette written, recorded by kept.flow.yaml)\n" in err
        assert "  not recorded: stuck.flow.yaml (interrupted; its cassette is unchanged)\n" in err
        assert "nothing was recorded" not in err


class TestHtmlFlag:
    def test_every_flow_of_a_parallel_run_is_on_the_page(self, tmp_path: Path, fake_env) -> None:
        """-j 2 with --html: one page, both flows, the exit code unchanged by the report."""
        a = write_spec(tmp_path, name="a")
        b = write_spec(tmp_path, name="b")
        (tmp_path / "a.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        page = tmp_path / "report.html"
        res = CliRunner().invoke(run_command, [str(a), str(b), "-j", "2", "--html", str(page)], catch_exceptions=False)
        assert res.exit_code == 2, res.output
        text = page.read_text(encoding="utf-8")
        assert "1 of 2 flow(s) passed · exit code 2" in text
        assert "tool call · create_booking" in text and "Your flight is booked: B-1042." in text
        assert "no cassette to replay" in text

    def test_an_unwritable_path_is_one_line_and_exit_2(self, tmp_path: Path, fake_env) -> None:
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        res = CliRunner().invoke(run_command, [str(spec), "--html", str(blocker / "r.html")], catch_exceptions=False)
        assert res.exit_code == 2
        assert f"cannot write the HTML report to {blocker / 'r.html'}" in res.output
        assert "Traceback" not in res.output

    def test_an_empty_shard_still_writes_a_page(self, tmp_path: Path, fake_env) -> None:
        spec = write_spec(tmp_path)
        page = tmp_path / "report.html"
        res = CliRunner().invoke(
            run_command, [str(spec), "--shard", "2/2", "--html", str(page)], catch_exceptions=False
        )
        assert res.exit_code == 0, res.output
        assert "No flow ran." in page.read_text(encoding="utf-8")
