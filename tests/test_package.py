"""The package's public surface and the shape of the test tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import flowproof

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flowproof"


class TestPublicSurface:
    def test_all_matches_exports(self) -> None:
        """Every name in __all__ exists, and every public attribute is listed in __all__."""
        exported = {
            name
            for name, value in vars(flowproof).items()
            if not name.startswith("_")
            and not isinstance(value, type(sys))
            and name != "annotations"
        }
        assert set(flowproof.__all__) - {"__version__"} == exported
        assert flowproof.__all__ == sorted(flowproof.__all__, key=str)

    def test_import_does_not_pull_in_mitmproxy_or_click(self) -> None:
        """The pure core imports neither mitmproxy nor click, so it is testable on plain data."""
        code = (
            "import sys, flowproof, flowproof.wire, flowproof.normalize, flowproof.replay, "
            "flowproof.divergence, flowproof.compare, flowproof.mcp, flowproof.guard; "
            "print(sorted(m for m in ('mitmproxy', 'click') if m in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        assert out.stdout.strip() == "[]"


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
