"""The one table of agent families: how each spawns a sub-agent and how it shows on the wire.

A sub-agent is recognised from model calls alone, for any agent in any
language, by three links (docs/subagents.md):

1. **spawn**: a model response asks for a family's spawn tool
   (``spawn_tools`` by exact name, or a name starting with ``spawn_prefix``);
   its arguments name the sub-agent (``name_args``, the first one present;
   ``default_name`` when none is) and give its task (``prompt_args``);
2. **child thread**: how the sub-agent's own conversation is found
   (``link``): `PROMPT_LINK`, a later conversation whose first request's user
   text *contains* the spawn prompt (Claude Code puts several text blocks
   before it); `HANDOFF_LINK`, the next request that carries the spawn call's
   result, and everything that conversation does after it (a handoff hands
   the same conversation to another agent);
3. **result**: how the parent learns what the child found (``result``):
   `SPAWN_RESULT`, a later parent request holds a tool result for the spawn
   call's id; `ANSWER_IN_RESULT`, a later parent request holds a tool result
   containing the child's final answer (codex hands it back through its
   ``wait`` tool, not the spawn call); `FINAL_ANSWER`, the child's own final
   answer is the result (after a handoff there is no later parent request).

Nothing outside this table knows a family's tool names. Pure data.

    >>> spawn_of("Agent", {"subagent_type": "Explore", "description": "find", "prompt": "Find KQ"})
    Spawn(family='claude-code', name='Explore', prompt='Find KQ')
    >>> spawn_of("transfer_to_billing_agent", {}).name
    'billing_agent'
    >>> spawn_of("TaskCreate", {"subject": "x"}) is None
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "ANSWER_IN_RESULT",
    "FAMILIES",
    "FINAL_ANSWER",
    "HANDOFF_LINK",
    "PROMPT_LINK",
    "SPAWN_RESULT",
    "AgentFamily",
    "Spawn",
    "names_match",
    "spawn_of",
    "spawn_tool_names",
]

PROMPT_LINK: Final = "prompt"
HANDOFF_LINK: Final = "handoff"
SPAWN_RESULT: Final = "spawn result"
ANSWER_IN_RESULT: Final = "answer in a tool result"
FINAL_ANSWER: Final = "final answer"


@dataclass(frozen=True, slots=True)
class AgentFamily:
    """What flowproof knows about how one agent family runs sub-agents (see the module docstring)."""

    #: The family's name in reports.
    name: str
    #: Tool names that spawn a sub-agent.
    spawn_tools: tuple[str, ...]
    #: A tool-name prefix that spawns one (the rest of the name is the sub-agent's); "" for none.
    spawn_prefix: str
    #: Argument keys naming the sub-agent, in the order they are read.
    name_args: tuple[str, ...]
    #: The name when no argument names it ("" when the name is in the tool name).
    default_name: str
    #: Argument keys holding the task the child is given, in the order they are read.
    prompt_args: tuple[str, ...]
    #: How the child's thread is found: `PROMPT_LINK` or `HANDOFF_LINK`.
    link: str
    #: How the result returns: `SPAWN_RESULT`, `ANSWER_IN_RESULT` or `FINAL_ANSWER`.
    result: str
    #: Where the facts in this row come from.
    evidence: str


FAMILIES: tuple[AgentFamily, ...] = (
    AgentFamily(
        name="claude-code",
        # Claude Code 2.1's sub-agent tool is `Agent`; its Task* tools (TaskCreate, TaskList…)
        # are a todo list and spawn nothing.
        spawn_tools=("Agent",),
        spawn_prefix="",
        name_args=("subagent_type",),
        # The tool's own default when subagent_type is left out.
        default_name="general-purpose",
        prompt_args=("prompt",),
        link=PROMPT_LINK,
        result=SPAWN_RESULT,
        evidence="Claude Code 2.1.197 through flowproof's proxy (tests/e2e/test_real_agents.py)",
    ),
    AgentFamily(
        name="codex",
        spawn_tools=("spawn_agent",),
        spawn_prefix="",
        name_args=("agent_type",),
        default_name="default",
        prompt_args=("message",),
        link=PROMPT_LINK,
        result=ANSWER_IN_RESULT,
        evidence="codex's published multi-agent tool schema (spawn_agent {message, agent_type}; "
        "results come back through wait); not yet measured through the proxy",
    ),
    AgentFamily(
        name="openai-agents",
        spawn_tools=(),
        spawn_prefix="transfer_to_",
        name_args=(),
        default_name="",
        prompt_args=(),
        link=HANDOFF_LINK,
        result=FINAL_ANSWER,
        evidence="openai-agents 0.24 handoffs against the fake model (tests/e2e/test_prove.py)",
    ),
)


@dataclass(frozen=True, slots=True)
class Spawn:
    """A tool call that spawns a sub-agent: its family, the sub-agent's name and its task."""

    family: str
    name: str
    prompt: str | None


def _text_arg(arguments: Any, keys: tuple[str, ...]) -> str | None:
    if not isinstance(arguments, dict):
        return None
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def spawn_of(tool: str, arguments: Any) -> Spawn | None:
    """The spawn a call to ``tool`` with parsed ``arguments`` is, or None when it spawns nothing."""
    for family in FAMILIES:
        if tool in family.spawn_tools:
            name = _text_arg(arguments, family.name_args) or family.default_name
            return Spawn(family.name, name, _text_arg(arguments, family.prompt_args))
        if family.spawn_prefix and tool.startswith(family.spawn_prefix) and len(tool) > len(family.spawn_prefix):
            return Spawn(family.name, tool[len(family.spawn_prefix):], None)
    return None


def family(name: str) -> AgentFamily:
    """The row named ``name``; KeyError for a family that is not in the table."""
    for row in FAMILIES:
        if row.name == name:
            return row
    raise KeyError(name)


def spawn_tool_names() -> str:
    """The spawn tools of every family, for messages: ``Agent (claude-code), …``."""
    return ", ".join(
        f"{t} ({f.name})" for f in FAMILIES for t in (*f.spawn_tools, *((f"{f.spawn_prefix}<name>",)
                                                                           if f.spawn_prefix else ()))
    )


_SEPARATORS = re.compile(r"[\s\-_]+")


def names_match(written: str, spawned: str) -> bool:
    """True when a spec's sub-agent name means the spawned one: case, spaces, ``-`` and ``_``
    aside (``billing agent`` is openai-agents' ``transfer_to_billing_agent``)."""
    return _SEPARATORS.sub("_", written.strip().lower()) == _SEPARATORS.sub("_", spawned.strip().lower())
