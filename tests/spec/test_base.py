"""The spec types the proxy needs: the same objects through `flowproof.spec.types`."""

from __future__ import annotations

import re

from flowproof.spec import base, types


def test_the_spec_types_module_names_the_same_classes() -> None:
    """Code that imports a spec type from ``flowproof.spec.types`` gets the class the
    proxy's options and the normalizer build: one class each, not two equal-looking ones."""
    assert types.Location is base.Location
    assert types.VolatileRule is base.VolatileRule


def test_a_location_prints_as_file_line_column() -> None:
    assert str(base.Location("booking.flow.yaml", 12, 5)) == "booking.flow.yaml:12:5"


def test_a_volatile_rule_is_frozen_data_equal_by_value() -> None:
    """Equal by value, so a preset's rule sent through a session request is still a preset's."""
    def rule() -> base.VolatileRule:
        return base.VolatileRule("stamp", "metadata.at", ("metadata", "at"), re.compile(r"\d+"),
                                 base.Location("s.yaml", 3, 5))

    assert rule() == rule() and hash(rule()) == hash(rule())
