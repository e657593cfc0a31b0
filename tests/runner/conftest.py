"""Fixtures for the runner's unit tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from flowproof.options import ProxyOptions
from flowproof.runner import proxy
from flowproof.runner.env import CAFiles, ensure_ca

HERE = Path(__file__).parent
FAKE_ADDON = HERE / "fake_addon.py"


@pytest.fixture(scope="session")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CA for the whole session: generating an RSA key costs time."""
    return tmp_path_factory.mktemp("ca") / "ca"


@pytest.fixture(scope="session")
def ca_files(ca_dir: Path) -> CAFiles:
    return ensure_ca(ca_dir)


@pytest.fixture
def sent_options(monkeypatch: pytest.MonkeyPatch) -> list[ProxyOptions]:
    """Every flow's `ProxyOptions` as the runner sends them to the proxy, in order."""
    sent: list[ProxyOptions] = []
    real = proxy.session_request

    def capture(options: ProxyOptions) -> dict[str, object]:
        sent.append(options)
        return real(options)

    monkeypatch.setattr(proxy, "session_request", capture)
    return sent


def group_alive(pgid: int) -> bool:
    """True when any process of process group ``pgid`` still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies still count for killpg; look for live members in /proc.
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def group_gone(pgid: int, within: float = 5.0) -> bool:
    """True once no live process of group ``pgid`` is left, polling up to ``within`` seconds.

    SIGKILL is delivered, not performed: a member that was running when the group was killed
    (the stand-in's ``env``, say) still shows in /proc until the scheduler lets it exit, and
    under a loaded suite that can take longer than one look. A member that survives the
    deadline is a real leak and the caller's assertion fails."""
    deadline = time.monotonic() + within
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
