"""The flowproof addon as a ``mitmdump -s`` script (see docs/addon.md)."""

from flowproof.addon import Flowproof

addons = [Flowproof()]
