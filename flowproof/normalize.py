"""Volatile spans and portable paths, applied to request bodies before hashing.

Plain SDK agents send byte-identical bodies and must be hashed on their exact
bytes, so a `Normalizer` with nothing declared is the
identity and never parses JSON. Production agents (Claude Code, codex,
openai-agents) put per-run identifiers in their bodies; a spec declares
``volatile:`` rules (or names a preset below) and each matched span is replaced by
``«volatile:<name>»`` at record and replay alike. The run's working directory and
HOME become ``«cwd»``/``«home»`` so a cassette recorded on a laptop replays in CI.
A secret the spec names (``assert_no_secret_leak``) becomes its placeholder
(``«secret:NAME»``) the same way, in request bodies before hashing and in
recorded responses, and goes back into replayed responses: the cassette never
holds it and replay still matches.

Rule paths are dotted like spec paths; a digit indexes a list (or is a mapping
key), and ``*`` means every element of a list or every value of a mapping.
A rule with a pattern replaces each regex match inside the string at the path;
a rule without one replaces the whole value. The evidence for every preset rule
is in docs/volatile.md (what each agent version was measured sending per run).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote, quote_plus

from flowproof.errors import FlowproofError
from flowproof.spec.base import Location, VolatileRule
from flowproof.spec.patterns import MATCH_SECONDS, PatternTimeout, bound

__all__ = [
    "CWD_PLACEHOLDER",
    "HOME_PLACEHOLDER",
    "PRESETS",
    "Normalizer",
    "VolatileTimeout",
    "looks_like_per_run_id",
    "placeholder",
    "suggest_rule",
]

CWD_PLACEHOLDER = "«cwd»"
HOME_PLACEHOLDER = "«home»"


def placeholder(name: str) -> str:
    """The text a volatile span named ``name`` is replaced with: ``«volatile:<name>»``."""
    return f"«volatile:{name}»"


def _rule(preset: str, name: str, path: str, pattern: str | None = None) -> VolatileRule:
    return VolatileRule(
        name=name,
        path=path,
        segments=tuple(path.split(".")),
        pattern=re.compile(pattern) if pattern is not None else None,
        location=Location(f"<preset {preset}>", 0, 0),
    )


_DATE = r"\d{4}-\d{2}-\d{2}"

PRESETS: dict[str, tuple[VolatileRule, ...]] = {
    # Claude Code 2.1.197, `claude -p`. Evidence: two records of the same flow, each with a
    # fresh HOME and its own working directory, compared field by field (docs/volatile.md).
    "claude-code": (
        # metadata.user_id is a JSON string {"device_id": <64 hex, new per HOME>,
        # "account_uuid": "", "session_id": <uuid4, new per run>}: identifiers, no prompt text.
        _rule("claude-code", "user_id", "metadata.user_id"),
        # system[0].text is "x-anthropic-billing-header: cc_version=2.1.197.<3 hex>;
        # cc_entrypoint=sdk-cli; cch=<5 hex>;" and cch differs on every request. The lookbehind
        # keeps "cch=" visible. cc_version is NOT covered: its suffix was the same in every run
        # (it differs between the title call and the main loop, not between runs).
        _rule("claude-code", "cch", "system.0.text", r"(?<=cch=)[0-9A-Za-z]+"),
        # The memory section of the system prompt names "<HOME>/.claude/projects/<slug>/memory/",
        # where the slug is the working directory with every "/" turned into "-". HOME becomes
        # «home» as a portable path; the slug is the cwd in a form portable paths cannot see.
        _rule(
            "claude-code",
            "project_dir",
            "system.*.text",
            r"(?<=/\.claude/projects/)[^/`\s]+(?=/memory/)",
        ),
        # The first user message's <system-reminder> holds "# currentDate\nToday's date is
        # 2026-12-01." Content is a block list or a string.
        _rule(
            "claude-code",
            "current_date",
            "messages.*.content.*.text",
            rf"(?<=Today's date is ){_DATE}(?=\.)",
        ),
        _rule(
            "claude-code",
            "current_date",
            "messages.*.content",
            rf"(?<=Today's date is ){_DATE}(?=\.)",
        ),
        # A sub-agent's result (the Agent tool's tool_result) ends with "agentId: <17 hex> (use
        # SendMessage with to: '<the same id>', …)" and "<usage>… duration_ms: <ms></usage>":
        # a new agent id on every run, and the sub-agent's own wall time.
        _rule(
            "claude-code",
            "agent_id",
            "messages.*.content.*.content.*.text",
            r"(?<=agentId: )[0-9a-f]+|(?<=to: ')[0-9a-f]+(?=')",
        ),
        _rule(
            "claude-code",
            "subagent_duration",
            "messages.*.content.*.content.*.text",
            r"(?<=duration_ms: )[0-9]+",
        ),
    ),
    # codex-cli 0.171.0, `codex exec` with the built-in provider (the same comparison).
    "codex": (
        # prompt_cache_key is the session UUIDv7, new every run.
        _rule("codex", "prompt_cache_key", "prompt_cache_key"),
        # client_metadata holds only identifiers and timings: session_id, thread_id, turn_id,
        # root_turn_id, x-codex-window-id, x-codex-installation-id (new per CODEX_HOME) and
        # x-codex-turn-metadata (the same ids plus turn_started_at_unix_ms).
        _rule("codex", "client_metadata", "client_metadata"),
        # Every input item codex creates has an id minted per run (at_/msg_/fco_<uuidv7>); ids
        # that came from the model's own answer (fc_…) are replayed, so they repeat anyway.
        _rule("codex", "item_id", "input.*.id"),
        # internal_chat_message_metadata_passthrough: the turn id and a float create_time.
        _rule(
            "codex",
            "create_time",
            "input.*.internal_chat_message_metadata_passthrough.create_time",
        ),
        _rule("codex", "turn_id", "input.*.internal_chat_message_metadata_passthrough.turn_id"),
        # A tool's output starts "Chunk ID: <6 hex>\nWall time: <s> seconds": the chunk id is
        # new on every tool run, and the wall time is the command's own duration.
        _rule("codex", "chunk_id", "input.*.output", r"(?<=Chunk ID: )[0-9A-Fa-f]+"),
        _rule("codex", "wall_time", "input.*.output", r"(?<=Wall time: )[0-9.]+"),
        # <environment_context> carries <current_date>2026-12-01</current_date> (its <cwd> is
        # a portable path).
        _rule(
            "codex",
            "current_date",
            "input.*.content.*.text",
            r"(?<=<current_date>)[^<]+(?=</current_date>)",
        ),
    ),
    "openai-agents": (
        # openai-agents 0.24: prompt_cache_key = "agents-sdk:run:<uuid4 hex>", new every run;
        # the prefix stays visible.
        _rule(
            "openai-agents",
            "run_id",
            "prompt_cache_key",
            r"(?<=agents-sdk:run:)[0-9A-Fa-f-]+",
        ),
    ),
}


def _is_index(segment: str) -> bool:
    return segment.isascii() and segment.isdigit()


class Normalizer:
    """Applies volatile rules and portable paths to request bodies; restores paths in responses.

    Everything is compiled once here: ``apply`` runs on every model call.

    >>> Normalizer().apply(b'{"a": 1}')
    b'{"a": 1}'
    """

    __slots__ = (
        "_needles",
        "_path_re",
        "_paths",
        "_portable_forms",
        "_portable_re",
        "_restore_map",
        "_rules",
        "_secret_bytes",
        "_secret_restore",
        "_secret_text",
    )

    def __init__(
        self,
        rules: Sequence[VolatileRule] = (),
        cwd: str | None = None,
        home: str | None = None,
        secrets: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._rules: tuple[tuple[tuple[str, ...], Callable[[Any], tuple[Any, bool]]], ...] = tuple(
            (rule.segments, _replacer(rule)) for rule in rules
        )
        # "/" or "" as cwd/home would replace every slash; such paths are not portable anyway.
        paths: dict[str, str] = {}
        for value, token in ((cwd, CWD_PLACEHOLDER), (home, HOME_PLACEHOLDER)):
            if value and len(value.rstrip("/\\")) > 1:
                paths.setdefault(value.rstrip("/\\"), token)
        self._paths = paths
        # Longest first: cwd usually lives under home and must win. The lookahead keeps
        # /home/u/proj from eating the start of /home/u/project2.
        ordered = sorted(paths, key=len, reverse=True)
        self._path_re = (
            re.compile("(?:" + "|".join(re.escape(p) for p in ordered) + ")" + _PATH_END)
            if ordered
            else None
        )
        # Every way a path can appear in raw JSON bytes (as is, \u-escaped, with \/), and
        # its token; none present means nothing to parse. Longest first, as above.
        forms: dict[bytes, bytes] = {}
        for p in ordered:
            for form in (p, json.dumps(p)[1:-1], json.dumps(p, ensure_ascii=False)[1:-1]):
                for variant in (form, form.replace("/", "\\/")):
                    forms.setdefault(variant.encode("utf-8"), paths[p].encode("utf-8"))
        self._needles = tuple(forms)
        self._portable_forms = tuple(sorted(forms.items(), key=lambda kv: len(kv[0]), reverse=True))
        self._portable_re = re.compile(b"|".join(re.escape(f) for f in forms)) if forms else None
        # restore works on raw bytes (JSON or SSE of JSON): paths go back JSON-escaped.
        self._restore_map = tuple(
            (tok.encode("utf-8"), json.dumps(p, ensure_ascii=False)[1:-1].encode("utf-8"))
            for p, tok in paths.items()
        )
        # Secrets (value, placeholder), longest first so a secret holding another is masked whole:
        # the forms a decoded string may hold it in, and the raw forms of JSON and URL bytes.
        ordered_secrets = sorted({v: t for v, t in secrets if v}.items(), key=lambda vt: -len(vt[0]))
        self._secret_text = tuple(
            (form, token) for value, token in ordered_secrets for form in _text_forms(value)
        )
        self._secret_bytes = tuple(
            (form.encode("utf-8", "surrogatepass"), token.encode("utf-8"))
            for value, token in ordered_secrets
            for form in dict.fromkeys((*_text_forms(value), json.dumps(value)[1:-1],
                                       json.dumps(value, ensure_ascii=False)[1:-1]))
        )
        self._secret_restore = tuple(
            (token.encode("utf-8"), json.dumps(value, ensure_ascii=False)[1:-1].encode("utf-8", "surrogatepass"))
            for value, token in ordered_secrets
        )

    @property
    def is_identity(self) -> bool:
        """True when nothing is declared: ``apply`` returns every body unchanged."""
        return not self._rules and not self._paths and not self._secret_text

    def mask_text(self, text: str) -> str:
        """``text`` (a URL, a message) with every declared secret replaced by its placeholder."""
        for form, token in self._secret_text:
            if form in text:
                text = text.replace(form, token)
        return text

    def _mask_bytes(self, data: bytes) -> bytes:
        for form, token in self._secret_bytes:
            if form in data:
                data = data.replace(form, token)
        return data

    def mask_raw(self, text: str) -> str:
        """Raw JSON or SSE ``text`` with every declared secret masked, JSON-escaped forms included."""
        if not self._secret_bytes:
            return text
        return self._mask_bytes(text.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")

    def mask_data(self, value: Any) -> Any:
        """Parsed JSON with every declared secret masked in its strings (keys included)."""
        if not self._secret_text:
            return value
        masked, _ = _map_strings(value, self.mask_text)
        return masked

    def apply(self, body: bytes) -> bytes:
        """The bytes to hash: volatile spans and portable paths replaced, or ``body`` unchanged.

        Unchanged (the very same bytes) when nothing is declared, nothing matches,
        or the body is not JSON. Otherwise the result is compact, deterministic JSON.
        """
        if self.is_identity:
            return body
        has_secret = any(form in body for form, _ in self._secret_bytes)
        if not self._rules and not has_secret and not any(n in body for n in self._needles):
            return body
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            # Not JSON: nothing to normalize, but a secret must not reach the hash or the cassette.
            return self._mask_bytes(body) if has_secret else body
        changed = False
        for segments, replace in self._rules:
            obj, hit = _apply_at(obj, segments, replace)
            changed = changed or hit
        if self._path_re is not None:
            obj, hit = _map_strings(obj, self._replace_paths)
            changed = changed or hit
        if has_secret:
            obj, hit = _map_strings(obj, self.mask_text)
            changed = changed or hit
        if not changed:
            return body
        # surrogatepass: a lone surrogate (a JSON "\ud83d" escape, as JS agents send after
        # cutting a string mid-pair) has no UTF-8 form; json.loads reads these bytes back.
        compact = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        return compact.encode("utf-8", "surrogatepass")

    def restore(self, data: bytes) -> bytes:
        """Put ``«cwd»``/``«home»`` back as this run's paths, and each secret placeholder back as
        this run's value (for replayed response bytes)."""
        for token, path in (*self._restore_map, *self._secret_restore):
            if token in data:
                data = data.replace(token, path)
        return data

    def portable(self, data: bytes) -> bytes:
        """Replace this run's cwd/home by ``«cwd»``/``«home»`` in raw (recorded response) bytes.

        The inverse of `restore`; works on JSON and on SSE streams of JSON. It replaces
        exactly what `apply` would in the decoded strings: escaped forms (``\\u00f6``,
        ``\\/``) too, and not a path that merely starts a longer name (``proj`` in ``proj2``).
        """
        data = self._mask_bytes(data)
        pattern = self._portable_re
        if pattern is None or not any(n in data for n in self._needles):
            return data
        out = bytearray()
        pos = 0
        while (m := pattern.search(data, pos)) is not None:
            start = m.start()
            for form, token in self._portable_forms:
                end = start + len(form)
                if data.startswith(form, start) and _END_RE.match(_json_chars_at(data, end)):
                    out += data[pos:start]
                    out += token
                    pos = end
                    break
            else:  # only longer names start here: keep a byte, look again after it
                out += data[pos : start + 1]
                pos = start + 1
        out += data[pos:]
        return bytes(out)

    def _replace_paths(self, text: str) -> str:
        assert self._path_re is not None
        return self._path_re.sub(lambda m: self._paths[m.group(0)], text)


def _text_forms(value: str) -> tuple[str, ...]:
    """A secret as a decoded string may hold it: as is, percent-encoded, form-encoded."""
    return tuple(dict.fromkeys((value, quote(value, safe=""), quote_plus(value))))


# Where a cwd/home path ends: not inside a longer name (proj2, proj-old, proj.bak).
_PATH_END = r"(?![\w\-]|\.\w)"
_END_RE = re.compile(_PATH_END)
# One character of raw JSON text: a \u surrogate pair, a \u escape, another escape, or UTF-8.
_JSON_CHAR = re.compile(
    rb"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|\\u([0-9a-fA-F]{4})|\\(.)|([\x00-\x7f]|[\xc0-\xff][\x80-\xbf]*)",
    re.DOTALL,
)


def _json_chars_at(data: bytes, pos: int, count: int = 2) -> str:
    """The next ``count`` characters of raw JSON text at ``pos``, escapes decoded."""
    chars: list[str] = []
    while len(chars) < count and (m := _JSON_CHAR.match(data, pos)) is not None:
        high, low, code, escaped, plain = m.groups()
        if high is not None:
            chars.append(chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + int(low, 16) - 0xDC00))
        elif code is not None:
            chars.append(chr(int(code, 16)))
        elif escaped is not None:
            # \" \\ \/ stand for themselves; \n \t … are control characters.
            chars.append(escaped.decode("latin-1") if escaped in b'"\\/' else "\n")
        else:
            try:
                chars.append(plain.decode("utf-8", "surrogatepass"))
            except UnicodeDecodeError:
                chars.append("\ufffd")
        pos = m.end()
    return "".join(chars)


class VolatileTimeout(FlowproofError):
    """A volatile rule's pattern ran past its time bound on a request (it backtracks
    catastrophically): the call is refused, naming the rule, instead of stalling the proxy."""

    def __init__(self, rule: VolatileRule, length: int) -> None:
        self.rule = rule
        pattern = rule.pattern.pattern if rule.pattern is not None else ""
        super().__init__(
            f"{rule.location}: volatile rule `{rule.name}` gave up: /{pattern}/ ran past "
            f"{MATCH_SECONDS:g}s on a {length}-character value at `{rule.path}` (the pattern "
            "backtracks catastrophically) — rewrite it so that it cannot, e.g. without a "
            "repeat inside a repeat such as (a|aa)+"
        )


def _replacer(rule: VolatileRule) -> Callable[[Any], tuple[Any, bool]]:
    token = placeholder(rule.name)
    if rule.pattern is None:
        return lambda value: (token, True)
    # Time-bounded like `matches` (docs/reliability.md): `re` would run unbounded on the
    # proxy's event loop, holding every other flow of a warm proxy.
    pattern = bound(rule.pattern)

    def one(match: Any) -> str:
        # An empty match (a pattern like `[0-9]*`) would put a hole between every character.
        return token if match.group(0) else ""

    def sub(value: Any) -> tuple[Any, bool]:
        if not isinstance(value, str):
            return value, False
        try:
            new = pattern.sub(one, value)
        except PatternTimeout:
            raise VolatileTimeout(rule, len(value)) from None
        return new, new != value

    return sub


def _apply_at(
    obj: Any, segments: tuple[str, ...], replace: Callable[[Any], tuple[Any, bool]]
) -> tuple[Any, bool]:
    """Replace the value(s) at ``segments`` in place; return the (new) object and if it changed."""
    if not segments:
        return replace(obj)
    head, rest = segments[0], segments[1:]
    changed = False
    if isinstance(obj, list):
        if head == "*":
            keys: Sequence[Any] = range(len(obj))
        elif _is_index(head) and int(head) < len(obj):
            keys = (int(head),)
        else:
            return obj, False
    elif isinstance(obj, dict):
        if head == "*":
            keys = list(obj)
        elif head in obj:
            keys = (head,)
        else:
            return obj, False
    else:
        return obj, False
    for key in keys:
        new, hit = _apply_at(obj[key], rest, replace)
        if hit:
            obj[key] = new
            changed = True
    return obj, changed


def _map_strings(obj: Any, fn: Callable[[str], str]) -> tuple[Any, bool]:
    """Apply ``fn`` to every string (values and keys) in a JSON value, in place."""
    if isinstance(obj, str):
        new = fn(obj)
        return new, new != obj
    changed = False
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            new, hit = _map_strings(item, fn)
            if hit:
                obj[i] = new
                changed = True
    elif isinstance(obj, dict):
        items: list[tuple[str, Any]] = []
        for key, value in obj.items():
            new, hit = _map_strings(value, fn)
            new_key = fn(key)
            changed = changed or hit or new_key != key
            items.append((new_key, new))
        if changed:
            # A fresh dict in the original key order keeps the serialization deterministic.
            obj = dict(items)
    return obj, changed


# --- per-run identifier detection (for divergence reports) ------------------------------------

_HEX = "0-9A-Fa-f"
_KINDS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "a UUID",
        re.compile(
            rf"(?<![{_HEX}])[{_HEX}]{{8}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}"
            rf"-[{_HEX}]{{12}}(?![{_HEX}])"
        ),
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    ),
    (
        "a timestamp",
        re.compile(
            r"(?<!\d)(?:\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
            r"(?:Z|[+-]\d{2}:?\d{2})?)?|\d{2}:\d{2}:\d{2}(?:\.\d+)?"
            r"|\d{10}(?:\d{3})?(?:\.\d+)?)(?!\d)"
        ),
        r"\d{4}-\d{2}-\d{2}(?:[T ][0-9:.]+(?:Z|[+-][0-9:]+)?)?|\d{10,13}(?:\.\d+)?",
    ),
    (
        "a long hex id",
        # At least 5 hex characters with a digit among them: English words like "facade" are hex.
        re.compile(rf"(?<![{_HEX}])(?=[{_HEX}]*\d)[{_HEX}]{{5,}}(?![{_HEX}])"),
        "[0-9a-fA-F]{5,}",
    ),
)
_KIND_PATTERNS = {kind: yaml_pattern for kind, _, yaml_pattern in _KINDS}


def _mask(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub("\x00", text)


def looks_like_per_run_id(recorded: str, replayed: str) -> str | None:
    """The kind of per-run identifier two strings differ by, or ``None``.

    Returns ``"a UUID"``, ``"a timestamp"`` or ``"a long hex id"`` when the strings
    are different but become equal once every span of that kind is masked.

    >>> looks_like_per_run_id("run 2026-11-30", "run 2026-12-01")
    'a timestamp'
    """
    if recorded == replayed:
        return None
    for kind, pattern, _ in _KINDS:
        if _mask(recorded, pattern) == _mask(replayed, pattern):
            return kind
    return None


def suggest_rule(path: str, kind: str) -> str:
    """A YAML ``volatile:`` snippet that would cover a per-run identifier of ``kind`` at ``path``.

    ``path`` is a dotted body path (list indices as digits); the suggestion keeps
    it as is, since the reviewer knows whether other elements share the field.
    """
    pattern = _KIND_PATTERNS.get(kind)
    names = [s for s in path.split(".") if s and not _is_index(s) and s != "*"]
    # Rule names are lowercase letters, digits, _ and - (the spec loader's rule).
    name = re.sub(r"[^a-z0-9_-]+", "_", names[-1].lower()).strip("_") if names else ""
    name = name or "per_run_id"
    lines = ["volatile:", f"  - name: {name}", f"    path: {path}"]
    if pattern is not None:
        lines.append(f"    pattern: '{pattern}'")
    return "\n".join(lines) + "\n"
