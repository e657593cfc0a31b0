"""Issue 19 item 10: a recorded reply that carries terminal escape sequences (a window
title, OSC 52 writing the reviewer's clipboard, cursor movement) is shown escaped by
`flowproof show`, `flowproof diff` and the text report, never written raw to the terminal."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from flowproof.testing import FakeModelServer
from tests.e2e.conftest import Flowproof, upstream_args, write_spec

from .helpers import FLOWPROOF
from .test_cassettes import booking_replies

Fake = Callable[..., FakeModelServer]
#: Clipboard write (OSC 52), window title (OSC 0), cursor up two lines and erase (CSI), an
#: 8-bit CSI, a right-to-left override.
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[2A\x1b[K\x9b31m\u202eKQ311"
SHOWN = r"\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[2A\x1b[K\x9b31m\u202eKQ311"


def assert_shown_not_obeyed(output: str) -> None:
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in output, f"{raw!r} reached the terminal"
    assert SHOWN in output, output


def record_hostile(examples: Path, flowproof: Flowproof, fake_model: Fake) -> Path:
    replies = booking_replies(examples)
    replies[-1] = replace(replies[-1], content=f"You're booked. {HOSTILE} Reference B-1042.")
    spec = write_spec(examples / "hostile.flow.yaml", "\n".join([
        "name: hostile reply", "agent:", "  command: python booking_agent.py", "  timeout: 60",
        "cassette: hostile.cassette.json", "steps:", "  - prompt: Book me a flight to Nairobi tomorrow",
        "  - assert: reply contains booked", "",
    ]))
    ran = flowproof.run(spec, "--record", *upstream_args(fake_model(replies)), keys=True)
    assert ran.code == 0, ran.failure
    return examples / "hostile.cassette.json"


def flowproof_cli(flowproof: Flowproof, *args: str | Path) -> str:
    done = subprocess.run([FLOWPROOF, *map(str, args)], capture_output=True, timeout=60, check=False,
                          env=flowproof.env())
    assert done.returncode in (0, 1), done.stderr.decode()  # diff: 1 when the cassettes differ
    return (done.stdout + done.stderr).decode("utf-8", "surrogateescape")


class TestRecordedEscapes:
    def test_show_and_diff_show_them_escaped(self, examples: Path, flowproof: Flowproof, fake_model: Fake) -> None:
        cassette = record_hostile(examples, flowproof, fake_model)
        assert_shown_not_obeyed(flowproof_cli(flowproof, "show", cassette))
        assert_shown_not_obeyed(flowproof_cli(flowproof, "diff", examples / "booking.cassette.json", cassette))

    def test_the_text_report_shows_them_escaped(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """A failing replay with -v prints the failed step and the agent's output (it prints
        the reply): neither obeys the escapes (the log lines: tests/test_log.py)."""
        record_hostile(examples, flowproof, fake_model)
        spec = examples / "hostile.flow.yaml"
        spec.write_text(spec.read_text() + "  - assert: reply contains nothing of the sort\n")
        ran = flowproof.run(spec, "-v")
        assert ran.code == 1, ran.output
        assert ran.output.count(SHOWN) >= 2, ran.output  # the failed step and the agent's stdout
        assert_shown_not_obeyed(ran.output)
