// A small tool-calling agent on the official `openai` npm package (Node 20).
//
// Node 20's fetch ignores HTTPS_PROXY, so flowproof drives it in base-URL mode
// (`agent.route: base_url`): the SDK reads OPENAI_BASE_URL, which the runner
// points at its plain-http reverse listener. Nothing here knows about flowproof.
// The prompt is argv[2], else $FLOWPROOF_PROMPT, else the first line of stdin.
import OpenAI from "openai";

const MODEL = "gpt-4o-mini";
const SYSTEM = "You are a weather assistant. Use get_weather, then answer in one sentence.";
const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather in a city.",
      parameters: {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
      },
    },
  },
];

function getWeather(args) {
  return { city: args.city ?? "", sky: "clear", celsius: 24 };
}

async function readPrompt() {
  if (process.argv[2]) return process.argv[2];
  if (process.env.FLOWPROOF_PROMPT) return process.env.FLOWPROOF_PROMPT;
  let data = "";
  for await (const chunk of process.stdin) {
    data += chunk;
    if (data.includes("\n")) break;
  }
  return data.split("\n")[0].trim();
}

async function streamTurn(client, messages) {
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages,
    tools: TOOLS,
    stream: true,
  });
  let text = "";
  const calls = [];
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta;
    if (!delta) continue;
    text += delta.content ?? "";
    for (const tc of delta.tool_calls ?? []) {
      const call = (calls[tc.index] ??= { id: "", name: "", arguments: "" });
      if (tc.id) call.id = tc.id;
      call.name += tc.function?.name ?? "";
      call.arguments += tc.function?.arguments ?? "";
    }
  }
  return { text, calls: calls.filter(Boolean) };
}

async function main() {
  const prompt = await readPrompt();
  const client = new OpenAI({ maxRetries: 0 });
  const messages = [
    { role: "system", content: SYSTEM },
    { role: "user", content: prompt },
  ];
  for (let step = 0; step < 6; step++) {
    const { text, calls } = await streamTurn(client, messages);
    if (calls.length === 0) {
      console.log(text);
      return;
    }
    messages.push({
      role: "assistant",
      content: text || null,
      tool_calls: calls.map((c) => ({
        id: c.id,
        type: "function",
        function: { name: c.name, arguments: c.arguments },
      })),
    });
    for (const c of calls) {
      const result = c.name === "get_weather" ? getWeather(JSON.parse(c.arguments || "{}")) : { error: "unknown tool" };
      messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify(result) });
    }
  }
  throw new Error("no reply after 6 model calls");
}

main().catch((err) => {
  console.error(String(err?.stack ?? err));
  process.exit(1);
});
