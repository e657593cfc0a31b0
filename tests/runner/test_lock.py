"""The cassette lock: one holder at a time, released on exit and on the holder's death."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flowproof.runner.lock import CassetteBusyError, cassette_lock, lock_path


class TestCassetteLock:
    def test_second_holder_is_refused_then_admitted(self, tmp_path: Path) -> None:
        cassette = tmp_path / "x.cassette.json"
        with cassette_lock(cassette):
            with pytest.raises(CassetteBusyError, match="is recording this cassette right now"):
                with cassette_lock(cassette):
                    pass
        assert not lock_path(cassette).exists()
        with cassette_lock(cassette):
            pass

    def test_a_killed_holder_does_not_leave_the_cassette_locked(self, tmp_path: Path) -> None:
        """flock dies with its process: a SIGKILLed recorder blocks nobody."""
        cassette = tmp_path / "x.cassette.json"
        code = (
            "import sys, time\nfrom pathlib import Path\nfrom flowproof.runner.lock import cassette_lock\n"
            "with cassette_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n"
        )
        holder = subprocess.Popen([sys.executable, "-c", code, str(cassette)], stdout=subprocess.PIPE)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
            with pytest.raises(CassetteBusyError, match=f"process {holder.pid}"):
                with cassette_lock(cassette):
                    pass
        finally:
            holder.kill()
            holder.wait()
        with cassette_lock(cassette):
            pass
