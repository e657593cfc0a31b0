"""An agent on the `openai-agents` SDK (Runner.run, one function tool), for tests/e2e.

The SDK uses the Responses API at https://api.openai.com and, after the run,
uploads traces to /v1/traces/ingest on the same host; flowproof must record and
replay the model calls without being broken by that upload. The prompt is
argv[1], else $FLOWPROOF_PROMPT, else the first line of stdin.
"""

from __future__ import annotations

import asyncio
import os
import sys

from agents import Agent, Runner, function_tool


@function_tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f'{{"city": "{city}", "sky": "overcast", "celsius": 17}}'


AGENT = Agent(
    name="Weather assistant",
    instructions="You answer questions about the weather. Call get_weather, then answer in one sentence.",
    tools=[get_weather],
    model="gpt-4o-mini",
)


def main() -> int:
    prompt = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FLOWPROOF_PROMPT") or sys.stdin.readline().strip()
    result = asyncio.run(Runner.run(AGENT, prompt))
    print(result.final_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
