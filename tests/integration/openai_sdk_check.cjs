// Drives an xserv router with the official OpenAI Node SDK (openai@5, fetched into .assets/node by
// scripts/fetch-assets.sh): chat and completions, streaming and not, models (list, retrieve), and
// API errors.
// Usage: node openai_sdk_check.cjs SDK_DIR BASE_URL. Exits non-zero on the first mismatch.
const assert = require("node:assert/strict");
const OpenAI = require(process.argv[2]).default;

async function main() {
  const client = new OpenAI({ baseURL: process.argv[3], apiKey: "unused", maxRetries: 0 });
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  const model = models.data[0].id;
  assert.deepEqual(await client.models.retrieve(model), models.data[0]);
  await assert.rejects(client.models.retrieve("no-such-model"),
    (e) => e instanceof OpenAI.NotFoundError);

  const chat = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Hello!" }], max_tokens: 8, temperature: 0 });
  assert.equal(chat.object, "chat.completion");
  assert.equal(typeof chat.choices[0].message.content, "string");
  assert.equal(chat.choices[0].finish_reason, "length");
  assert.equal(chat.usage.completion_tokens, 8);

  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Hello!" }], max_tokens: 8, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, chat.choices[0].message.content);
  assert.equal(finish, "length");
  assert.deepEqual(usage, chat.usage);

  const completion = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: 5, temperature: 0, logprobs: 1 });
  assert.equal(completion.object, "text_completion");
  assert.equal(completion.choices[0].logprobs.tokens.length, 5);

  await assert.rejects(
    client.chat.completions.create({ model, messages: [], max_tokens: 4 }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && typeof e.message === "string");
  await assert.rejects(
    client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof OpenAI.NotFoundError);
  console.log("openai sdk check: ok");
}

main().catch((e) => { console.error(e); process.exit(1); });
