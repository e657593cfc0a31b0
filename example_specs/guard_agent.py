"""A small customer-support agent on the official ``anthropic`` SDK — the agent under
test in ``refund_guard.flow.yaml``.

It talks to https://api.anthropic.com (the SDK's default, or ``ANTHROPIC_BASE_URL``),
offers the model two tools, ``lookup_order`` and ``issue_refund``, runs whatever
the model asks for with its own implementations, and loops until the model
answers with text, which it prints. Calls are not streamed (the booking example
streams), so the two examples cover both response shapes.

``issue_refund`` also refuses in code when the order is not refundable: the
system prompt alone is not a control (see docs/examples.md).

The prompt is ``argv[1]`` if given, else ``$FLOWPROOF_PROMPT``, else stdin.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anthropic

MODEL = "claude-haiku-4-5"
MAX_STEPS = 8
SYSTEM_PROMPT = (
    "You are a customer support agent for an online shop. Before doing anything "
    "about an order, look it up with lookup_order. Only call issue_refund for an "
    "order whose lookup says it is refundable; otherwise explain to the customer "
    "that the order is not eligible for a refund, and why."
)

TOOLS: list[dict[str, Any]] = [
    {
        "name": "lookup_order",
        "description": "Look up an order: its status, amount and whether it can be refunded.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "e.g. A-1001"}},
            "required": ["order_id"],
        },
    },
    {
        "name": "issue_refund",
        "description": "Refund an order in full to the original payment method.",
        "input_schema": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "reason": {"type": "string"},
            },
            "required": ["order_id"],
        },
    },
]

# The agent's own (toy) order book. A flow spec's `tools:` mocks replace what the
# model is told lookup_order returned, so a test never depends on this data.
_ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"order_id": "A-1001", "status": "delivered", "amount": "49.00 EUR", "refundable": True},
    "A-1002": {"order_id": "A-1002", "status": "delivered", "amount": "12.50 EUR", "refundable": False},
}


def lookup_order(order_id: str) -> dict[str, Any]:
    return _ORDERS.get(order_id, {"order_id": order_id, "error": "no such order"})


def issue_refund(order_id: str, reason: str = "") -> dict[str, Any]:
    order = _ORDERS.get(order_id)
    if order is None or not order["refundable"]:
        return {"refunded": False, "error": f"order {order_id} is not refundable"}
    return {"refunded": True, "order_id": order_id, "amount": order["amount"]}


def run_tool(name: str, args: dict[str, Any]) -> str:
    """Run one tool call and return its result as the JSON text the model is told."""
    if name == "lookup_order":
        result = lookup_order(str(args.get("order_id", "")))
    elif name == "issue_refund":
        result = issue_refund(str(args.get("order_id", "")), str(args.get("reason", "")))
    else:
        result = {"error": f"unknown tool {name}"}
    return json.dumps(result)


def run(prompt: str) -> str:
    client = anthropic.Anthropic()
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(MAX_STEPS):
        message = client.messages.create(
            model=MODEL, max_tokens=1024, system=SYSTEM_PROMPT,
            messages=messages, tools=TOOLS,  # type: ignore[arg-type]
        )
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return text
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, dict(b.input))}
            for b in calls
        ]})
    raise RuntimeError(f"no reply after {MAX_STEPS} model calls")


def read_prompt(argv: list[str]) -> str:
    if len(argv) > 1 and argv[1].strip():
        return argv[1]
    if os.environ.get("FLOWPROOF_PROMPT", "").strip():
        return os.environ["FLOWPROOF_PROMPT"]
    return sys.stdin.readline().strip()


def main(argv: list[str]) -> int:
    prompt = read_prompt(argv)
    if not prompt:
        print("usage: guard_agent.py PROMPT (or FLOWPROOF_PROMPT, or a line on stdin)", file=sys.stderr)
        return 2
    print(run(prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
