"""Two agents on the `openai-agents` SDK: a triage agent that hands off to a billing agent.

The billing agent has one function tool, lookup_invoice. The handoff is the SDK's
own ``transfer_to_billing_agent`` tool; the handed-off agent's final answer is the
run's. The prompt is $FLOWPROOF_PROMPT.
"""

from __future__ import annotations

import asyncio
import os
import sys

from agents import Agent, Runner, function_tool


@function_tool
def lookup_invoice(id: str) -> str:  # noqa: A002 — the model names the argument
    """An invoice's charges."""
    return f'{{"invoice": "{id}", "charges": [42.0, 42.0], "duplicate": true}}'


BILLING = Agent(
    name="billing_agent",
    instructions="You handle billing. Look the invoice up, then say what you did in one sentence.",
    tools=[lookup_invoice],
    model="gpt-4o-mini",
)
TRIAGE = Agent(
    name="triage",
    instructions="You route the customer: hand billing questions to the billing agent.",
    handoffs=[BILLING],
    model="gpt-4o-mini",
)


def main() -> int:
    result = asyncio.run(Runner.run(TRIAGE, os.environ["FLOWPROOF_PROMPT"]))
    print(result.final_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
