"""The runner: the click CLI, the mitmdump lifecycle, CA and env injection, agent drivers, reports.

The adapter that does the I/O around the pure core. Public entry points:
``flowproof-run`` / ``flowproof`` (`flowproof.runner.cli`), `start_proxy`, `run_flow`.
"""

from __future__ import annotations

from flowproof.runner.proxy import FlowProxy, ProxyPool, start_proxy

__all__ = ["FlowProxy", "ProxyPool", "start_proxy"]
