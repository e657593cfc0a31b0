"""Tests for flowproof.pytest_plugin, through pytest's own pytester: collection, a pass, a
failure's text, --flowproof-mode, and pytest-xdist."""

from __future__ import annotations

import shutil
from pathlib import Path
from xml.etree import ElementTree

import pytest

from flowproof.runner.env import ensure_ca
from flowproof.testing import FakeModelServer, load_script

from .runner.conftest import FAKE_ADDON
from .runner.helpers import BOOKING_TURNS, cassette_text, divergence_event, turn_events, write_script, write_spec

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CA for these tests, created here: created inside an in-process pytester run, the
    cryptography modules it imports would be dropped with that run's sys.modules, and a later
    test's re-import no longer matches the hash classes its Rust backend registered."""
    ca_dir = tmp_path_factory.mktemp("ca") / "ca"
    ensure_ca(ca_dir)
    return ca_dir


@pytest.fixture
def flows(pytester: pytest.Pytester, ca_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two flows (one passes, one fails an assertion) under a nested folder, run through the
    stand-in addon; returns the folder."""
    monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))
    monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
    monkeypatch.delenv("FLOWPROOF_UPSTREAM", raising=False)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    folder = pytester.path / "specs" / "nested"
    folder.mkdir(parents=True)
    write_spec(folder, name="good")
    (folder / "good.cassette.json").write_text(cassette_text(BOOKING_TURNS))
    bad = write_spec(pytester.path / "specs", name="bad")
    bad.write_text(bad.read_text().replace("name: Booking assistant books a flight", "name: Refund guard"))
    (pytester.path / "specs" / "bad.cassette.json").write_text(cassette_text(BOOKING_TURNS))
    (pytester.path / "specs" / "notes.yaml").write_text("not: a flow\n")
    script = write_script(pytester.path / "script.json", events=turn_events(BOOKING_TURNS))
    monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(script))
    return pytester.path / "specs"


def make_good_only(specs: Path) -> None:
    (specs / "bad.flow.yaml").unlink()


class TestCollection:
    def test_one_item_per_flow_named_by_the_spec(self, pytester: pytest.Pytester, flows: Path) -> None:
        """Each *.flow.yaml is one item whose id is its file and its spec name; other YAML is not."""
        res = pytester.runpytest("--collect-only", "-q", "specs")
        assert sorted(line for line in res.outlines if "::" in line) == [
            "specs/bad.flow.yaml::Refund guard",
            "specs/nested/good.flow.yaml::Booking assistant books a flight",
        ]

    def test_a_spec_that_does_not_load_is_an_item_failing_with_the_spec_error(
        self, pytester: pytest.Pytester, flows: Path
    ) -> None:
        """A broken spec is collected under its file stem and fails with file:line, no traceback."""
        (flows / "broken.flow.yaml").write_text(
            "name: x\napp: agent\nagent:\n  command: a\nsteps:\n  - assert_tool_call: 'q where a matches ['\n"
        )
        res = pytester.runpytest("specs/broken.flow.yaml", "-v")
        res.assert_outcomes(failed=1)
        text = res.stdout.str()
        assert "specs/broken.flow.yaml::broken FAILED" in text
        assert "broken.flow.yaml:6:" in text and "Traceback" not in text


class TestRun:
    def test_pass_and_failure_text(self, pytester: pytest.Pytester, flows: Path) -> None:
        """A passing flow passes; a failing flow's failure text is flowproof's report (the ✗
        step, what the trajectory held, what to do) with no Python traceback."""
        bad = flows / "bad.flow.yaml"
        # Both flows replay the same recording (the cassette books KQ311): the bad one expects KQ999.
        bad.write_text(bad.read_text().replace("equals KQ311", "equals KQ999"))
        res = pytester.runpytest("specs", "-v")
        res.assert_outcomes(passed=1, failed=1)
        text = res.stdout.str()
        assert "specs/nested/good.flow.yaml::Booking assistant books a flight PASSED" in text
        assert "specs/bad.flow.yaml::Refund guard FAILED" in text
        failure = text.split(" Refund guard _")[1].split("short test summary")[0]
        assert "✗ Refund guard [replay] — assertion failed" in failure
        assert "✗ create_booking where flight.id equals KQ999" in failure
        assert 'flight.id is "KQ311"' in failure
        assert "then run: pytest 'specs/bad.flow.yaml::Refund guard'" in failure
        assert failure.count("✗ Refund guard [replay]") == 1
        for noise in ("Traceback", "def runtest", "FlowFailure", "pytest_plugin.py"):
            assert noise not in failure

    @staticmethod
    def _diverging_run(pytester: pytest.Pytester, flows: Path, monkeypatch: pytest.MonkeyPatch,
                       *args: str) -> str:
        """One flow whose replay diverges on the model, run on CI (where pytest prints the short
        summary unabridged); its output, after checking the summary is the report's headline."""
        make_good_only(flows)
        events = [{"event": "request_started", "id": "1"}, divergence_event("1", "model", "gpt-4o", "gpt-4.1")]
        monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(write_script(pytester.path / "div.json", events=events)))
        monkeypatch.setenv("CI", "true")
        res = pytester.runpytest("specs", *args)
        res.assert_outcomes(failed=1)
        text = res.stdout.str()
        summary = text.split("short test summary info", 1)[1].splitlines()[1:3]
        assert summary[0].endswith(" - ✗ Booking assistant books a flight [replay] — replay divergence")
        assert summary[1].startswith("=====")
        return text

    def test_a_divergence_says_to_record_again_through_pytest(
        self, pytester: pytest.Pytester, flows: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The record command is data the report is rendered with: under pytest, pytest's own,
        given once even where the short summary is printed in full."""
        text = self._diverging_run(pytester, flows, monkeypatch, "-v")
        command = "pytest 'specs/nested/good.flow.yaml::Booking assistant books a flight' --flowproof-mode record"
        assert f"re-record with: {command}" in text and text.count(command) == 1
        assert "flowproof-run" not in text

    def test_under_xdist_the_short_summary_is_the_headline_too(
        self, pytester: pytest.Pytester, flows: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A worker's report reaches the controller serialized: the headline must survive that."""
        text = self._diverging_run(pytester, flows, monkeypatch, "-n", "1", "-p", "xdist")
        assert text.count("--flowproof-mode record") == 1
        assert "model: recorded gpt-4o, replayed gpt-4.1" in text

    def test_a_missing_cassette_says_to_record_it_through_pytest(
        self, pytester: pytest.Pytester, flows: Path
    ) -> None:
        """The error that stops the flow before it runs names pytest's command too, relative."""
        make_good_only(flows)
        (flows / "nested" / "good.cassette.json").unlink()
        res = pytester.runpytest("specs")
        res.assert_outcomes(failed=1)
        text = res.stdout.str()
        command = "pytest 'specs/nested/good.flow.yaml::Booking assistant books a flight' --flowproof-mode record"
        assert f"no cassette to replay — record one first with: {command}" in text
        assert "flowproof-run" not in text

    def test_mode_option_reaches_the_flow(self, pytester: pytest.Pytester, flows: Path) -> None:
        """--flowproof-mode compare runs the flow in compare mode (the report says so)."""
        make_good_only(flows)
        res = pytester.runpytest("specs", "--flowproof-mode", "compare", "-rA")
        res.assert_outcomes(passed=1)
        assert "Booking assistant books a flight [compare] — passed" in res.stdout.str()

    def test_bad_mode_is_refused(self, pytester: pytest.Pytester, flows: Path) -> None:
        """An unknown mode is a usage error naming the choices."""
        res = pytester.runpytest("specs", "--flowproof-mode", "live")
        assert res.ret == pytest.ExitCode.USAGE_ERROR
        assert "record" in res.stderr.str() and "compare" in res.stderr.str()

    def test_otel_option_sends_each_flow_s_spans(
        self, pytester: pytest.Pytester, flows: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--flowproof-otel: each flow item's GenAI spans reach the OTLP endpoint, as with
        flowproof-run --otel."""
        from .runner.otlp_receiver import OtlpReceiver

        make_good_only(flows)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
        with OtlpReceiver() as receiver:
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
            res = pytester.runpytest("specs", "--flowproof-otel")
        res.assert_outcomes(passed=1)
        names = [s.name for s in receiver.spans]
        assert names.count("chat gpt-4o") == 3 and "invoke_agent Booking assistant books a flight" in names

    def test_otel_option_with_a_protocol_it_does_not_speak_is_a_usage_error(
        self, pytester: pytest.Pytester, flows: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        res = pytester.runpytest("specs", "--flowproof-otel")
        assert res.ret == pytest.ExitCode.USAGE_ERROR
        assert "--flowproof-otel: OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in res.stderr.str()

    def test_under_xdist_every_flow_runs_once(self, pytester: pytest.Pytester, flows: Path, tmp_path: Path) -> None:
        """Under pytest -n 2 four flows pass, each run exactly once, each proxy on its own port."""
        make_good_only(flows)
        good = (flows / "nested" / "good.flow.yaml").read_text()
        log = tmp_path / "runs.log"
        for i in range(4):
            spec = write_spec(flows, name=f"p{i}", command=f"echo p{i} >> {log}")
            spec.write_text(spec.read_text().replace("name: Booking assistant books a flight", f"name: flow {i}"))
            (flows / f"p{i}.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        assert good  # the nested flow stays too
        res = pytester.runpytest_subprocess("specs", "-n", "2", "-p", "xdist", "--junitxml", "junit.xml")
        res.assert_outcomes(passed=5)
        assert sorted(log.read_text().split()) == ["p0", "p1", "p2", "p3"]
        assert "2 workers" in res.stdout.str()


class TestOneWriterPerCassette:
    def shared_pair(self, flows: Path, log: Path) -> tuple[Path, Path]:
        """Two more specs whose `cassette:` is one file (their agents log that they ran)."""
        make_good_only(flows)
        pair = []
        for name in ("first", "second"):
            spec = write_spec(flows, name=name, command=f"echo {name} >> {log}")
            spec.write_text(spec.read_text().replace("name: Booking assistant books a flight", f"name: {name}")
                            + "cassette: shared.cassette.json\n")
            pair.append(spec)
        (flows / "shared.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        return pair[0], pair[1]

    def test_two_flows_recording_one_cassette_both_fail_naming_each_other_before_either_runs(
        self, pytester: pytest.Pytester, flows: Path, tmp_path: Path
    ) -> None:
        """flowproof-run refuses two specs of one --record run sharing a cassette; so does
        pytest in record mode, in the same words, with no agent started and the cassette as it was."""
        log = tmp_path / "runs.log"
        self.shared_pair(flows, log)
        before = (flows / "shared.cassette.json").read_bytes()
        res = pytester.runpytest("specs/first.flow.yaml", "specs/second.flow.yaml", "--flowproof-mode", "record")
        res.assert_outcomes(failed=2)
        text = res.stdout.str()
        refusal = ("specs/first.flow.yaml and specs/second.flow.yaml both record specs/shared.cassette.json, "
                   "so one recording would be lost — give each spec its own `cassette:`, or record them "
                   "in separate runs")
        assert text.count(refusal) >= 2, text
        assert "Traceback" not in text and "pytest_plugin.py" not in text
        assert not log.exists()
        assert (flows / "shared.cassette.json").read_bytes() == before

    def test_under_xdist_the_pair_fails_whichever_workers_run_it(
        self, pytester: pytest.Pytester, flows: Path, tmp_path: Path
    ) -> None:
        """Every xdist worker collects every item, so each finds the pair: on two workers too,
        both fail and neither agent runs."""
        log = tmp_path / "runs.log"
        first, second = self.shared_pair(flows, log)
        res = pytester.runpytest_subprocess(str(first), str(second), "--flowproof-mode", "record",
                                            "-n", "2", "-p", "xdist", "--dist", "load")
        res.assert_outcomes(failed=2)
        assert res.stdout.str().count("both record specs/shared.cassette.json") >= 2
        assert not log.exists()

    def test_a_flow_left_out_of_the_selection_claims_nothing(
        self, pytester: pytest.Pytester, flows: Path, tmp_path: Path
    ) -> None:
        """Claimed after deselection: `-k first` records the first spec alone; replay never claims."""
        log = tmp_path / "runs.log"
        self.shared_pair(flows, log)
        res = pytester.runpytest("specs", "--flowproof-mode", "record", "-k", "first")
        assert "both record" not in res.stdout.str()
        assert log.read_text().split() == ["first"]
        replayed = pytester.runpytest("specs")
        assert "both record" not in replayed.stdout.str()
        assert sorted(log.read_text().split()) == ["first", "first", "second"]


class TestWarmProxyPerWorker:
    def test_each_xdist_worker_starts_one_proxy_for_all_its_flows(
        self, pytester: pytest.Pytester, ca_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Six replayed flows under -n 2, through the real addon: every flow passes, and the
        flows of one worker were all served by that worker's one proxy."""
        for name in ("FLOWPROOF_ADDON_SCRIPT", "FLOWPROOF_UPSTREAM", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                     "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
        specs = pytester.path / "specs"
        specs.mkdir()
        examples = ROOT / "example_specs"
        shutil.copy(examples / "booking_agent.py", specs)
        for i in range(6):
            shutil.copy(examples / "booking.flow.yaml", specs / f"b{i}.flow.yaml")
            shutil.copy(examples / "booking.cassette.json", specs / f"b{i}.cassette.json")
        pytester.makeconftest(
            "import os\n"
            "def pytest_runtest_setup(item):\n"
            "    item.user_properties.append(('worker', os.environ.get('PYTEST_XDIST_WORKER', '')))\n"
        )
        res = pytester.runpytest_subprocess("specs", "-n", "2", "-p", "xdist", "--junitxml", "junit.xml",
                                            timeout=600)
        res.assert_outcomes(passed=6)
        proxy_of: dict[str, set[str]] = {}
        for case in ElementTree.parse(pytester.path / "junit.xml").iter("testcase"):
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            assert props["flowproof_proxy_pid"] not in (None, "0"), props
            proxy_of.setdefault(str(props["worker"]), set()).add(str(props["flowproof_proxy_pid"]))
        assert set(proxy_of) <= {"gw0", "gw1"} and proxy_of, proxy_of
        # One proxy per worker, never one per flow; no two workers share one.
        assert all(len(pids) == 1 for pids in proxy_of.values()), proxy_of
        assert len(set.union(*proxy_of.values())) == len(proxy_of)


class TestEnvironmentSettings:
    def test_a_recorded_flow_goes_to_the_mapped_upstream_not_the_provider(
        self, pytester: pytest.Pytester, ca_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """FLOWPROOF_UPSTREAM reaches a flow item as it reaches flowproof-run: the recording is
        made against the fake model server (the item used to ignore it and send the agent's
        calls to the real provider)."""
        for name in ("FLOWPROOF_ADDON_SCRIPT", "FLOWPROOF_EXTRA_HOSTS", "OPENAI_BASE_URL", "HTTPS_PROXY",
                     "HTTP_PROXY", "https_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
        specs = pytester.path / "specs"
        specs.mkdir()
        examples = ROOT / "example_specs"
        shutil.copy(examples / "booking_agent.py", specs)
        shutil.copy(examples / "booking.flow.yaml", specs)
        with FakeModelServer(load_script(examples / "fake_model" / "booking.json").replies) as server:
            monkeypatch.setenv("FLOWPROOF_UPSTREAM", f"api.openai.com={server.url}")
            res = pytester.runpytest_subprocess("specs", "--flowproof-mode", "record", timeout=300)
            res.assert_outcomes(passed=1)
            assert len(server.model_requests) == 3
        assert (specs / "booking.cassette.json").exists()


class TestOwnSuite:
    def test_our_suite_collects_no_flows(self) -> None:
        """`pytest` in this repository runs tests/ only (testpaths), and nothing there is a
        *.flow.yaml, so the example flows run only when named: `pytest example_specs`."""
        pyproject = (ROOT / "pyproject.toml").read_text()
        assert 'testpaths = ["tests"]' in pyproject
        assert list((ROOT / "tests").rglob("*.flow.yaml")) == []




ASSERTING_TEST = '''
import flowproof

TRAJECTORY = flowproof.cassette_trajectory(flowproof.load_cassette({cassette!r}))


def test_wrong_flight():
    flowproof.assert_tool_call(TRAJECTORY, "create_booking where flight.id equals KQ999")


def test_refund_called():
    flowproof.assert_no_tool_call(TRAJECTORY, "create_booking")


def test_reply():
    flowproof.assert_reply(TRAJECTORY, "cancelled")


def test_bad_line():
    flowproof.assert_tool_call(TRAJECTORY, "create_booking where flight.id matches [")
'''


class TestAssertionHelpersInATest:
    def test_a_failure_shows_the_test_line_and_the_message_only(self, pytester: pytest.Pytester) -> None:
        """A failing flowproof.assert_* in a test reads as a plain assert does: the test's own
        line, then the spec's message — no frame of flowproof's, no repr of the trajectory
        (`__tracebackhide__`); a line the spec language cannot parse likewise."""
        pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
        pytester.makepyfile(test_asserts=ASSERTING_TEST.format(
            cassette=str(ROOT / "example_specs" / "booking.cassette.json")))
        res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        res.assert_outcomes(failed=4)
        out = res.stdout.str()
        for line in ('>       flowproof.assert_tool_call(TRAJECTORY, "create_booking where flight.id equals KQ999")',
                     '>       flowproof.assert_no_tool_call(TRAJECTORY, "create_booking")',
                     '>       flowproof.assert_reply(TRAJECTORY, "cancelled")'):
            assert line in out
        assert ("E       flowproof.expect.TrajectoryAssertionError: "
                "expected create_booking where flight.id equals KQ999") in out
        assert 'E         flight.id is "KQ311", not "KQ999"' in out
        assert "E       flowproof.errors.SpecError: <python>:1:40: bad regular expression" in out
        # Nothing of flowproof's own: its files, its frames' arguments (a whole trajectory).
        assert "flowproof/expect.py" not in out and "flowproof/spec/clauses.py" not in out
        assert "trajectory = Trajectory(" not in out and "step = ToolCallAssertion(" not in out
        # Each failure is its test's line and the message: four short sections.
        sections = out.split(" FAILURES ")[1].split("short test summary")[0]
        assert len(sections.splitlines()) < 40, sections
