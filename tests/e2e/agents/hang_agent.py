"""An agent that never answers: it starts a child process, ignores SIGTERM and sleeps.

Writes "<own pid> <child pid>" to the file named by $HANG_PIDS first, so a test
can check that the runner's timeout left neither process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(os.environ["HANG_PIDS"], "w", encoding="utf-8") as fh:
    fh.write(f"{os.getpid()} {child.pid}\n")
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("thinking...", flush=True)
time.sleep(300)
