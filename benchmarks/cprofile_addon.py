"""``mitmdump -s`` script for benchmarks/replay_profile.py: mitmproxy's whole process under cProfile.

cProfile (Python 3.12: through ``sys.monitoring``) sees every thread, so a warm
proxy's session workers are in the profile too. ``$BENCH_PROFILE`` names the
stats file.

- Under ``flowproof-run`` (``FLOWPROOF_ADDON_SCRIPT`` names this file): the
  flowproof addon, profiled from the moment a session is open (its cassette
  loaded) until it is closed — the runner kills the proxy afterwards, so the
  stats are written at the close.
- With ``BENCH_PROFILE_BARE=1`` (beside another ``-s`` script, e.g. the canned
  peer): no flowproof, profiled from ``running`` to ``done``.
"""

from __future__ import annotations

import cProfile
import os
from typing import Any

PROFILE = cProfile.Profile()
OUT = os.environ["BENCH_PROFILE"]


class Profiled:
    def running(self) -> None:
        PROFILE.enable()

    def done(self) -> None:
        PROFILE.disable()
        PROFILE.dump_stats(OUT)


if os.environ.get("BENCH_PROFILE_BARE") == "1":
    addons: list[Any] = [Profiled()]
else:
    from flowproof.addon import Flowproof, warm

    _open, _close = warm.WarmSessions._open, warm.WarmSessions._close

    async def _opened(self: warm.WarmSessions, message: Any) -> warm.Session:
        session = await _open(self, message)
        PROFILE.enable()
        return session

    async def _closed(self: warm.WarmSessions, session: warm.Session, *, finish: bool) -> None:
        await _close(self, session, finish=finish)
        PROFILE.disable()
        PROFILE.dump_stats(OUT)

    warm.WarmSessions._open = _opened  # type: ignore[method-assign]
    warm.WarmSessions._close = _closed  # type: ignore[method-assign]
    addons = [Flowproof()]
