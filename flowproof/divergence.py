"""Why a replayed request matched no recorded turn: envelope first, then field paths.

The report follows the settled review rule: compare the *envelope* (model, tool
names, message roles) before any body, because "you added a tool" is a one-line
answer and a byte diff of two long prompts is not. Field differences come next,
as dotted paths in the spec's own syntax (``messages.0.content``, never
deepdiff's ``root['messages'][0]['content']``). Tool-call arguments are JSON
strings on the wire; they are parsed and diffed inside, so the report reads
``messages.1.tool_calls.0.function.arguments → flight.id: recorded KQ311, replayed KQ999``.
If either side is not valid JSON the whole payload is shown instead.

Pure: plain data in, a `Divergence` out.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from flowproof.advice import GENERIC_RECORD_COMMAND
from flowproof.excerpt import first_difference, window
from flowproof.normalize import looks_like_per_run_id, suggest_rule
from flowproof.turns import RequestView
from flowproof.wire.providers import PROVIDERS, provider

if TYPE_CHECKING:
    from flowproof.cassette import Cassette, RecordedTurn

__all__ = [
    "DEFAULT_RECORD_COMMAND",
    "MAX_FIELDS",
    "ClosestTurns",
    "Divergence",
    "DivergenceKind",
    "FieldChange",
    "Shape",
    "explain_miss",
    "missing_calls",
    "format_pair",
    "format_value",
]

DivergenceKind = Literal["unmatched", "extra", "missing", "after-failure"]
_KINDS: tuple[str, ...] = get_args(DivergenceKind)

#: How many field changes a report lists before "and N more".
MAX_FIELDS = 12
DEFAULT_RECORD_COMMAND = GENERIC_RECORD_COMMAND

# Long values are cut to about this many characters around their first difference.
_WIDTH = 80
_BEFORE = 30


class _Absent:
    """Marks a side where a field does not exist (distinct from JSON null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One differing leaf between the recorded and the replayed body.

    ``path`` is the dotted body path. ``inner`` is the dotted path inside a JSON
    string found at ``path`` (tool-call arguments), or None. ``whole`` is True
    when a JSON payload could not be parsed on one side, so both payloads are
    shown in full. A side where the field does not exist holds `ABSENT`.
    """

    path: str
    recorded: Any
    replayed: Any
    inner: str | None = None
    whole: bool = False

    @property
    def full_path(self) -> str:
        """``path``, plus `` → inner`` for a difference inside a JSON string."""
        path = self.path or "the body"  # the root itself changed (a list where an object was)
        return f"{path} → {self.inner}" if self.inner else path

    def render(self) -> str:
        """``path: recorded X, replayed Y``, long values trimmed around the first difference."""
        if self.whole:
            rec = json.dumps(self.recorded, ensure_ascii=False)
            rep = json.dumps(self.replayed, ensure_ascii=False)
            return (
                f"{self.full_path}: not valid JSON on one side or both, so the whole payload: "
                f"recorded {rec}, replayed {rep}"
            )
        rec, rep = _pair(self.recorded, self.replayed)
        return f"{self.full_path}: recorded {rec}, replayed {rep}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; an absent side is left out."""
        out: dict[str, Any] = {"path": self.path}
        if self.inner:
            out["inner"] = self.inner
        if self.recorded is not ABSENT:
            out["recorded"] = self.recorded
        if self.replayed is not ABSENT:
            out["replayed"] = self.replayed
        if self.whole:
            out["whole"] = True
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> FieldChange:
        """The inverse of `to_json` (a side left out is `ABSENT`)."""
        inner = obj.get("inner")
        return cls(
            str(obj["path"]),
            obj.get("recorded", ABSENT),
            obj.get("replayed", ABSENT),
            None if inner is None else str(inner),
            bool(obj.get("whole", False)),
        )


@dataclass(frozen=True, slots=True)
class Divergence:
    """A replay divergence: which request, the recorded turn it was compared with, how it differs.

    ``envelope`` holds the envelope lines (model, tools, roles), ``fields`` every
    differing leaf (the report lists the first `MAX_FIELDS`). ``note`` qualifies
    the summary line; ``hint`` carries the per-run-id advice with a volatile rule.
    """

    kind: DivergenceKind
    request_number: int | None
    closest_index: int | None
    envelope: tuple[str, ...] = ()
    fields: tuple[FieldChange, ...] = ()
    note: str | None = None
    hint: str | None = None

    def summary(self) -> str:
        """The report's first line: one sentence."""
        req = f"request {self.request_number}" if self.request_number is not None else "a request"
        if self.kind == "unmatched":
            line = f"{req} matches no recorded turn"
            if self.closest_index is not None:
                line += f"; closest is turn {self.closest_index}"
                if self.note:
                    line += f" ({self.note})"
            return line
        if self.kind == "extra":
            return f"{req} {self.note or _EXTRA_NOTE}"
        if self.kind == "after-failure":
            return f"{req} was not matched: {self.note or 'the replay had already diverged'}"
        return self.note or "some recorded turns were never requested"

    def render(self, record_command: str = DEFAULT_RECORD_COMMAND) -> str:
        """The report: summary, ``- `` bullets (envelope, then fields), hint, what to do (naming
        ``record_command``; "" names none, for a report that gives the command elsewhere)."""
        lines = [self.summary()]
        lines += [f"- {e}" for e in self.envelope]
        lines += [f"- {f.render()}" for f in self.fields[:MAX_FIELDS]]
        if len(self.fields) > MAX_FIELDS:
            lines.append(f"- and {len(self.fields) - MAX_FIELDS} more field changes")
        if self.hint:
            lines.append(self.hint.rstrip("\n"))
        lines.append(self._todo(record_command))
        return "\n".join(lines)

    def _todo(self, cmd: str) -> str:
        # No command (""): the report names it once, on its last line.
        with_cmd = f": {cmd}" if cmd else "."
        if self.kind == "after-failure":
            return "Fix the first divergence; the requests after it follow from it."
        if self.kind == "missing":
            return f"If the agent now makes fewer calls on purpose, re-record the cassette{with_cmd}"
        if self.kind == "extra":
            return f"If the extra call is intended, re-record the cassette{with_cmd}"
        return f"If this change is intended, re-record the cassette{with_cmd}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (for the event log and ``--json``)."""
        return {
            "kind": self.kind,
            "request_number": self.request_number,
            "closest_index": self.closest_index,
            "envelope": list(self.envelope),
            "fields": [f.to_json() for f in self.fields],
            "note": self.note,
            "hint": self.hint,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Divergence:
        """The inverse of `to_json`; raises `ValueError` for a kind that is not a divergence
        kind and `KeyError`/`TypeError` for a missing or mistyped field."""
        kind = obj["kind"]
        if kind not in _KINDS:
            raise ValueError(f"not a divergence kind: {kind!r}")

        def number(key: str) -> int | None:
            value = obj.get(key)
            return None if value is None else int(value)

        note, hint = obj.get("note"), obj.get("hint")
        return cls(
            kind=kind,
            request_number=number("request_number"),
            closest_index=number("closest_index"),
            envelope=tuple(str(line) for line in obj.get("envelope") or ()),
            fields=tuple(FieldChange.from_json(f) for f in obj.get("fields") or ()),
            note=None if note is None else str(note),
            hint=None if hint is None else str(hint),
        )


_EXTRA_NOTE = (
    "matches no recorded turn, and every recorded turn was already served: "
    "the agent made more calls than recorded"
)


# --------------------------------------------------------------------------- value display


def _plain(value: Any) -> str:
    """A value as the report shows it: simple strings bare, everything else as compact JSON."""
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, str) and _is_bare(value):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_bare(s: str) -> bool:
    # A bare string must not read as another JSON type, hold a separator or any whitespace.
    if not s or any(c.isspace() for c in s) or "," in s:
        return False
    try:
        json.loads(s)
    except (ValueError, RecursionError):
        return True
    return False


def format_value(value: Any) -> str:
    """One value as a report shows it, trimmed to about 80 characters."""
    text = _plain(value)
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"


def _window(text: str, at: int) -> str:
    return window(text, max(0, at - _BEFORE), _WIDTH)


def format_pair(recorded: Any, other: Any) -> tuple[str, str]:
    """Two values as a report shows them side by side, long ones cut around their first difference."""
    return _pair(recorded, other)


def _pair(recorded: Any, replayed: Any) -> tuple[str, str]:
    """Both sides for display; long values are trimmed around their first difference."""
    if isinstance(recorded, str) and isinstance(replayed, str):
        if len(recorded) <= _WIDTH and len(replayed) <= _WIDTH:
            return _plain(recorded), _plain(replayed)
        # Trim the text itself, then quote the excerpt, so the quotes survive the cut.
        at = first_difference(recorded, replayed)
        return (
            json.dumps(_window(recorded, at), ensure_ascii=False),
            json.dumps(_window(replayed, at), ensure_ascii=False),
        )
    rec, rep = _plain(recorded), _plain(replayed)
    if len(rec) <= _WIDTH and len(rep) <= _WIDTH:
        return rec, rep
    at = first_difference(rec, rep)
    return _window(rec, at), _window(rep, at)


# --------------------------------------------------------------------------- field diff


def _dotted(segments: Sequence[Any]) -> str:
    return ".".join(str(s) for s in segments)


def _parse_json_container(value: Any) -> tuple[bool, Any]:
    if not isinstance(value, str):
        return False, None
    stripped = value.lstrip()
    if not stripped or stripped[0] not in "[{":
        return False, None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return False, None
    return isinstance(parsed, dict | list), parsed


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _leaf_changes(recorded: Any, replayed: Any) -> list[tuple[list[Any], Any, Any]]:
    """Every differing leaf as (path segments, recorded, replayed), in body order."""
    # Imported here: deepdiff costs 0.4-0.5 s (python -X importtime, 3 runs on a loaded 2-CPU
    # machine), replay and compare import this module on every proxy start, and only a miss
    # or a drift needs the diff.
    from deepdiff import DeepDiff
    from deepdiff.helper import notpresent

    # threshold_to_diff_deeper=0: always descend, so a changed key names its own path
    # instead of the whole enclosing object being reported as replaced.
    # ignore_nan_inequality: NaN (Python's json accepts it) never equals itself, and a
    # report line "recorded NaN, replayed NaN" names no change at all.
    diff = DeepDiff(recorded, replayed, view="tree", verbose_level=2, threshold_to_diff_deeper=0,
                    ignore_nan_inequality=True)
    out: list[tuple[list[Any], Any, Any]] = []
    for report_type in diff:
        for level in diff[report_type]:
            segments = level.path(output_format="list")
            t1 = ABSENT if level.t1 is notpresent else level.t1
            t2 = ABSENT if level.t2 is notpresent else level.t2
            replayed_at = level.path(output_format="list", use_t2=True)
            if t1 is not ABSENT and t2 is not ABSENT and replayed_at != segments:
                # deepdiff aligned the lists and paired items at different indices; one path
                # cannot name both, so say it as it reads on each side: removed here, added there.
                out.append((list(segments), t1, ABSENT))
                out.append((list(replayed_at), ABSENT, t2))
                continue
            out.append((list(segments), t1, t2))
    # deepdiff groups by report type; the report reads in body order instead.
    out.sort(key=lambda c: _sort_key(c[0]))
    return out


def _sort_key(segments: Sequence[Any]) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, s, "") if isinstance(s, int) else (1, 0, str(s)) for s in segments)


def diff_fields(recorded: Any, replayed: Any) -> list[FieldChange]:
    """The field-level diff of two bodies, with JSON strings (tool-call arguments) diffed inside."""
    changes: list[FieldChange] = []
    for segments, rec, rep in _leaf_changes(recorded, replayed):
        path = _dotted(segments)
        if isinstance(rec, str) and isinstance(rep, str):
            ok_rec, parsed_rec = _parse_json_container(rec)
            ok_rep, parsed_rep = _parse_json_container(rep)
            if ok_rec and ok_rep:
                inner = _leaf_changes(parsed_rec, parsed_rep)
                if inner and all(seg for seg, _, _ in inner):
                    changes += [FieldChange(path, a, b, inner=_dotted(seg)) for seg, a, b in inner]
                    continue
                # Otherwise the JSON is equal (only key order or spacing moved: the cassette
                # pins the raw string) or its root changed type: show the two strings.
            elif segments and segments[-1] == "arguments" and not (_is_json(rec) and _is_json(rep)):
                # Tool-call arguments that do not parse: a field-level answer would be half a truth.
                changes.append(FieldChange(path, rec, rep, whole=True))
                continue
        changes.append(FieldChange(path, rec, rep))
    return changes


# --------------------------------------------------------------------------- envelope


def _names(items: Sequence[str]) -> str:
    return ", ".join(items)


def envelope_changes(
    recorded: RequestView, replayed: RequestView, *, other: str = "replayed"
) -> list[str]:
    """Envelope differences as report lines: model, then tools by name, then message roles.

    ``other`` names the side compared with the recording ("live" in compare mode).
    """
    lines: list[str] = []
    if recorded.model != replayed.model:
        lines.append(f"model: recorded {_plain(recorded.model)}, {other} {_plain(replayed.model)}")
    added = [t for t in replayed.tools if t not in recorded.tools]
    removed = [t for t in recorded.tools if t not in replayed.tools]
    if added:
        noun = "a tool" if len(added) == 1 else "tools"
        lines.append(f"you added {noun}: {_names(added)}")
    if removed:
        noun = "a tool" if len(removed) == 1 else "tools"
        lines.append(f"you removed {noun}: {_names(removed)}")
    if not added and not removed and recorded.tools != replayed.tools:
        lines.append(
            f"tool order changed: recorded {_names(recorded.tools)}; "
            f"{other} {_names(replayed.tools)}"
        )
    if recorded.roles != replayed.roles:
        lines.append(
            "message roles changed: "
            f"recorded {_names(recorded.roles) or '(none)'}; "
            f"{other} {_names(replayed.roles) or '(none)'}"
        )
    return lines


# --------------------------------------------------------------------------- the closest turn
#
# A request that matched nothing is explained against the recorded turn it shares the most
# with: first its API, then its model, its tool set and its depth (how many messages or
# items it carries), then the most text. Never by position alone: an agent's concurrent
# side call (a session title) is often the earliest unserved turn, and a report against it
# would never show the word that was edited (docs/design.md#divergence-reports).
#
# The four ranks come straight from the parsed bodies and the provider table's roots, so
# ranking a cassette costs a few dict lookups per turn (`ClosestTurns`, built once, on the
# first miss); only the turns that tie on them are compared by text.


@dataclass(frozen=True, slots=True)
class Shape:
    """What a request is, before what it says: its API, model, tool names and depth."""

    api: str | None
    model: str | None
    tools: frozenset[str]
    depth: int | None

    def shared(self, other: Shape) -> tuple[bool, bool, bool, bool]:
        """Which of API, model, tool set and depth ``other`` shares, in rank order."""
        return (
            self.api is not None and self.api == other.api,
            self.model is not None and self.model == other.model,
            self.tools == other.tools,
            self.depth is not None and self.depth == other.depth,
        )


_SHARED_NAMES = ("API", "model", "tools", "depth")
_ALL_MODEL_ROOTS = tuple(dict.fromkeys(r for p in PROVIDERS for r in p.model_roots))
_ALL_MESSAGE_ROOTS = tuple(dict.fromkeys(r for p in PROVIDERS for r in p.message_roots))
_ALL_TOOL_ROOTS = tuple(dict.fromkeys(r for p in PROVIDERS for r in p.tool_roots))
#: How deep below a tool root a tool's ``name`` may sit (Gemini: tools.0.functionDeclarations.0.name).
_TOOL_NAME_DEPTH = 4


@functools.cache
def _roots(api: str | None) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    try:
        row = provider(api or "")
    except KeyError:
        return _ALL_MODEL_ROOTS, _ALL_MESSAGE_ROOTS, _ALL_TOOL_ROOTS
    return row.model_roots, row.message_roots, row.tool_roots


def _tool_names(value: Any, names: set[str], depth: int = 0) -> None:
    """Add every string ``name`` in a tool declaration list to ``names``, to a fixed depth
    (the schemas below are never walked)."""
    if depth > _TOOL_NAME_DEPTH:
        return
    if isinstance(value, list):
        for item in value:
            _tool_names(item, names, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "name" and isinstance(item, str):
                names.add(item)
            elif isinstance(item, dict | list):
                _tool_names(item, names, depth + 1)


def request_shape(api: str | None, body: Any, path_fields: Mapping[str, str] | None = None) -> Shape:
    """The `Shape` of a parsed request body of ``api`` (a codec name) and its URL path fields."""
    model_roots, message_roots, tool_roots = _roots(api)
    model = path_fields.get("model") if path_fields else None
    depth: int | None = None
    tools: set[str] = set()
    if isinstance(body, dict):
        for root in model_roots:
            if model is None and isinstance(value := body.get(root), str):
                model = value
        for root in message_roots:
            if depth is None and isinstance(value := body.get(root), list):
                depth = len(value)
        for root in tool_roots:
            if (value := body.get(root)) is not None:
                _tool_names(value, tools)
    return Shape(api, model, frozenset(tools), depth)


#: "Most common text", cheaply: the request's longest strings (`_TEXTS` of them, at least
#: `_MIN_TEXT` characters) are compared with the candidate's strings at the same places, by
#: their beginnings and endings at a few lengths. Two prompts that share their first and last
#: kilobyte share two kilobytes, so a one-word edit in the middle of a long prompt leaves it
#: mostly shared, as it is; no turn's body is walked, only looked up at those places.
_PIECES = (16, 64, 256, 1024)
_TEXTS = 4
_MIN_TEXT = 16
_Path = tuple[str | int, ...]


def _strings(value: Any, path: _Path, out: list[tuple[_Path, str]]) -> None:
    if isinstance(value, str):
        if len(value) >= _MIN_TEXT:
            out.append((path, value))
    elif isinstance(value, dict):
        for key, item in value.items():
            _strings(item, (*path, key), out)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _strings(item, (*path, i), out)


def _longest_strings(body: Any) -> list[tuple[_Path, str]]:
    found: list[tuple[_Path, str]] = []
    _strings(body, (), found)
    found.sort(key=lambda item: -len(item[1]))
    return found[:_TEXTS]


def _at(body: Any, path: _Path) -> Any:
    for segment in path:
        try:
            body = body[segment]
        except (KeyError, IndexError, TypeError):
            return None
    return body


def _overlap(text: str, other: Any) -> int:
    """How much of ``text`` ``other`` shares: all of it, or its longest shared beginning plus
    its longest shared ending among `_PIECES`."""
    if not isinstance(other, str):
        return 0
    if text == other:
        return len(text)
    head = tail = 0
    for size in _PIECES:
        if size >= len(text) or text[:size] != other[:size]:
            break
        head = size
    for size in _PIECES:
        if size >= len(text) or text[-size:] != other[-size:]:
            break
        tail = size
    return min(head + tail, len(text))


class ClosestTurns:
    """A cassette's turns grouped by `Shape`, to find the closest unserved turn to a request
    without looking into every turn (`closest`)."""

    def __init__(
        self,
        turns: Sequence[RecordedTurn],
        path_fields: Callable[[int], Mapping[str, str]] | None = None,
    ) -> None:
        self._turns = turns
        self._shapes: dict[Shape, list[int]] = {}
        for pos, turn in enumerate(turns):
            fields = path_fields(pos) if path_fields is not None else None
            shape = request_shape(turn.provider, turn.request.body, fields)
            self._shapes.setdefault(shape, []).append(pos)

    def closest(
        self, shape: Shape, body: Any, consumed: Collection[int]
    ) -> tuple[int, tuple[bool, bool, bool, bool]] | None:
        """The position of the unserved turn closest to a request of ``shape`` and ``body``,
        and what its shape shares with the request; None when every turn was served."""
        best: tuple[bool, bool, bool, bool] | None = None
        candidates: list[int] = []
        for recorded, positions in self._shapes.items():
            left = [p for p in positions if p not in consumed] if consumed else positions
            if not left:
                continue
            shared = shape.shared(recorded)
            if best is None or shared > best:
                best, candidates = shared, list(left)
            elif shared == best:
                candidates.extend(left)
        if best is None:
            return None
        if len(candidates) == 1:
            return candidates[0], best
        texts = _longest_strings(body)
        turns = self._turns

        def score(pos: int) -> int:
            recorded = turns[pos].request.body
            return sum(_overlap(text, _at(recorded, path)) for path, text in texts)

        # The most shared text wins; among equals the earliest (recorded order).
        return min(candidates, key=lambda pos: (-score(pos), pos)), best


def _closest_note(shared: tuple[bool, bool, bool, bool], same_system: bool | None) -> str:
    if same_system:
        return "same conversation"
    names = [name for name, ok in zip(_SHARED_NAMES, shared, strict=True) if ok]
    what = f"the closest unconsumed turn: same {_names_and(names)}" if names else (
        "the earliest unconsumed turn; none shares this request's API, model, tools or depth"
    )
    if same_system is False:
        what += "; none shares this request's system prompt"
    return what


def _names_and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# --------------------------------------------------------------------------- explain_miss


def _view_of(
    views: Callable[[RecordedTurn], RequestView | None] | None, turn: RecordedTurn
) -> RequestView | None:
    if views is None:
        return None
    try:
        return views(turn)
    except Exception:  # noqa: BLE001 — a view is an aid to the report, never a reason to lose it
        return None


def _per_run_hint(fields: Sequence[FieldChange]) -> str | None:
    kinds: list[tuple[str, str]] = []
    for f in fields:
        if not (isinstance(f.recorded, str) and isinstance(f.replayed, str)):
            return None
        kind = looks_like_per_run_id(f.recorded, f.replayed)
        if kind is None:
            return None
        kinds.append((f.path, kind))
    if not kinds:
        return None
    seen: set[tuple[str, str]] = set()
    rules: list[str] = []
    for path, kind in kinds:
        if (path, kind) not in seen:
            seen.add((path, kind))
            rules.append(suggest_rule(path, kind).rstrip("\n"))
    what = "; ".join(f"{kind} at {path}" for path, kind in sorted(seen))
    return (
        f"hint: every difference looks like a per-run id ({what}). "
        "If it changes on every run, declare it volatile in the spec "
        "so it is replaced before hashing:\n"
        + "\n".join(rules)
    )


def _path_field_changes(recorded: Mapping[str, str], replayed: Mapping[str, str]) -> list[FieldChange]:
    """The fields named in the URL path that differ, as field changes (path = the field name)."""
    return [
        FieldChange(name, recorded.get(name, ABSENT), replayed.get(name, ABSENT))
        for name in sorted({*recorded, *replayed})
        if recorded.get(name) != replayed.get(name)
    ]


def explain_miss(
    body: Any,
    view: RequestView | None,
    cassette: Cassette,
    consumed: Collection[int],
    views: Callable[[RecordedTurn], RequestView | None] | None = None,
    request_number: int | None = None,
    path_fields: Mapping[str, str] | None = None,
    recorded_path_fields: Callable[[RecordedTurn], Mapping[str, str]] | None = None,
    *,
    api: str | None = None,
    index: ClosestTurns | None = None,
) -> Divergence:
    """Explain why a request (parsed ``body``, its ``view``) matched no recorded turn.

    ``consumed`` holds the positions in ``cassette.turns`` already served.
    ``path_fields`` are the fields the request's URL path names (Gemini's model) and
    ``recorded_path_fields`` gives a recorded turn's; a difference there is reported
    like a body field (or by the envelope, for the model).
    The candidate is the unconsumed turn the request shares the most with: its API
    (``api``, else ``view.provider``), model, tool set and depth, then the most text
    (`ClosestTurns`; pass ``index`` to reuse one built over ``cassette.turns``), the
    earliest among equals; when none is left the request is an extra call. Only the
    request and the chosen turn are viewed (through ``views``).
    """
    if len(consumed) >= len(cassette.turns):
        return Divergence(kind="extra", request_number=request_number, closest_index=None)
    if index is None:
        turns = cassette.turns
        index = ClosestTurns(
            turns, (lambda pos: recorded_path_fields(turns[pos])) if recorded_path_fields is not None else None
        )
    api = api or (view.provider if view is not None else None)
    found = index.closest(request_shape(api, body, path_fields), body, consumed)
    if found is None:
        return Divergence(kind="extra", request_number=request_number, closest_index=None)
    position, shared = found
    candidate = cassette.turns[position]
    candidate_view = _view_of(views, candidate)
    same_system = (
        candidate_view.system == view.system if view is not None and candidate_view is not None else None
    )
    note = _closest_note(shared, same_system)

    envelope: list[str] = []
    if view is not None and candidate_view is not None:
        envelope = envelope_changes(candidate_view, view)
    fields = _path_field_changes(
        recorded_path_fields(candidate) if recorded_path_fields is not None else {}, path_fields or {}
    ) + diff_fields(candidate.request.body, body)
    if any(e.startswith("model:") for e in envelope):
        # The envelope already said it, in the same words.
        fields = [f for f in fields if f.path != "model"]
    if not fields and not envelope:
        # Same parsed JSON, different bytes: key order, whitespace or number formatting moved.
        note += (
            "; the parsed bodies are equal, so the bytes differ in key order, "
            "spacing or number format"
        )
    hint = None if envelope else _per_run_hint(fields)
    return Divergence(
        kind="unmatched",
        request_number=request_number,
        closest_index=candidate.index,
        envelope=tuple(envelope),
        fields=tuple(fields),
        note=note,
        hint=hint,
    )


def missing_calls(indexes: Sequence[int]) -> Divergence | None:
    """The recorded turns never requested (their ``index``, in recorded order) as a ``missing``
    divergence, or None when there are none."""
    if not indexes:
        return None
    named = ", ".join(str(i) for i in indexes)
    if len(indexes) == 1:
        note = f"1 recorded turn was never requested: turn {named}"
    else:
        note = f"{len(indexes)} recorded turns were never requested: turns {named}"
    note += " (the agent made fewer calls than recorded)"
    return Divergence(kind="missing", request_number=None, closest_index=indexes[0], note=note)
