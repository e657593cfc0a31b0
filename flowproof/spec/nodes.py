"""A walker over composed YAML nodes that reports every problem with its ``file:line:col``.

`NodeWalker` knows YAML, not flow specs: it reads a node as a mapping (text keys,
no duplicates), a list, text, a template (text whose ``${VAR}`` syntax is
checked now and filled in later), a boolean, a positive number, or plain
JSON-like data. Each reader records a `SpecProblem` and returns None instead of
raising, so one pass finds every problem in the file. The spec schema
(`flowproof.spec.loader`) is a subclass that knows which keys mean what.

Pure.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from flowproof.errors import SpecError, SpecProblem
from flowproof.spec.clauses import suggest
from flowproof.spec.types import Location
from flowproof.spec.variables import VariableSyntaxError, check_variables

__all__ = ["BOOL", "FLOAT", "INT", "NULL", "STR", "TAG", "TIMESTAMP", "NodeWalker", "kind_of"]

TAG = "tag:yaml.org,2002:"
NULL, BOOL, INT, FLOAT, STR = (TAG + t for t in ("null", "bool", "int", "float", "str"))
TIMESTAMP = TAG + "timestamp"


def kind_of(node: Node) -> str:
    """What a node is, for messages: ``a mapping``, ``a list``, ``nothing`` or its text quoted."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if node.tag == NULL:
        return "nothing"
    value = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    return f"`{value}`"


class NodeWalker:
    """Reads composed nodes into plain values, collecting problems as it goes."""

    def __init__(self, display: str) -> None:
        self.display = display
        self.problems: list[SpecProblem] = []
        self._constructor = yaml.constructor.SafeConstructor()

    # -- problems and locations ------------------------------------------------

    def loc(self, node: Node, offset: int = 0) -> Location:
        mark = node.start_mark
        return Location(self.display, mark.line + 1, mark.column + 1 + offset)

    def problem(self, node: Node, message: str, hint: str = "", offset: int = 0) -> None:
        loc = self.loc(node, offset)
        self.problems.append(SpecProblem(loc.path, loc.line, loc.col, message, hint))

    def absorb(self, error: SpecError) -> None:
        self.problems.extend(error.problems)

    def text_origin(self, node: ScalarNode) -> tuple[Location, bool]:
        """Where a scalar's text starts, and whether columns inside it can be trusted."""
        span = node.end_mark.index - node.start_mark.index
        if node.style is None and span == len(node.value):
            return self.loc(node), True
        if node.style in ("'", '"') and span == len(node.value) + 2:
            return self.loc(node, 1), True
        return self.loc(node), False

    # -- scalars -----------------------------------------------------------------

    def mapping(self, node: Node, what: str) -> dict[str, tuple[ScalarNode, Node]] | None:
        """A mapping node's entries by key text; reports non-text and duplicate keys."""
        if not isinstance(node, MappingNode):
            self.problem(node, f"{what} must be a mapping, found {kind_of(node)}",
                         "write it as `key: value` lines")
            return None
        entries: dict[str, tuple[ScalarNode, Node]] = {}
        for key, value in node.value:
            if not isinstance(key, ScalarNode) or key.tag == TAG + "merge":
                self.problem(key, f"a key in {what} must be plain text",
                             "write `key: value`; merge keys (<<) are not supported")
                continue
            if key.value in entries:
                self.problem(key, f"`{key.value}` appears twice in {what}", "keep only one")
                continue
            entries[key.value] = (key, value)
        return entries

    def check_keys(self, entries: dict[str, tuple[ScalarNode, Node]], allowed: tuple[str, ...],
                   what: str) -> None:
        for name, (key, _) in entries.items():
            if name not in allowed:
                self.problem(key, f"unknown key `{name}` in {what}", suggest(name, allowed))

    def sequence(self, node: Node, what: str) -> list[Node] | None:
        if isinstance(node, ScalarNode) and node.tag == NULL:
            return []
        if not isinstance(node, SequenceNode):
            self.problem(node, f"{what} must be a list, found {kind_of(node)}",
                         "write one `- ` entry per line")
            return None
        return list(node.value)

    def text(self, node: Node, what: str, *, allow_empty: bool = False) -> str | None:
        """A scalar as the text written (``8080`` -> ``"8080"``); None after reporting."""
        if not isinstance(node, ScalarNode):
            self.problem(node, f"{what} must be text, found {kind_of(node)}",
                         "quote it if it should be a single string")
            return None
        if node.tag == NULL:
            self.problem(node, f"{what} is empty", "give it a value")
            return None
        if not allow_empty and not node.value.strip():
            self.problem(node, f"{what} is empty", "give it a value")
            return None
        return str(node.value)

    def template(self, node: Node, what: str, *, handles: bool = False) -> str | None:
        """Text that ``resolve_variables`` will fill in: its ``${`` syntax is checked now
        (``handles``: ``${flowproof.…}`` handles are allowed here)."""
        value = self.text(node, what)
        if value is not None and not self.check_variable_syntax(node, value, handles=handles):
            return None
        return value

    def check_variable_syntax(self, node: Node, value: str, *, handles: bool = False) -> bool:
        try:
            check_variables(value, handles=handles)
        except VariableSyntaxError as e:
            offset = 0
            if isinstance(node, ScalarNode):
                origin, exact = self.text_origin(node)
                if exact:
                    offset = origin.col - self.loc(node).col + e.offset
            self.problem(node, str(e), e.hint, offset)
            return False
        return True

    def boolean(self, node: Node, what: str) -> bool | None:
        if isinstance(node, ScalarNode) and node.tag == BOOL:
            return bool(self._constructor.construct_yaml_bool(node))
        self.problem(node, f"{what} must be true or false, found {kind_of(node)}")
        return None

    def number(self, node: Node, what: str) -> float | None:
        if isinstance(node, ScalarNode) and node.tag in (INT, FLOAT):
            try:
                if node.tag == INT:
                    value = float(self._constructor.construct_yaml_int(node))
                else:
                    value = float(self._constructor.construct_yaml_float(node))
            except (ValueError, OverflowError):
                value = math.nan
            if math.isfinite(value) and value > 0:
                return value
        self.problem(node, f"{what} must be a positive number of seconds, found {kind_of(node)}")
        return None

    def amount(self, node: Node, what: str) -> float | None:
        """A number that may be zero (a price), never negative."""
        if isinstance(node, ScalarNode) and node.tag in (INT, FLOAT):
            try:
                value = float(self._constructor.construct_yaml_float(node))
            except (ValueError, OverflowError):
                value = math.nan
            if math.isfinite(value) and value >= 0:
                return value
        self.problem(node, f"{what} must be a number of at least 0, found {kind_of(node)}")
        return None

    def data(self, node: Node, stack: tuple[int, ...] = ()) -> Any:
        """A ``result:`` value as plain JSON-like data (None after reporting a problem)."""
        if id(node) in stack:
            raise _Unusable(node, "a YAML alias refers to itself", "results must be finite data")
        stack = (*stack, id(node))
        if isinstance(node, ScalarNode):
            try:
                if node.tag == NULL:
                    return None
                if node.tag == BOOL:
                    return bool(self._constructor.construct_yaml_bool(node))
                if node.tag == INT:
                    return int(self._constructor.construct_yaml_int(node))
                if node.tag == FLOAT:
                    return float(self._constructor.construct_yaml_float(node))
            except (ValueError, OverflowError):
                return node.value
            if node.tag in (STR, TIMESTAMP):
                # A timestamp stays the text written: results are sent as JSON.
                if not self.check_variable_syntax(node, node.value):
                    raise _Unusable(node, "", "")
                return node.value
            raise _Unusable(node, f"unsupported YAML tag `{node.tag}` in a result",
                            "results are JSON-like: mappings, lists, text, numbers, booleans, null")
        if isinstance(node, SequenceNode):
            return [self.data(item, stack) for item in node.value]
        if isinstance(node, MappingNode):
            out: dict[str, Any] = {}
            for key, value in node.value:
                if not isinstance(key, ScalarNode) or key.tag == TAG + "merge":
                    raise _Unusable(key, "a key in a result must be plain text",
                                    "merge keys (<<) and complex keys are not supported")
                out[key.value] = self.data(value, stack)
            return out
        raise _Unusable(node, "unsupported YAML node in a result", "")  # pragma: no cover

    def result(self, node: Node) -> Any:
        try:
            return self.data(node)
        except _Unusable as e:
            if e.message:
                self.problem(e.node, e.message, e.hint)
            return None


class _Unusable(Exception):
    """Internal: a result value that cannot become plain data (reported at ``node``)."""

    def __init__(self, node: Node, message: str, hint: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message
        self.hint = hint

