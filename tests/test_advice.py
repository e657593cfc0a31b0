"""The commands flowproof tells a user to run."""

from __future__ import annotations

import shlex
from pathlib import Path

from flowproof.advice import (
    GENERIC_RECORD_COMMAND,
    addon_record_command,
    one_command,
    record_command,
    record_under_pytest,
    run_again,
    shown_spec,
)


class TestRecordCommand:
    def test_spec_path_is_shell_quoted(self):
        """A path with a space and a quote pastes into a shell as one argument."""
        command = record_command("my flows/it's.flow.yaml")
        assert shlex.split(command) == ["flowproof-run", "my flows/it's.flow.yaml", "--record"]

    def test_plain_path_reads_plainly(self):
        """A plain path is not quoted needlessly."""
        assert record_command("booking.flow.yaml") == "flowproof-run booking.flow.yaml --record"
        assert GENERIC_RECORD_COMMAND == "flowproof-run <spec> --record"


    def test_several_specs_in_one_command(self) -> None:
        command = record_command("a.flow.yaml", "my flows/b.flow.yaml")
        assert shlex.split(command) == ["flowproof-run", "a.flow.yaml", "my flows/b.flow.yaml", "--record"]


class TestUnderPytest:
    def test_a_node_id_is_quoted(self) -> None:
        command = record_under_pytest("specs/b.flow.yaml::Book a flight")
        assert shlex.split(command) == ["pytest", "specs/b.flow.yaml::Book a flight", "--flowproof-mode", "record"]

    def test_run_again_drops_the_record_flags(self) -> None:
        assert run_again(record_under_pytest("t.py::x")) == "pytest t.py::x"
        assert run_again(record_command("my flows/a.flow.yaml")) == "flowproof-run 'my flows/a.flow.yaml'"
        assert run_again("something else --record") == "something else --record"


class TestOneCommand:
    def test_commands_of_one_form_name_every_target_once_in_order(self) -> None:
        commands = [record_command("b.flow.yaml"), record_command("a b.flow.yaml"), record_command("b.flow.yaml")]
        assert one_command(commands) == "flowproof-run b.flow.yaml 'a b.flow.yaml' --record"
        assert one_command([record_under_pytest("t.py::x"), record_under_pytest("t.py::y")]) == (
            "pytest t.py::x t.py::y --flowproof-mode record")

    def test_other_forms_keep_their_own_line(self) -> None:
        mixed = [record_command("a.flow.yaml"), record_under_pytest("t.py::x"), addon_record_command(None),
                 record_command("b.flow.yaml")]
        assert one_command(mixed).splitlines() == [
            "flowproof-run a.flow.yaml b.flow.yaml --record",
            "pytest t.py::x --flowproof-mode record",
            addon_record_command(None),
        ]


class TestShownSpec:
    def test_inside_the_working_directory_it_is_relative(self) -> None:
        assert shown_spec(Path("/repo/specs/a.flow.yaml"), Path("/repo")) == "specs/a.flow.yaml"

    def test_outside_or_already_relative_it_is_as_given(self) -> None:
        assert shown_spec(Path("/elsewhere/a.flow.yaml"), Path("/repo")) == "/elsewhere/a.flow.yaml"
        assert shown_spec(Path("../x/a.flow.yaml"), Path("/repo")) == "../x/a.flow.yaml"
        assert shown_spec(Path("/repository/a.flow.yaml"), Path("/repo")) == "/repository/a.flow.yaml"


class TestAddonRecordCommand:
    def test_cassette_is_quoted_and_defaults_to_a_placeholder(self):
        """The mitmdump command quotes the cassette path; without one it says PATH."""
        words = shlex.split(addon_record_command("dir with space/c.json"))
        assert words[:3] == ["mitmdump", "-s", "addon/flowproof_addon.py"]
        assert words[-1] == "flowproof_cassette=dir with space/c.json"
        assert addon_record_command(None).endswith("flowproof_cassette=PATH")
