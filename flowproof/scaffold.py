"""A first flow spec for an agent, from what its command and code say (``flowproof init``).

Pure: the runner reads the agent's file and writes the spec (`flowproof.runner.init`);
this module decides what the spec says. Which SDK speaks which API is the provider
table's (``python_modules``, ``node_packages`` in `flowproof.wire.providers`).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import PurePath

import yaml

from flowproof.wire.providers import PROVIDERS

__all__ = ["Sdk", "first_spec", "node_sdks", "python_sdks", "spec_name"]


@dataclass(frozen=True, slots=True)
class Sdk:
    """An SDK an agent's code imports: the import as written, its API family and key variable."""

    module: str
    family: str
    host: str
    key_var: str


def _match(name: str, known: str, separator: str) -> bool:
    return name == known or name.startswith(known + separator)


def _sdks(names: list[str], separator: str, node: bool) -> tuple[Sdk, ...]:
    found: dict[str, Sdk] = {}
    for name in names:
        for row in PROVIDERS:
            for known in row.node_packages if node else row.python_modules:
                if _match(name, known, separator) and row.family not in found:
                    found[row.family] = Sdk(known, row.family, row.base_url_host, row.sdk_key_var)
    return tuple(found.values())


def python_sdks(source: str) -> tuple[Sdk, ...]:
    """The model SDKs a Python file imports, one per API family, in import order.
    A file that does not parse imports nothing we can tell."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from google import genai` imports google.genai.
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return _sdks(names, ".", node=False)


_NODE_IMPORT = re.compile(r"""(?:\brequire\s*\(\s*|\bimport\s*\(\s*|\bfrom\s+|\bimport\s+)["']([^"'\s]+)["']""")


def node_sdks(source: str) -> tuple[Sdk, ...]:
    """The model SDKs a JavaScript or TypeScript file imports (``import … from``, ``require``)."""
    return _sdks(_NODE_IMPORT.findall(source), "/", node=True)


def spec_name(stem: str) -> str:
    """A flow's name from its agent's file or program name: ``booking_agent`` -> ``Booking agent``."""
    words = " ".join(w for w in re.split(r"[\W_]+", stem) if w)
    return (words[:1].upper() + words[1:]) if words else "My agent"


_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./ ,()+=-]*")


def _yaml_text(value: str) -> str:
    """``value`` as a YAML scalar: plain when that reads back as the same text (not a number,
    a boolean, a comment), else a JSON string (a YAML flow scalar, safe whatever it holds)."""
    if _PLAIN.fullmatch(value) and yaml.safe_load(value) == value:
        return value
    # A JSON string is a YAML double-quoted scalar; YAML refuses some characters JSON leaves
    # raw (DEL, C1 controls, surrogates), so those are escaped the YAML way.
    return "".join(
        c if c.isprintable() or c == " " else f"\\U{ord(c):08x}" if ord(c) > 0xFFFF else f"\\u{ord(c):04x}"
        for c in json.dumps(value, ensure_ascii=False)
    )


def first_spec(
    *,
    name: str,
    command: str,
    spec_file: str,
    schema: str,
    sdks: tuple[Sdk, ...] = (),
    agent_file: str | None = None,
    route_base_url: bool = False,
    prompt: str | None = None,
) -> str:
    """The text of a first spec: loads as is (``flowproof check`` passes), and its comments
    say what to fill in and the commands that record and replay it. ``schema`` is the flow-spec
    schema's path relative to the spec (the editor modeline); ``spec_file`` how the spec is
    named in the commands shown."""
    lines = [
        f"# yaml-language-server: $schema={schema}",
        "# Written by `flowproof init`: put the prompt a user would send and the checks that must hold.",
    ]
    who = agent_file or "the agent"
    if sdks:
        apis = ", ".join(f"{s.module} ({s.host})" for s in sdks)
        keys = " ".join(f"{s.key_var}=..." for s in sdks)
        lines.append(f"# {who} imports {apis}: those calls are recorded.")
    else:
        keys = "<YOUR_PROVIDER>_API_KEY=..."
        lines.append(f"# No model SDK import was found in {who}; flowproof records calls to every known model API.")
    lines += [
        "#   flowproof check " + spec_file,
        f"#   {keys} flowproof-run {spec_file} --record   # once, live: writes the cassette",
        f"#   flowproof-run {spec_file}                     # replay: offline, no key",
        f"name: {_yaml_text(name)}",
        "agent:",
        "  # The prompt reaches the agent on stdin and in $FLOWPROOF_PROMPT; write {prompt} in the",
        "  # command to pass it as an argument instead.",
        f"  command: {_yaml_text(command)}",
    ]
    if route_base_url:
        lines += [
            "  # Node's fetch ignores HTTPS_PROXY before Node 22.21, so the SDK is pointed at flowproof",
            "  # through its base-URL variable (OPENAI_BASE_URL …) instead (docs/proxy-env.md).",
            "  route: base_url",
        ]
    lines += [
        "# tools:                 # what the model is told a tool returned (the agent's tool still runs)",
        "#   - name: search_flights",
        "#     result: { flights: [ { id: KQ311 } ] }",
        "steps:",
        f"  - prompt: {_yaml_text(prompt or 'Replace this with what a user asks the agent')}",
        "  # - assert_tool_call: search_flights where destination contains NBO",
        "  # - assert_no_tool_call: issue_refund",
        "  # - assert: reply contains booked",
    ]
    return "\n".join(lines) + "\n"


def agent_kind(path: PurePath) -> str | None:
    """``python`` or ``node`` for a file those interpreters run, by its suffix; else None."""
    suffix = path.suffix.lower()
    if suffix == ".py":
        return "python"
    if suffix in (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts"):
        return "node"
    return None
