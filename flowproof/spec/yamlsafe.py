"""YAML safety for spec files: size and alias limits, and composing text into located nodes.

A spec is composed into PyYAML nodes (never constructed into Python objects by
PyYAML) so that every value keeps its line and column. Before anything is
expanded this module refuses what would make composing or walking the document
unbounded: a file over `MAX_SPEC_BYTES`, more than `MAX_ALIASES` aliases, or
aliases that expand the document past `MAX_EXPANDED_NODES` values or
`MAX_EXPANDED_CHARS` characters (nested anchors: "an alias bomb").

Pure apart from `read_limited`, which reads the one file it is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from flowproof.errors import SpecError, SpecProblem
from flowproof.files import UnreadableFileError, read_regular_file

__all__ = [
    "MAX_ALIASES",
    "MAX_EXPANDED_CHARS",
    "MAX_EXPANDED_NODES",
    "MAX_SPEC_BYTES",
    "compose",
    "read_limited",
    "too_big",
]

#: A spec is a page of prose and a few tool results; anything bigger is refused before it is
#: parsed (parsing tens of megabytes of YAML takes minutes in pure Python).
MAX_SPEC_BYTES = 1024 * 1024
#: YAML aliases are shared nodes that the walker expands: nested anchors ("an alias bomb")
#: turn a few lines into billions of values. Both the number of aliases and what the
#: document expands to are bounded, and checked before anything is expanded.
MAX_ALIASES = 200
MAX_EXPANDED_NODES = 100_000
MAX_EXPANDED_CHARS = 8 * 1024 * 1024


def _yaml_problem(display: str, text: str, error: yaml.YAMLError) -> SpecProblem:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        line, col = mark.line + 1, mark.column + 1
    else:
        # A ReaderError (a character YAML forbids) carries only a character position.
        position = getattr(error, "position", 0) or 0
        line = text.count("\n", 0, position) + 1
        col = position - (text.rfind("\n", 0, position) + 1) + 1
    if isinstance(error, yaml.MarkedYAMLError):
        message = error.problem or error.context or "invalid YAML"
        if error.context and error.problem:
            message = f"{error.problem} ({error.context})"
    else:
        message = str(error).splitlines()[0]
    return SpecProblem(display, line, col, f"invalid YAML: {message}",
                       "fix the YAML syntax here (a `:` or `- ` inside text needs quotes)")


class _CountingLoader(yaml.SafeLoader):
    """A SafeLoader that remembers every alias it composes (where, and which node)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases: list[tuple[yaml.Mark, Node]] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            if node is not None:
                self.aliases.append((event.start_mark, node))
                if len(self.aliases) > MAX_ALIASES:
                    raise _TooManyAliases(event.start_mark)
            return node
        return super().compose_node(parent, index)


class _TooManyAliases(Exception):
    def __init__(self, mark: yaml.Mark) -> None:
        super().__init__("too many aliases")
        self.mark = mark


def _expanded_size(root: Node) -> dict[int, tuple[int, int]]:
    """(nodes, characters) each node expands to once aliases are followed, by node id.

    Memoized on node identity, so it costs the size of the document as written, not as
    expanded. Cycles (an alias inside its own anchor) count as one node here; the
    walker reports them.
    """
    sizes: dict[int, tuple[int, int]] = {}
    visiting: set[int] = set()

    def size(node: Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            return 1, 0
        visiting.add(key)
        nodes, chars = 1, 0
        if isinstance(node, ScalarNode):
            chars = len(node.value)
        else:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            for child in children:
                n, c = size(child)
                nodes, chars = nodes + n, chars + c
        visiting.discard(key)
        sizes[key] = (nodes, chars)
        return nodes, chars

    size(root)
    return sizes


def _check_expansion(display: str, root: Node, aliases: list[tuple[yaml.Mark, Node]]) -> None:
    if not aliases:
        return
    sizes = _expanded_size(root)
    nodes, chars = sizes[id(root)]
    if nodes <= MAX_EXPANDED_NODES and chars <= MAX_EXPANDED_CHARS:
        return
    # Blame the alias that copies the most.
    mark, _ = max(aliases, key=lambda a: sizes.get(id(a[1]), (0, 0)))
    what = (f"{nodes:,} values" if nodes > MAX_EXPANDED_NODES
            else f"{chars:,} characters of text")
    raise SpecError([SpecProblem(
        display, mark.line + 1, mark.column + 1,
        f"YAML aliases expand the spec to {what}, over the limit of "
        f"{MAX_EXPANDED_NODES:,} values and {MAX_EXPANDED_CHARS:,} characters "
        "(nested anchors multiply: an alias bomb)",
        "write the data out, or use fewer nested aliases")])



def compose(text: str, display: str) -> Node | None:
    """The YAML ``text`` composed into one located node tree (None for an empty document).

    Raises `SpecError` (naming ``display``, line and column) for text over
    `MAX_SPEC_BYTES`, invalid YAML, too many aliases or an alias expansion past the
    limits, and a document nested too deeply for the composer.
    """
    if len(text) > MAX_SPEC_BYTES:
        raise too_big(display, len(text))
    loader: _CountingLoader | None = None
    try:
        # Inside the try: the reader checks the characters as soon as it is built.
        loader = _CountingLoader(text)
        root = loader.get_single_node()
        if root is not None:
            _check_expansion(display, root, loader.aliases)
    except _TooManyAliases as e:
        raise SpecError([SpecProblem(
            display, e.mark.line + 1, e.mark.column + 1,
            f"the spec uses more than {MAX_ALIASES} YAML aliases",
            "write the data out instead of referring to anchors")]) from None
    except yaml.YAMLError as e:
        raise SpecError([_yaml_problem(display, text, e)]) from None
    except RecursionError:
        raise SpecError([SpecProblem(display, 1, 1, "the YAML nests too deeply",
                                     "flatten the document")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return root


def too_big(display: str, size: int) -> SpecError:
    return SpecError([SpecProblem(
        display, 1, 1,
        f"the spec file is {size:,} bytes, over the {MAX_SPEC_BYTES:,}-byte limit",
        "a spec is prose and small tool results: move large data out of it")])


def read_limited(path: Path | str) -> str:
    """The text of the spec file at ``path``; `SpecError` (one paragraph, no traceback) when it
    is missing, a directory or anything else but a regular file (a FIFO, ``/dev/zero``), not
    UTF-8, unreadable, or over `MAX_SPEC_BYTES`."""
    display = str(path)
    try:
        # A huge file is refused from its size, in milliseconds, not parsed for minutes; a FIFO
        # or a device is refused before a byte is read (it would hang or never end).
        text = read_regular_file(path, MAX_SPEC_BYTES).decode("utf-8")
    except UnreadableFileError as e:
        if e.kind is None:
            raise too_big(display, e.size or 0) from None
        if e.kind == "a directory":
            raise SpecError([SpecProblem(display, 1, 1, "the spec path is a directory",
                                         "name a *.flow.yaml file")]) from None
        raise SpecError([SpecProblem(display, 1, 1, f"the spec path is {e.kind}, not a regular file",
                                     "name a *.flow.yaml file")]) from None
    except FileNotFoundError:
        raise SpecError([SpecProblem(display, 1, 1, "the spec file does not exist",
                                     "check the path")]) from None
    except UnicodeDecodeError as e:
        raise SpecError([SpecProblem(display, 1, 1,
                                     f"the spec file is not UTF-8 text (byte {e.start})",
                                     "save it as UTF-8")]) from None
    except OSError as e:
        raise SpecError([SpecProblem(display, 1, 1,
                                     f"cannot read the spec file: {e.strerror or e}",
                                     "check that the file exists and is readable")]) from None
    # As a file opened as text reads it (universal newlines): CRLF specs parse as before.
    return text.replace("\r\n", "\n").replace("\r", "\n")
