"""``flowproof init``: write a first flow spec beside an agent, inferring what can be inferred.

What the spec says is `flowproof.scaffold`'s; this module finds the agent's file in the
command, reads its imports, picks where the spec goes and writes it, never over a file.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from flowproof.errors import FlowproofError
from flowproof.scaffold import Sdk, agent_kind, first_spec, node_sdks, python_sdks, spec_name

__all__ = ["FirstSpec", "write_first_spec"]

#: What starts a file of each kind when the command names the file alone.
_INTERPRETER = {"python": "python", "node": "node"}


@dataclass(frozen=True, slots=True)
class FirstSpec:
    """What `write_first_spec` wrote: the spec, the agent's command in it, the SDKs found."""

    path: Path
    command: str
    sdks: tuple[Sdk, ...]
    agent_file: Path | None


def _command_tokens(args: Sequence[str]) -> list[str]:
    text = args[0] if len(args) == 1 else shlex.join(args)
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise FlowproofError(f"cannot read the command `{text}` ({e}) — quote it as the shell would") from None
    if not tokens:
        raise FlowproofError("flowproof init needs the command that starts the agent, e.g. `flowproof init agent.py`")
    return tokens


def _agent_file(tokens: list[str], cwd: Path) -> tuple[int, Path] | None:
    """The position and path of the file the command runs: the program itself, or the first
    argument that is a Python or Node file (``python agent.py``, ``uv run agent.py``)."""
    for position, token in enumerate(tokens):
        path = cwd / token
        if path.is_file() and (position == 0 or agent_kind(path) is not None):
            return position, path.resolve()
    return None


def _schema_path() -> Path:
    return Path(str(files("flowproof").joinpath("schemas/flow-spec.schema.json")))


def write_first_spec(
    args: Sequence[str], *, cwd: Path, output: Path | None = None, name: str | None = None,
    prompt: str | None = None,
) -> FirstSpec:
    """Write a first spec for the agent ``args`` start (one command string, or its words).

    The spec goes beside the agent's file (``agent.py`` -> ``agent.flow.yaml``), or into
    ``cwd`` when the command names no file, or to ``output``; the command in it is relative
    to the spec's folder, where the runner starts the agent. Raises FlowproofError (exit 2)
    rather than overwrite a file.
    """
    tokens = _command_tokens(args)
    found = _agent_file(tokens, cwd)
    agent_file = found[1] if found else None
    if output is not None:
        spec_path = output if output.is_absolute() else cwd / output
    else:
        stem = agent_file.stem if agent_file else Path(tokens[0]).name
        spec_path = (agent_file.parent if agent_file else cwd) / f"{stem}.flow.yaml"
    spec_dir = spec_path.parent
    if not spec_dir.is_dir():
        raise FlowproofError(f"{spec_dir} is not a folder — create it, or pass another --output")

    kind = agent_kind(agent_file) if agent_file else None
    sdks: tuple[Sdk, ...] = ()
    if found is not None and agent_file is not None:
        position = found[0]
        relative = os.path.relpath(agent_file, spec_dir)
        if position == 0:
            if kind is not None and not os.access(agent_file, os.X_OK):
                tokens = [_INTERPRETER[kind], relative, *tokens[1:]]
            else:
                tokens = [relative if os.sep in relative else f"./{relative}", *tokens[1:]]
        else:
            tokens[position] = relative
        if kind is not None:
            source = agent_file.read_text(encoding="utf-8", errors="replace")
            sdks = python_sdks(source) if kind == "python" else node_sdks(source)
    command = shlex.join(tokens)
    shown = os.path.relpath(spec_path, cwd)
    text = first_spec(
        name=name or spec_name(agent_file.stem if agent_file else Path(tokens[0]).name),
        command=command,
        spec_file=shown,
        schema=os.path.relpath(_schema_path(), spec_dir),
        sdks=sdks,
        agent_file=agent_file.name if agent_file else None,
        route_base_url=kind == "node" and bool(sdks),
        prompt=prompt,
    )
    try:
        # "x": created here or refused, never over a spec someone wrote (even one made meanwhile).
        with open(spec_path, "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        raise FlowproofError(
            f"{shown} already exists — flowproof init never overwrites a file; edit it, remove it, "
            "or pass --output OTHER.flow.yaml"
        ) from None
    except OSError as e:
        raise FlowproofError(f"cannot write {shown} ({e.strerror or e}) — pass a writable --output") from None
    return FirstSpec(spec_path, command, sdks, agent_file)
