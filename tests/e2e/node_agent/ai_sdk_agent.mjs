// A small tool-calling agent on the Vercel AI SDK's Anthropic provider (as opencode is built).
//
// The provider reads ANTHROPIC_BASE_URL and expects it to end in the API version: it posts
// to `${ANTHROPIC_BASE_URL}/messages`, where the anthropic SDKs post to `/v1/messages`.
// flowproof drives it in base-URL mode (`agent.route: base_url`). Nothing here knows about
// flowproof. The prompt is argv[2], else $FLOWPROOF_PROMPT. AI_SDK_STREAM=1 streams.
import { createAnthropic } from "@ai-sdk/anthropic";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const SYSTEM = "You are a weather assistant. Use get_weather, then answer in one sentence.";

const tools = {
  get_weather: tool({
    description: "Current weather in a city.",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, sky: "clear", celsius: 24 }),
  }),
};

async function main() {
  const prompt = process.argv[2] || process.env.FLOWPROOF_PROMPT || "";
  const anthropic = createAnthropic();
  const options = {
    model: anthropic("claude-sonnet-4-5"),
    system: SYSTEM,
    prompt,
    tools,
    maxRetries: 0,
    stopWhen: stepCountIs(4),
  };
  if (process.env.AI_SDK_STREAM === "1") {
    const result = streamText(options);
    console.log(await result.text);
  } else {
    const result = await generateText(options);
    console.log(result.text);
  }
}

main().catch((error) => {
  console.error(`ai_sdk_agent: ${error?.message ?? error}`);
  process.exit(1);
});
