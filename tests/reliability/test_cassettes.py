"""Cases 4, 6, 7 and 8 (advice): one writer per cassette; a bad cassette is exit 2 naming
file, turn and field; an error status is never minted silently; each exit-5 failure
ends with its own next step."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from flowproof.cassette import load_cassette
from flowproof.testing import FakeModelServer, Reply, ScriptedCall, load_script
from tests.e2e.conftest import Flowproof, upstream_args, write_spec

from .helpers import FLOWPROOF, cleanup, start_run, wait_until

Fake = Callable[..., FakeModelServer]


def booking_spec(examples: Path, name: str, cassette: str, *, extra: str = "") -> Path:
    return write_spec(examples / f"{name}.flow.yaml", "\n".join([
        f"name: {name}",
        "agent:",
        "  command: python booking_agent.py",
        "  timeout: 60",
        f"cassette: {cassette}",
        *([extra] if extra else []),
        "steps:",
        "  - prompt: Book me a flight to Nairobi tomorrow",
        "",
    ]))


def booking_replies(examples: Path, first_delay: float = 0.0) -> list[Reply]:
    replies = list(load_script(examples / "fake_model" / "booking.json").replies)
    if first_delay:
        from dataclasses import replace

        replies[0] = replace(replies[0], first_chunk_delay=first_delay)
    return replies


class TestOneWriterPerCassette:
    def test_two_specs_of_one_run_sharing_a_cassette_are_refused_first(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """`--record -j 2` with two specs naming one cassette: exit 2 before any model call."""
        first = booking_spec(examples, "first", "shared.cassette.json")
        second = booking_spec(examples, "second", "shared.cassette.json")
        server = fake_model(booking_replies(examples))
        ran = flowproof.run(first, second, "--record", "-j", "2", *upstream_args(server), keys=True)
        assert ran.code == 2, ran.output
        assert "both record" in ran.output and "shared.cassette.json" in ran.output
        assert "first.flow.yaml" in ran.output and "second.flow.yaml" in ran.output
        assert server.model_requests == [] and not (examples / "shared.cassette.json").exists()

    def test_a_second_run_recording_the_same_cassette_is_refused(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """Two runs at once: the first keeps its whole recording, the second is refused (exit 2)."""
        spec = booking_spec(examples, "locked", "locked.cassette.json")
        server = fake_model(booking_replies(examples, first_delay=3.0))
        first = start_run(flowproof, spec, "--record", *upstream_args(server))
        try:
            wait_until(lambda: bool(server.model_requests), 30, "the first run's model call")
            other = fake_model(booking_replies(examples))
            second = flowproof.run(spec, "--record", *upstream_args(other), keys=True)
            out, err = first.communicate(timeout=60)
        finally:
            cleanup(first, examples)
        assert second.code == 2, second.output
        assert "is recording this cassette right now" in second.output
        assert other.model_requests == []
        assert first.returncode == 0, out.decode() + err.decode()
        assert len(load_cassette(examples / "locked.cassette.json").turns) == 3
        assert not (examples / "locked.cassette.json.lock").exists()


class TestBadCassette:
    def test_an_sse_event_that_is_not_json_is_exit_2_naming_turn_and_field(
        self, examples: Path, flowproof: Flowproof
    ) -> None:
        cassette = examples / "booking.cassette.json"
        doc = json.loads(cassette.read_text(encoding="utf-8"))
        events = doc["turns"][1]["response"]["events"]
        index = next(i for i, e in enumerate(events) if e["data"].startswith("{"))
        events[index]["data"] = "{this is not json"
        events[index].pop("raw", None)
        cassette.write_text(json.dumps(doc), encoding="utf-8")
        ran = flowproof.run(examples / "booking.flow.yaml")
        assert ran.code == 2, ran.output
        assert f"turn 1 response event {index} data is not JSON" in ran.output
        assert "booking.cassette.json" in ran.output and "agent" not in ran.stderr.lower()

    def test_bytes_that_are_not_utf8_are_exit_2_and_never_printed(
        self, examples: Path, flowproof: Flowproof
    ) -> None:
        cassette = examples / "booking.cassette.json"
        cassette.write_bytes(cassette.read_bytes().replace(b"B-1042", b"B-10\xff2"))
        ran = flowproof.run(examples / "booking.flow.yaml")
        assert ran.code == 2 and "is not UTF-8 (byte 0xff)" in ran.output, ran.output
        for command in (["show", str(cassette)], ["diff", str(cassette), str(cassette)]):
            done = subprocess.run([FLOWPROOF, *command], capture_output=True, timeout=60, check=False,
                                  env=flowproof.env())
            text = (done.stdout + done.stderr).decode("utf-8", "backslashreplace")
            assert done.returncode == 2, text
            assert "udcff" not in text and "\udcff" not in text and "not UTF-8" in text


class TestErrorTurns:
    def replies(self, examples: Path) -> list[Reply]:
        # One 500, then the SDK's retry succeeds and the flow goes on.
        return [Reply(status=500, message="upstream boom"), *booking_replies(examples)]

    def test_record_refuses_to_mint_error_turns(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec = booking_spec(examples, "flaky", "flaky.cassette.json")
        server = fake_model(self.replies(examples))
        ran = flowproof.run(spec, "--record", *upstream_args(server), keys=True)
        assert ran.code == 5, ran.output
        assert "turn 0 recorded an HTTP 500 from the upstream" in ran.output
        assert "--allow-error-turns" in ran.output and "The upstream model failed" in ran.output
        assert not (examples / "flaky.cassette.json").exists()

    def test_allowed_error_turns_are_kept_and_flagged(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec = booking_spec(examples, "flaky", "flaky.cassette.json", extra="allow_error_turns: true")
        server = fake_model(self.replies(examples))
        ran = flowproof.run(spec, "--record", *upstream_args(server), keys=True)
        assert ran.code == 0, ran.failure
        assert "turn 0 recorded an HTTP 500 from the upstream" in ran.output
        assert load_cassette(examples / "flaky.cassette.json").turns[0].response.status == 500

    def test_heal_diff_says_which_turn_recorded_an_error(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """Re-recording over a good cassette: the heal diff leads with the error turn."""
        server = fake_model(self.replies(examples))
        ran = flowproof.run(examples / "booking.flow.yaml", "--record", "--allow-error-turns",
                            *upstream_args(server), keys=True)
        assert ran.code == 0, ran.failure
        heal = ran.output.split("heal diff", 1)[-1] if "heal diff" in ran.output else ran.output
        assert "turn 0 recorded an HTTP 500 from the upstream" in heal


class TestAdvice:
    def spec(self, examples: Path, name: str, command: str, timeout: float = 60) -> Path:
        return write_spec(examples / f"{name}.flow.yaml", "\n".join([
            f"name: {name}", "agent:", f"  command: {command}", f"  timeout: {timeout}",
            f"cassette: {name}.cassette.json", "steps:", "  - prompt: hi", "",
        ]))

    def test_timeout_upstream_and_crash_each_get_their_own_next_step(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        slow = flowproof.run(self.spec(examples, "slow", "sleep 30", timeout=1), "--record", keys=True)
        crash = flowproof.run(self.spec(examples, "crash", "python -c 'import sys; sys.exit(3)'"),
                              "--record", keys=True)
        cut_server = fake_model([Reply(calls=(ScriptedCall.make("search_flights", {"destination": "NBO"}),),
                                       cut_after=1)] * 3)
        cut = flowproof.run(booking_spec(examples, "cut", "cut.cassette.json"), "--record",
                            *upstream_args(cut_server), keys=True)
        assert (slow.code, crash.code, cut.code) == (5, 5, 5), (slow.output, crash.output, cut.output)
        assert "ran out of time" in slow.output and "start-up" not in slow.output
        assert "The agent crashed" in crash.output and "start-up" not in crash.output
        assert "The upstream model failed" in cut.output and "start-up" not in cut.output
