"""The mitmproxy addon: record, replay or compare an agent's model calls.

Load it with ``mitmdump -s addon/flowproof_addon.py`` (docs/addon.md) or let
``flowproof-run`` start it. The options and the event log are specified in
docs/internals.md.
"""

from __future__ import annotations

from flowproof.addon.core import Flowproof

__all__ = ["Flowproof"]
