"""Free TCP ports on 127.0.0.1, for listeners the proxy binds later.

The kernel calls a port free until something binds it, so two listeners set up side
by side may be offered the same one: each caller passes the ports it has already
given out and not yet seen bound. Used by the runner (`mcp:` listeners) and by a warm
proxy's sessions (`flowproof.addon.warm`), two processes with their own bookkeeping.
"""

from __future__ import annotations

import socket
from collections.abc import Container

__all__ = ["free_port"]

#: Ports asked of the kernel before settling for one in ``avoid`` (a bind then says so).
PICKS = 100


def _probe() -> int:
    """The port the kernel offers for a bind to port 0 on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port(avoid: Container[int] = ()) -> int:
    """A port the kernel calls free right now and that is not in ``avoid``; after `PICKS`
    offers all in ``avoid``, the last one (its listener's bind or mitmproxy then refuses it)."""
    port = _probe()
    for _ in range(PICKS - 1):
        if port not in avoid:
            break
        port = _probe()
    return port
