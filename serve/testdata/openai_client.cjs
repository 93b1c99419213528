// Drives qwenref serve with the official openai npm package, as a user's
// program would. Usage: node openai_client.cjs BASE_URL API_KEY IDS_JSON
// with NODE_PREFIX naming the npm prefix openai is installed under.
// Prints a JSON summary on stdout; an assertion that fails exits non-zero.
"use strict";
const assert = require("node:assert/strict");
const path = require("node:path");
const mod = require(path.join(process.env.NODE_PREFIX, "node_modules", "openai"));
const OpenAI = mod.OpenAI || mod.default || mod;

const [baseURL, apiKey, idsJSON] = process.argv.slice(2);
const ids = JSON.parse(idsJSON);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const out = {};

async function status(p) {
  try {
    await p;
  } catch (e) {
    return { status: e.status, param: e.param ?? null, code: e.code ?? null, type: e.type ?? null };
  }
  return { status: 200 };
}

async function main() {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  const model = models.data[0].id;
  out.model = model;

  const text = await client.completions.create({ model, prompt: "The capital of France is", max_tokens: 4, temperature: 0 });
  assert.equal(typeof text.choices[0].text, "string");
  assert.equal(text.usage.completion_tokens, 4);

  const withIDs = await client.completions.create({ model, prompt: [ids, ids.slice(0, 4)], max_tokens: 2, temperature: 0, logprobs: 2 });
  assert.equal(withIDs.choices.length, 2);
  assert.equal(withIDs.choices[1].logprobs.token_logprobs.length, 2);

  // lm-evaluation-harness's loglikelihood request.
  const echo = await client.completions.create({ model, prompt: ids, echo: true, max_tokens: 0, logprobs: 1, temperature: 0 });
  const lp = echo.choices[0].logprobs;
  assert.equal(lp.token_logprobs.length, ids.length);
  assert.equal(lp.token_logprobs[0], null);
  out.echo = lp.token_logprobs;

  const messages = [{ role: "user", content: "What is 2+2?" }];
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  assert.equal(plain.choices[0].message.role, "assistant");
  out.chat = plain.choices[0].message;

  const stream = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, stream: true });
  let reasoning = "", content = "";
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? "";
    content += d.content ?? "";
  }
  assert.equal(reasoning, plain.choices[0].message.reasoning_content ?? "");
  assert.equal(content, plain.choices[0].message.content ?? "");

  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
  const withTools = await client.chat.completions.create({ model, messages, tools, max_tokens: 2, temperature: 0,
    chat_template_kwargs: { enable_thinking: false } });
  assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens, "the tools are rendered into the prompt");

  // Abort mid-stream: the server must stop generating (the Go test checks).
  const controller = new AbortController();
  const long = await client.chat.completions.create({ model, messages, max_tokens: 4000, temperature: 0, stream: true },
    { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const _ of long) {
      if (controller.signal.aborted) continue; // chunks already buffered when it aborted
      if (++chunks === 3) controller.abort();
    }
  } catch (e) {
    assert.ok(e.name === "APIUserAbortError" || e.name === "AbortError", String(e));
  }
  out.abortedAfter = chunks;
  const after = await client.completions.create({ model, prompt: "hi", max_tokens: 1 });
  assert.equal(after.choices.length, 1);

  // Requests sent at once (the server runs up to --parallel together)
  // answer what the same requests answer one at a time.
  const reqs = [
    () => client.completions.create({ model, prompt: ids, max_tokens: 6, temperature: 0, logprobs: 2 }),
    () => client.completions.create({ model, prompt: "Once upon a time", max_tokens: 6, temperature: 0.9, seed: 3, logprobs: 1 }),
    () => client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0.7, seed: 4, logprobs: true, top_logprobs: 2 }),
  ];
  const sequential = [];
  for (const r of reqs) sequential.push(await r());
  const concurrent = await Promise.all(reqs.map((r) => r()));
  for (let i = 0; i < reqs.length; i++) {
    assert.deepEqual(concurrent[i].choices, sequential[i].choices, `request ${i} at once differs from alone`);
  }
  out.concurrent = concurrent.length;

  out.errors = {
    badKey: await status(new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 }).models.list()),
    unknownParam: await status(client.completions.create({ model, prompt: "hi", frobnicate: 1 })),
    wrongType: await status(client.completions.create({ model, prompt: "hi", max_tokens: "ten" })),
    tooManyTokens: await status(client.completions.create({ model, prompt: "hi", max_tokens: 1e9 })),
    wrongModel: await status(client.completions.create({ model: "gpt-4o", prompt: "hi" })),
    noMessages: await status(client.chat.completions.create({ model, messages: [] })),
  };
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
