"""The package's public surface and the shape of the test tree."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import flowproof

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flowproof"

#: Modules that must stay pure: no mitmproxy, no click, no I/O beyond load/save.
PURE_CORE = (
    "flowproof",
    "flowproof.wire",
    "flowproof.spec",
    "flowproof.normalize",
    "flowproof.replay",
    "flowproof.divergence",
    "flowproof.compare",
    "flowproof.assertions",
    "flowproof.trajectory",
    "flowproof.cassette",
    "flowproof.log_events",
    "flowproof.request_key",
    "flowproof.recorder",
    "flowproof.redact",
    "flowproof.verdict",
    "flowproof.heal",
    "flowproof.excerpt",
    "flowproof.advice",
    "flowproof.mcp",
    "flowproof.mcp.stdio",
    "flowproof.mcp.refused",
    "flowproof.guard",
    "flowproof.views",
    "flowproof.run_record",
    "flowproof.report.text",
    "flowproof.report.json_report",
    "flowproof.report.junit",
    "flowproof.report.html",
    "flowproof.report.findings",
    "flowproof.report.compare",
    "flowproof.report.cassette",
    "flowproof.scaffold",
    "flowproof.doctor",
    "flowproof.genai_spans",
)


def module_name(path: Path) -> str:
    """``flowproof/wire/base.py`` -> ``flowproof.wire.base``; a package is its ``__init__``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_level_imports(path: Path, known: set[str]) -> set[str]:
    """The flowproof modules ``path`` imports when it is imported: statements at module level,
    inside top-level ``try``/``if`` too, but not under ``if TYPE_CHECKING:`` (never run)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                found.add(module)
                # `from flowproof.wire import sse` imports the submodule flowproof.wire.sse.
                found.update(f"{module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return (found & known) - {me}


def import_cycles() -> list[list[str]]:
    """Every cycle a depth-first walk of the module-level import graph meets."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(paths)
    graph = {name: sorted(module_level_imports(path, known)) for name, path in paths.items()}
    state: dict[str, str] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def walk(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for dependency in graph[module]:
            if state.get(dependency) == "open":
                cycles.append([*stack[stack.index(dependency) :], dependency])
            elif dependency not in state:
                walk(dependency)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return cycles


class TestPublicSurface:
    def test_all_matches_exports(self) -> None:
        """Every name in __all__ exists, and every public attribute is listed in __all__
        (most of them load on first use, so ``dir`` lists them, ``vars`` may not yet)."""
        exported = {
            name
            for name in dir(flowproof)
            if not name.startswith("_")
            and not isinstance(getattr(flowproof, name), type(sys))
            and name not in {"annotations", "TYPE_CHECKING", "Any"}
        }
        assert set(flowproof.__all__) - {"__version__"} == exported
        assert flowproof.__all__ == sorted(flowproof.__all__, key=str)
        for name in flowproof.__all__:
            assert getattr(flowproof, name) is not None

    def test_an_unknown_name_is_an_attribute_error(self) -> None:
        """The lazy lookup still says "no such name" for a name the package does not have."""
        with pytest.raises(AttributeError, match="no_such_name"):
            flowproof.no_such_name  # noqa: B018
        with pytest.raises(AttributeError, match="no_such_name"):
            importlib.import_module("flowproof.spec").no_such_name  # noqa: B018

    def test_importing_normalize_does_not_load_the_yaml_spec_loader(self) -> None:
        """`flowproof.normalize` needs the spec's types only: the loader and PyYAML stay unloaded
        until someone loads a spec, and the package's lazy names still resolve afterwards."""
        code = (
            "import sys, flowproof.normalize; "
            "print(sorted(m for m in ('flowproof.spec.loader', 'yaml') if m in sys.modules)); "
            "from flowproof import load_spec; "
            "print(load_spec.__module__, 'flowproof.spec.loader' in sys.modules)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        assert out.stdout.splitlines() == ["[]", "flowproof.spec.loader True"]

    def test_import_does_not_pull_in_mitmproxy_or_click(self) -> None:
        """The pure core imports neither mitmproxy nor click, so it is testable on plain data."""
        code = (
            f"import sys, {', '.join(PURE_CORE)}; "
            "print(sorted(m for m in ('mitmproxy', 'click') if m in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        assert out.stdout.strip() == "[]"


def loaded_after(statement: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after running ``statement``."""
    code = f"import sys\n{statement}\nprint(sorted(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


#: What the proxy never needs to replay: the spec loader and PyYAML (a session request carries
#: its options resolved), the clause parser and the variables, the compare engine and pairing,
#: deepdiff (a miss's field diff), the bounded-regex engine, OpenTelemetry, and the spec's node types
#: beyond `flowproof.spec.base` (some twenty dataclasses, about 20 ms of mitmdump's start).
NOT_IN_THE_PROXY = (
    "yaml", "flowproof.spec.loader", "flowproof.spec.clauses", "flowproof.spec.variables",
    "flowproof.spec.types", "flowproof.compare", "flowproof.pairing", "deepdiff", "regex", "opentelemetry",
    "structlog",  # loaded with the first log line a handler takes (flowproof.log._AddonLogger)
)


#: What flowproof-run never needs for a replay (it does need the spec loader and PyYAML).
NOT_IN_THE_RUNNER = (
    "deepdiff", "pydantic", "opentelemetry", "mitmproxy", "cryptography", "mcp", "regex", "openai", "httpx",
    "xml.etree", "html", "flowproof.report.junit", "flowproof.report.html", "flowproof.scaffold",
    "flowproof.testing", "urllib.request", "flowproof.genai_spans", "flowproof.runner.otel", "flowproof.mcp.decisions",
    "flowproof.report.markdown", "flowproof.compare", "structlog",
)


class TestStartupImports:
    """Each process of a replayed flow imports only what replay needs (docs/performance.md)."""

    def test_the_addon_does_not_load_what_replay_does_not_use(self) -> None:
        """mitmdump imports the addon at every start; these modules were 0.3-0.4 s of it."""
        assert loaded_after("import flowproof.addon", NOT_IN_THE_PROXY) == []

    def test_the_runner_does_not_load_what_a_replay_does_not_use(self) -> None:
        """flowproof-run's own imports: the JUnit and HTML writers load for --junit/--html, the
        scaffold for `init`, the OpenTelemetry SDK for --otel, deepdiff on a divergence;
        mitmproxy (cryptography) only in the proxy, the SDKs only in agents."""
        assert loaded_after("import flowproof.runner.cli", NOT_IN_THE_RUNNER) == []

    def test_the_check_sees_a_module_that_is_loaded(self) -> None:
        """The same check after loading a spec names the loader and PyYAML: the empty
        answer above means something."""
        statement = "import flowproof.addon\nfrom flowproof.spec import load_spec"
        assert {"flowproof.spec.loader", "yaml"} <= set(loaded_after(statement, NOT_IN_THE_PROXY))


class TestImportGraph:
    def test_module_level_imports_have_no_cycle(self) -> None:
        """No flowproof module imports itself back through module-level imports, so every
        dependency is visible at the top of a file and none is hidden in a function."""
        cycles = import_cycles()
        assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)

    def test_the_cycle_finder_finds_a_cycle(self, tmp_path: Path, monkeypatch) -> None:
        """The walk reports a planted cycle (so an empty answer above means something)."""
        package = tmp_path / "flowproof"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "a.py").write_text("from flowproof import b\n")
        (package / "b.py").write_text("from typing import TYPE_CHECKING\nimport flowproof.c\n"
                                      "if TYPE_CHECKING:\n    import flowproof.a\n")
        (package / "c.py").write_text("try:\n    from flowproof.a import x\nexcept ImportError:\n    pass\n")
        monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
        monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
        assert import_cycles() == [["flowproof.a", "flowproof.b", "flowproof.c", "flowproof.a"]]


class TestTestTree:
    def test_every_module_has_a_test_file(self) -> None:
        """Each source module has a test file at the mirrored path (mitmproxy's filename_matching)."""
        missing = []
        for source in sorted(PACKAGE.rglob("*.py")):
            if source.name == "__init__.py" or source.name.startswith("_"):
                continue
            relative = source.relative_to(PACKAGE)
            expected = ROOT / "tests" / relative.parent / f"test_{source.name}"
            if not expected.exists():
                missing.append(str(expected.relative_to(ROOT)))
        assert missing == [], "modules without a mirrored test file:\n" + "\n".join(missing)


class TestSelfContained:
    #: Documents outside the project that code, docs and tests must not cite: a maintainer who
    #: clones the repository cannot follow them. The rationale lives in docs/design.md. Built
    #: from pieces so this file does not cite them itself.
    FORBIDDEN = (
        "DESIGN" + ".md",
        "AGENTS" + ".md",
        "STYLE" + ".md",
        "settled" + "-in-review",
        "spec" + "-shape",
        "compare" + "-never-writes",
        "../" + "shared",
        "spec " + "seed",
    )

    @staticmethod
    def citations(paths: list[Path]) -> list[str]:
        found = []
        for path in paths:
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, FileNotFoundError):
                continue  # binary fixtures, or a tracked file deleted in the work tree
            for number, line in enumerate(text.splitlines(), 1):
                found.extend(
                    f"{path.relative_to(ROOT)}:{number}: {name}"
                    for name in TestSelfContained.FORBIDDEN
                    if name in line
                )
        return found

    def test_no_tracked_file_cites_a_document_outside_the_project(self) -> None:
        """flowproof/, docs/, tests/, example_specs/ and README.md cite only the project."""
        listed = subprocess.run(
            ["git", "ls-files", "-z", "flowproof", "docs", "tests", "example_specs", "README.md"],
            cwd=ROOT, capture_output=True, check=True, timeout=60,
        ).stdout.decode().split("\0")
        paths = [ROOT / name for name in listed if name]
        assert len(paths) > 50, "git ls-files listed too few files to mean anything"
        found = self.citations(paths)
        assert found == [], "cite docs/design.md instead:\n" + "\n".join(found)

    def test_the_scan_finds_a_citation(self, tmp_path: Path, monkeypatch) -> None:
        """A planted citation is found, so the empty answer above means something."""
        monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
        planted = tmp_path / "module.py"
        planted.write_text('"""See ' + "DESIGN" + '.md, "Reply"."""\n')
        assert self.citations([planted]) == ["module.py:1: " + "DESIGN" + ".md"]
