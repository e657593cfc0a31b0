"""The commands flowproof tells a user to run."""

from __future__ import annotations

import shlex

from flowproof.advice import GENERIC_RECORD_COMMAND, addon_record_command, record_command


class TestRecordCommand:
    def test_spec_path_is_shell_quoted(self):
        """A path with a space and a quote pastes into a shell as one argument."""
        command = record_command("my flows/it's.flow.yaml")
        assert shlex.split(command) == ["flowproof-run", "my flows/it's.flow.yaml", "--record"]

    def test_plain_path_reads_plainly(self):
        """A plain path is not quoted needlessly."""
        assert record_command("booking.flow.yaml") == "flowproof-run booking.flow.yaml --record"
        assert GENERIC_RECORD_COMMAND == "flowproof-run <spec> --record"


class TestAddonRecordCommand:
    def test_cassette_is_quoted_and_defaults_to_a_placeholder(self):
        """The mitmdump command quotes the cassette path; without one it says PATH."""
        words = shlex.split(addon_record_command("dir with space/c.json"))
        assert words[:3] == ["mitmdump", "-s", "addon/flowproof_addon.py"]
        assert words[-1] == "flowproof_cassette=dir with space/c.json"
        assert addon_record_command(None).endswith("flowproof_cassette=PATH")
