"""The mitmproxy addon: record, replay or compare an agent's model calls.

Load it with ``mitmdump -s addon/flowproof_addon.py`` (docs/addon.md) or let
``flowproof-run`` start it. The options and the event log are specified in
docs/internals.md. `Flowproof` is the root; `Record`, `Replay` and `Compare`
are its concerns (one per mode), sharing a `Shared`.
"""

from __future__ import annotations

from flowproof.addon.compare import Compare
from flowproof.addon.core import Flowproof
from flowproof.addon.record import Record
from flowproof.addon.replay import Replay

__all__ = ["Compare", "Flowproof", "Record", "Replay"]
