"""The runner: the click CLI, the mitmdump lifecycle, CA and env injection, agent drivers, reports.

The adapter that does the I/O around the pure core. Public entry points:
``flowproof-run`` / ``flowproof`` (`flowproof.runner.cli`), `start_proxy`, `run_flow`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads the name)
if TYPE_CHECKING:
    from typing import Any

    from flowproof.runner.proxy import FlowProxy, ProxyPool, start_proxy

__all__ = ["FlowProxy", "ProxyPool", "start_proxy"]


def __getattr__(name: str) -> Any:
    # Loaded on first use (PEP 562): the console scripts import `flowproof.runner.spawn`,
    # and with it this file, before they start the proxy (`flowproof.runner.launch`).
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from flowproof.runner import proxy

    return getattr(proxy, name)
