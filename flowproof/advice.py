"""The commands flowproof tells a user to run: one owner, always shell-quoted.

Every error and report that says "record it first with: …" takes its text from
here, so a spec path with a space or a quote reads as a command that works
when pasted into a shell. A command names its specs as the user would type them
(`shown_spec`: relative to the working directory when inside it), and several
flows that want the same command get one command naming all of them
(`one_command`).

Pure.

>>> record_command("my flows/booking.flow.yaml")
"flowproof-run 'my flows/booking.flow.yaml' --record"
>>> one_command([record_command("a.flow.yaml"), record_command("b.flow.yaml")])
'flowproof-run a.flow.yaml b.flow.yaml --record'
>>> run_again(record_under_pytest("specs/a.flow.yaml::A"))
'pytest specs/a.flow.yaml::A'
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path, PurePath

__all__ = [
    "ADDON_SCRIPT",
    "GENERIC_RECORD_COMMAND",
    "addon_record_command",
    "one_command",
    "record_under_pytest",
    "record_command",
    "run_again",
    "shown_spec",
]

#: What to run when no spec is known (a cassette read on its own).
GENERIC_RECORD_COMMAND = "flowproof-run <spec> --record"
#: The addon as a ``mitmdump -s`` script, relative to a checkout of the project.
ADDON_SCRIPT = "addon/flowproof_addon.py"

#: The record commands flowproof gives, as (program, record flags): what comes between is
#: the targets, so commands of one form merge into one (`one_command`) and drop their record
#: flags to run again (`run_again`).
_FORMS = ((("flowproof-run",), ("--record",)), (("pytest",), ("--flowproof-mode", "record")))


def _command(form: tuple[tuple[str, ...], tuple[str, ...]], targets: Sequence[str], record: bool) -> str:
    program, flags = form
    return shlex.join([*program, *targets, *(flags if record else ())])


def record_command(*spec_paths: Path | str) -> str:
    """The exact command that (re-)records the cassettes of ``spec_paths`` (one or more)."""
    return _command(_FORMS[0], [str(p) for p in spec_paths], record=True)


def record_under_pytest(*nodeids: str) -> str:
    """The command that records the cassettes of the pytest tests ``nodeids`` again, through pytest."""
    return _command(_FORMS[1], nodeids, record=True)


def _parse(command: str) -> tuple[int, list[str]] | None:
    """(form, targets) of a command `record_command` or `record_under_pytest` made, else None."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for number, (program, flags) in enumerate(_FORMS):
        if (len(words) > len(program) + len(flags) and tuple(words[: len(program)]) == program
                and tuple(words[len(words) - len(flags):]) == flags):
            return number, words[len(program) : len(words) - len(flags)]
    return None


def one_command(commands: Sequence[str]) -> str:
    """One command that does what each of ``commands`` (record commands made here) does: the
    targets of commands of one form joined, in order, each once; any other command on a line
    of its own."""
    merged: dict[int, list[str]] = {}
    lines: list[str | int] = []
    for command in commands:
        parsed = _parse(command)
        if parsed is None:
            if command not in lines:
                lines.append(command)
            continue
        number, targets = parsed
        if number not in merged:
            merged[number] = []
            lines.append(number)
        merged[number].extend(t for t in targets if t not in merged[number])
    return "\n".join(
        line if isinstance(line, str) else _command(_FORMS[line], merged[line], record=True) for line in lines
    )


def run_again(command: str) -> str:
    """A record command made here without its record flags: the same tests, run (replayed) again."""
    parsed = _parse(command)
    if parsed is None:
        return command
    number, targets = parsed
    return _command(_FORMS[number], targets, record=False)


def shown_spec(path: Path | str, cwd: Path | str) -> str:
    """``path`` as a command should name it: relative to ``cwd`` (an absolute path) when it lies
    inside it, as it is otherwise (a relative path is already the user's own words)."""
    pure, base = PurePath(path), PurePath(cwd)
    if pure.is_absolute() and pure.is_relative_to(base):
        return str(pure.relative_to(base))
    return str(pure)


def addon_record_command(cassette: Path | str | None) -> str:
    """The bare-mitmdump command that records to ``cassette`` (``PATH`` when none is set)."""
    target = shlex.quote(str(cassette)) if cassette else "PATH"
    return (
        f"mitmdump -s {ADDON_SCRIPT} --set flowproof_mode=record --set flowproof_cassette={target}"
    )
