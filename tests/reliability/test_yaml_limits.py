"""Cases 2 and 8: an alias bomb and a huge spec are refused in moments with file:line, by
both `flowproof check` and `flowproof-run`; `check` warns about the `${VAR}` that
`flowproof-run` would refuse."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.e2e.conftest import Flowproof, write_spec

from .helpers import FLOWPROOF

BOMB = """name: alias bomb
agent:
  command: python booking_agent.py
tools:
  - name: search_flights
    result:
      a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
      g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
      h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
      i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
steps:
  - prompt: Book me a flight
"""


def check(flowproof: Flowproof, *specs: Path, **env: str) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run([FLOWPROOF, "check", *map(str, specs)], env=flowproof.env(**env),
                          capture_output=True, timeout=120, check=False)
    return done.returncode, (done.stdout + done.stderr).decode(), time.monotonic() - started


class TestAliasBomb:
    def test_check_refuses_an_alias_bomb_at_its_line(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """Nested anchors in `tools[].result`: exit 2 in seconds, naming file:line, no traceback."""
        spec = write_spec(tmp_path / "bomb.flow.yaml", BOMB)
        code, output, took = check(flowproof, spec)
        assert code == 2 and took < 10, output
        assert "bomb.flow.yaml:15:" in output and "alias" in output and "Traceback" not in output

    def test_run_refuses_an_alias_bomb_before_starting(self, examples: Path, flowproof: Flowproof) -> None:
        """flowproof-run gives the same spec error before any proxy or agent starts."""
        spec = write_spec(examples / "bomb.flow.yaml", BOMB)
        started = time.monotonic()
        ran = flowproof.run(spec, timeout=60)
        assert ran.code == 2 and time.monotonic() - started < 10, ran.output
        assert "bomb.flow.yaml:15:" in ran.output and "alias bomb" in ran.output

    def test_too_many_aliases(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """Many small aliases are refused too (the count is bounded, not only the size)."""
        items = ",".join(["*x"] * 500)
        spec = write_spec(tmp_path / "many.flow.yaml", BOMB.split("tools:")[0]
                          + f"tools:\n  - name: t\n    result: {{x: &x 1, y: [{items}]}}\n"
                          + "steps:\n  - prompt: hi\n")
        code, output, _ = check(flowproof, spec)
        assert code == 2 and "many.flow.yaml:6:" in output and "aliases" in output, output


class TestSpecSize:
    def test_a_24_mb_spec_is_refused_fast(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """The issue's 24 MB spec took 87 s to check; now it is refused before it is parsed."""
        spec = tmp_path / "huge.flow.yaml"
        with spec.open("w", encoding="utf-8") as fh:
            fh.write("name: huge\nagent:\n  command: python a.py\ntools:\n  - name: t\n    result:\n")
            line = "      - " + "x" * 90 + "\n"
            fh.write(line * (24 * 1024 * 1024 // len(line)))
            fh.write("steps:\n  - prompt: hi\n")
        code, output, took = check(flowproof, spec)
        assert code == 2 and took < 5, (took, output)
        assert "huge.flow.yaml:1:1:" in output and "byte limit" in output


class TestVariablesAgree:
    SPEC = ("name: vars\nagent:\n  command: python booking_agent.py\n"
            "steps:\n  - prompt: Book a flight to ${RELIABILITY_UNSET_DEST}\n")

    def test_check_warns_where_run_refuses(self, examples: Path, flowproof: Flowproof) -> None:
        """`check` warns (with the line) about exactly the unset variable `flowproof-run` refuses."""
        spec = write_spec(examples / "vars.flow.yaml", self.SPEC)
        code, output, _ = check(flowproof, spec)
        assert code == 0, output
        assert "warning: " in output and "vars.flow.yaml:5:" in output
        assert "${RELIABILITY_UNSET_DEST} is not set" in output
        ran = flowproof.run(spec, timeout=60)
        assert ran.code == 2 and "vars.flow.yaml:5:" in ran.output
        assert "${RELIABILITY_UNSET_DEST} is not set" in ran.output

    def test_no_warning_once_set(self, tmp_path: Path, flowproof: Flowproof) -> None:
        spec = write_spec(tmp_path / "vars.flow.yaml", self.SPEC)
        code, output, _ = check(flowproof, spec, RELIABILITY_UNSET_DEST="NBO")
        assert code == 0 and "warning" not in output, output
