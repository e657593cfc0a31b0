"""Which flow specs a run means: files, directories and globs on the command line.

A directory stands for every ``*.flow.yaml`` below it (recursively, hidden
directories and ``node_modules`` skipped); a glob (``specs/**/*.flow.yaml``,
quoted so the shell leaves it alone) stands for the files it matches; anything
else is a spec file. The result has each spec once, in command-line order, so
``--shard`` and ``-j`` see one list whatever way it was written.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from flowproof.errors import FlowproofError

__all__ = ["FLOW_SUFFIX", "collect_specs"]

#: What a spec file inside a directory is called (a file named on the command line may be
#: called anything).
FLOW_SUFFIX = ".flow.yaml"
#: Directories a recursive search never enters: tool caches and dependencies, not specs.
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})


def collect_specs(arguments: Sequence[str | Path]) -> list[Path]:
    """The spec files the command-line ``arguments`` name, each once, in order.

    Raises `FlowproofError` (one paragraph) for an argument that names nothing:
    a missing file, a glob with no match, a directory with no ``*.flow.yaml``.
    """
    found: list[Path] = []
    for argument in arguments:
        found.extend(_expand(Path(argument)))
    seen: set[Path] = set()
    unique = []
    for path in found:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def _expand(argument: Path) -> list[Path]:
    text = str(argument)
    if argument.is_dir():
        specs = sorted(_flows_below(argument))
        if not specs:
            raise FlowproofError(
                f"{text} is a directory with no *{FLOW_SUFFIX} file in it — name spec files, "
                "or a directory holding some"
            )
        return specs
    if argument.exists():
        return [argument]
    if glob.has_magic(text):
        matches = sorted(Path(m) for m in glob.glob(text, recursive=True))
        specs = [m for m in matches if m.is_file()]
        for directory in (m for m in matches if m.is_dir()):
            specs.extend(sorted(_flows_below(directory)))
        if not specs:
            raise FlowproofError(f"`{text}` matches no spec file — check the pattern")
        return specs
    raise FlowproofError(f"{text}: no such spec file — check the path")


def _flows_below(directory: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(directory):
        # Pruned in place so os.walk does not descend; sorted for a stable walk.
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for name in files:
            if name.endswith(FLOW_SUFFIX):
                yield Path(root) / name
