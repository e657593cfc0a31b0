"""The parsed spec types: derived views used by the runner and the addon."""

from __future__ import annotations

from pathlib import Path

from flowproof.spec.types import (
    AgentSpec,
    FlowSpec,
    Location,
    PromptStep,
    ReplyAssertion,
    ToolMock,
)

LOC = Location("f.flow.yaml", 1, 1)


def make_spec(**overrides: object) -> FlowSpec:
    fields: dict[str, object] = dict(
        path=Path("f.flow.yaml"),
        name="n",
        app="agent",
        agent=AgentSpec("python a.py", None, (), 120.0, None, "proxy", LOC),
        tools=(),
        mcp=(),
        strict=False,
        cassette=Path("f.cassette.json"),
        volatile=(),
        presets=(),
        steps=(),
    )
    fields.update(overrides)
    return FlowSpec(**fields)  # type: ignore[arg-type]


class TestFlowSpec:
    def test_prompts_lists_prompt_steps_in_order(self) -> None:
        """prompts keeps only the prompt steps, in spec order."""
        first, second = PromptStep("one", LOC), PromptStep("two", LOC)
        spec = make_spec(steps=(first, ReplyAssertion("x", "reply contains x", LOC), second))
        assert spec.prompts == (first, second)

    def test_tool_results_skip_declarations(self) -> None:
        """Only tools with a result: are mocked; a declaration-only entry is not."""
        spec = make_spec(
            tools=(
                ToolMock("search", {"flights": []}, True, LOC),
                ToolMock("audit", None, False, LOC),
                ToolMock("cancel", None, True, LOC),
            )
        )
        assert spec.tool_results == {"search": {"flights": []}, "cancel": None}

    def test_location_renders_as_file_line_col(self) -> None:
        """A location prints the way editors jump to it."""
        assert str(Location("a/b.flow.yaml", 3, 9)) == "a/b.flow.yaml:3:9"
