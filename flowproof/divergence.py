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

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from flowproof.commands import GENERIC_RECORD_COMMAND
from flowproof.excerpt import first_difference, window
from flowproof.model import RequestView
from flowproof.normalize import looks_like_per_run_id, suggest_rule

if TYPE_CHECKING:
    from flowproof.cassette import Cassette, RecordedTurn

__all__ = [
    "DEFAULT_RECORD_COMMAND",
    "MAX_FIELDS",
    "Divergence",
    "DivergenceKind",
    "FieldChange",
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
        """The report: summary, ``- `` bullets (envelope, then fields), hint, what to do."""
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
        if self.kind == "after-failure":
            return "Fix the first divergence; the requests after it follow from it."
        if self.kind == "missing":
            return f"If the agent now makes fewer calls on purpose, re-record the cassette: {cmd}"
        if self.kind == "extra":
            return f"If the extra call is intended, re-record the cassette: {cmd}"
        return f"If this change is intended, re-record the cassette: {cmd}"

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
) -> Divergence:
    """Explain why a request (parsed ``body``, its ``view``) matched no recorded turn.

    ``consumed`` holds the positions in ``cassette.turns`` already served.
    ``path_fields`` are the fields the request's URL path names (Gemini's model) and
    ``recorded_path_fields`` gives a recorded turn's; a difference there is reported
    like a body field (or by the envelope, for the model).
    The candidate is the earliest unconsumed turn of the same conversation (the
    same system prompt as ``view.system``, recorded views from ``views``), else the
    earliest unconsumed turn; when none is left the request is an extra call.
    """
    unconsumed = [t for pos, t in enumerate(cassette.turns) if pos not in consumed]
    if not unconsumed:
        return Divergence(kind="extra", request_number=request_number, closest_index=None)

    candidate: RecordedTurn | None = None
    candidate_view: RequestView | None = None
    note = "the earliest unconsumed turn"
    if view is not None and views is not None:
        for t in unconsumed:
            tv = _view_of(views, t)
            if tv is not None and tv.system == view.system:
                candidate, candidate_view, note = t, tv, "same conversation"
                break
        else:
            note = "the earliest unconsumed turn; none shares this request's system prompt"
    if candidate is None:
        candidate = unconsumed[0]
        candidate_view = _view_of(views, candidate)

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
