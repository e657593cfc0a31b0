"""The distribution a user installs: its name, metadata, extras and entry points, and the
README's install commands (docs/install.md)."""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import flowproof

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


class TestMetadata:
    def test_the_distribution_is_not_named_flowproof(self) -> None:
        """"flowproof" on PyPI is another project: a release under that name would be refused,
        and `pip install flowproof` must never be the advice."""
        assert PROJECT["name"] == "flowproof-llm"
        assert "pip install flowproof\n" not in README and "pip install flowproof " not in README

    def test_the_version_has_one_source(self) -> None:
        """pyproject reads the version from flowproof.__version__, the one the code prints."""
        assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
        assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "flowproof.__version__"}

    def test_the_pytest_extra_brings_pytest_and_xdist(self) -> None:
        """`pytest specs -n 2` needs pytest and pytest-xdist: the `pytest` extra has both, and the
        extras the README names exist."""
        extras = PROJECT["optional-dependencies"]
        names = {re.split(r"[<>=\[ ]", dep)[0] for dep in extras["pytest"]}
        assert names == {"pytest", "pytest-xdist"}
        for extra in ("pytest", "example", "otel", "test", "dev"):
            assert extra in extras and f"`{extra}`" in README

    def test_release_metadata(self) -> None:
        """What an index page shows: readme, licence, authors, keywords and classifiers; no
        project URL that points nowhere."""
        assert PROJECT["readme"] == "README.md" and PROJECT["license"] == "MIT"
        assert PROJECT["authors"] and PROJECT["keywords"]
        classifiers = PROJECT["classifiers"]
        assert "Framework :: Pytest" in classifiers and "Typing :: Typed" in classifiers
        assert f"Programming Language :: Python :: {sys.version_info.major}.{sys.version_info.minor}" in classifiers
        for url in PROJECT.get("urls", {}).values():
            assert not re.search(r"example\.(com|org)|<|TODO", url), url

    def test_the_readme_says_the_pypi_package_is_another_project(self) -> None:
        section = README.split("## Install it into your project", 1)[1].split("\n## ", 1)[0]
        assert "`pip install flowproof` installs a different product" in section
        assert "pip install ./flowproof" in section and "flowproof-llm" in section


def git_url_command() -> str:
    """The README's git-URL install line, as a user copies it."""
    match = re.search(r'^pip install "(flowproof-llm\[pytest\] @ git\+https://<your clone\'s URL>)"', README, re.M)
    assert match, "README.md lost its git-URL install line"
    return match.group(1)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
class TestInstallFromGit:
    def test_the_readme_git_install_gives_the_whole_distribution(self, tmp_path: Path) -> None:
        """The README's `pip install "flowproof-llm[pytest] @ git+…"`, pointed at a git repository
        holding this checkout's package: the installed distribution is flowproof-llm at
        flowproof.__version__, with the pytest extra, both commands, the pytest plugin and the
        schemas (dependencies are not fetched: --no-deps)."""
        repo = tmp_path / "repo"
        repo.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, repo / name)
        shutil.copytree(ROOT / "flowproof", repo / "flowproof", ignore=shutil.ignore_patterns("__pycache__"))
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false"]
        subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", "release"], cwd=repo, check=True)
        # pip's URL grammar wants a host in a git+file URL: localhost.
        requirement = git_url_command().replace("https://<your clone's URL>", f"file://localhost{repo}")
        target = tmp_path / "site"
        ran = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
             "--target", str(target), requirement],
            capture_output=True, text=True, timeout=300,
        )
        assert ran.returncode == 0, ran.stderr
        (dist_info,) = target.glob("flowproof_llm-*.dist-info")
        meta = email.parser.Parser().parsestr((dist_info / "METADATA").read_text(encoding="utf-8"))
        assert meta["Name"] == "flowproof-llm" and meta["Version"] == flowproof.__version__
        assert "pytest" in meta.get_all("Provides-Extra")
        assert any(r.startswith("pytest-xdist") and 'extra == "pytest"' in r for r in meta.get_all("Requires-Dist"))
        entry_points = (dist_info / "entry_points.txt").read_text(encoding="utf-8")
        assert "flowproof = flowproof.runner.launch:main" in entry_points
        assert "flowproof-run = flowproof.runner.launch:run_main" in entry_points
        assert "[pytest11]\nflowproof = flowproof.pytest_plugin" in entry_points
        package = target / "flowproof"
        assert (package / "py.typed").exists()
        shipped = {p.name for p in (package / "schemas").glob("*.json")}
        assert shipped >= {"flow-spec.schema.json", "cassette.schema.json"}
        assert not list(target.glob("flowproof-*.dist-info"))  # nothing under the other project's name
