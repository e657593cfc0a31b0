"""Every flag a documented ``flowproof``/``flowproof-run`` command line uses exists.

The CI workflows in docs/ci.md and the commands in README.md are copied into other
projects as they are: a flag renamed in the code and not in the docs fails a user's CI,
not ours. Each command line in a fenced block is read here (a YAML ``run:`` value, a
GitLab ``script:`` item, a shell line, continuation lines joined, shell comments dropped)
and each of its flags looked up in the ``--help`` of the click command it names.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from flowproof.runner.cli import cli, run_command

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("docs/ci.md", "README.md", "docs/report.md")

#: A command word: at a line's start or after a space, a YAML key, a list dash or a shell
#: operator, optionally behind a path (`.venv/bin/flowproof`), and followed by a space or the end.
_COMMAND = re.compile(r"(?:^|(?<=[\s:;&|(]))(?:[\w./-]*/)?(flowproof-run|flowproof)(?=\s|$)")
#: Where a command ends on its line.
_END = re.compile(r"\s(?:&&|\|\||\||;|\))\s|\s#\s|\s#$")
_FLAG = re.compile(r"^(--?[A-Za-z][\w-]*)")
_NAME = re.compile(r"^\s*(?:-\s+)?name:")


def fenced_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line inside a fenced block, continuation lines joined."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    pending = ""
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"^\s*(`{3,}|~{3,})", line)
        if marker and (fence is None or marker.group(1).startswith(fence)):
            fence = marker.group(1) if fence is None else None
            continue
        if fence is None:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append((start, pending + line))
        pending = ""
    return lines


def commands_of_text(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number, program, words after it) of every flowproof command line in ``text``."""
    found = []
    for number, line in fenced_lines(text):
        if _NAME.match(line):
            continue  # a workflow step's name is prose ("Install flowproof and the agent")
        for match in _COMMAND.finditer(line):
            rest = line[match.end():]
            end = _END.search(" " + rest)
            found.append((number, match.group(1), (rest if end is None else rest[: end.start()]).split()))
    return found


def commands(path: str) -> list[tuple[str, str, list[str]]]:
    """(where, program, words after it) of every flowproof command line of a document."""
    text = (ROOT / path).read_text(encoding="utf-8")
    return [(f"{path}:{number}", program, words) for number, program, words in commands_of_text(text)]


def command_of(program: str, words: list[str]) -> tuple[click.Command, list[str], str]:
    """The click command a line runs, the flags it gives it, and its name for messages."""
    if program == "flowproof-run":
        return run_command, [w for w in words if w.startswith("-")], "flowproof-run"
    sub = next((w for w in words if not w.startswith("-")), None)
    if sub is None or sub not in cli.commands:
        return cli, [w for w in words if w.startswith("-")], "flowproof"
    after = words[words.index(sub) + 1:]
    return cli.commands[sub], [w for w in after if w.startswith("-")], f"flowproof {sub}"


def help_text(command: click.Command) -> str:
    res = CliRunner().invoke(command, ["--help"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def flags_of(words: list[str]) -> list[str]:
    return [m.group(1) for w in words if (m := _FLAG.match(w)) and w != "--"]


LINES = [c for path in DOCUMENTS for c in commands(path)]


def test_the_documents_have_commands_to_check() -> None:
    """The extraction finds the workflows' lines (a parser that found nothing would pass)."""
    where = {w.split(":")[0] for w, _p, _words in LINES}
    assert where == set(DOCUMENTS)
    shards = [words for w, p, words in LINES if w.startswith("docs/ci.md") and "--shard" in words]
    assert len(shards) >= 2  # the GitHub Actions matrix and the GitLab parallel job
    assert any("--markdown" in words for w, _p, words in LINES if w.startswith("docs/ci.md"))


@pytest.mark.parametrize(("where", "program", "words"), LINES, ids=[w for w, _p, _x in LINES])
def test_every_flag_is_in_the_commands_help(where: str, program: str, words: list[str]) -> None:
    command, given, name = command_of(program, words)
    shown = help_text(command)
    unknown = [f for f in flags_of(given) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", shown)]
    assert unknown == [], f"{where}: {name} has no {', '.join(unknown)} (see {name} --help)"


def test_a_flag_the_command_does_not_have_is_caught() -> None:
    """The check itself: a renamed flag in a documented line fails it."""
    command, given, _name = command_of("flowproof-run", ["flows", "--shards", "1/2", "--html", "r.html"])
    shown = help_text(command)
    missing = [f for f in flags_of(given) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", shown)]
    assert missing == ["--shards"]
    line = "        run: flowproof-run flows -j 2 --junit x.xml  # --not-a-flag in a comment"
    [(_number, program, words)] = commands_of_text(f"```yaml\n{line}\n```\n")
    assert (program, flags_of(words)) == ("flowproof-run", ["-j", "--junit"])



def test_the_ci_workflows_are_valid_yaml_of_the_shape_the_page_describes() -> None:
    """Both workflows of docs/ci.md parse, shard with the runner's --shard, keep the reports."""
    import yaml

    text = (ROOT / "docs/ci.md").read_text(encoding="utf-8")
    github, gitlab = (yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```$", text, re.M | re.S))
    replay = github["jobs"]["replay"]
    assert replay["strategy"]["matrix"]["shard"] == [1, 2]
    run = next(step["run"] for step in replay["steps"] if "--shard" in step.get("run", ""))
    assert "--shard ${{ matrix.shard }}/2" in run and '--markdown "$GITHUB_STEP_SUMMARY"' in run
    job = gitlab["flowproof-replay"]
    assert job["parallel"] == 2 and '--shard "$CI_NODE_INDEX/$CI_NODE_TOTAL"' in job["script"][1]
    assert job["artifacts"]["reports"]["junit"] == "flowproof-replay.xml"
    assert {"flowproof-replay.html", "flowproof-replay.md"} <= set(job["artifacts"]["paths"])
    assert gitlab["flowproof-compare"]["artifacts"]["reports"]["junit"] == "flowproof-compare.xml"
