// Runs the official `openai` npm package against a running `turbokv serve`:
// models.list, completions (plain and streamed), chat completions (plain, and
// streamed with stream_options.include_usage), each response checked, and a
// wrong API key must give an AuthenticationError (401).
// Usage: TKV_URL=http://127.0.0.1:PORT [TKV_API_KEY=KEY] [TKV_NPM_DIR=/tmp/tkv-npm] node scripts/openai-client-test.mjs
// (the package is installed outside the repository: npm install --prefix "$TKV_NPM_DIR" openai)
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const npmDir = process.env.TKV_NPM_DIR || '/tmp/tkv-npm';
const openai = createRequire(`${npmDir}/`)('openai');
const OpenAI = openai.OpenAI ?? openai.default;
const url = process.env.TKV_URL || 'http://127.0.0.1:8080';
const apiKey = process.env.TKV_API_KEY || 'none';
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 120_000 });

let failed = 0;
async function check(name, fn) {
  try {
    const note = await fn();
    console.log(`ok   ${name}${note ? `: ${note}` : ''}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e?.stack || e}`);
  }
}

function checkUsage(u, maxTokens) {
  assert.ok(u, 'no usage');
  assert.ok(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `prompt_tokens ${u.prompt_tokens}`);
  assert.ok(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0 && u.completion_tokens <= maxTokens,
    `completion_tokens ${u.completion_tokens}`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
}
const reasons = ['stop', 'length'];
let model = '';
const prompt = 'Once upon a time there was';
const messages = [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'Tell me a story.' }];
const maxTokens = 16;

await check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    assert.equal(m.object, 'model');
    ids.push(m.id);
  }
  assert.ok(ids.length >= 1 && typeof ids[0] === 'string' && ids[0].length > 0, `ids ${ids}`);
  model = ids[0];
  return ids.join(', ');
});

let plainText = '';
await check('completions.create', async () => {
  const r = await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.ok(typeof r.choices[0].text === 'string' && r.choices[0].text.length > 0, 'empty text');
  assert.ok(reasons.includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  checkUsage(r.usage, maxTokens);
  plainText = r.choices[0].text;
  return `${JSON.stringify(r.choices[0].text)} (${r.choices[0].finish_reason}, ${r.usage.completion_tokens} tokens)`;
});

await check('completions.create stream', async () => {
  const stream = await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0, stream: true });
  let text = '', reason = null, chunks = 0;
  for await (const c of stream) {
    assert.equal(c.object, 'text_completion');
    assert.equal(c.choices.length, 1);
    assert.equal(reason, null, 'a chunk after the one with finish_reason');
    text += c.choices[0].text;
    reason = c.choices[0].finish_reason;
    chunks++;
  }
  assert.ok(text.length > 0, 'empty text');
  assert.ok(reasons.includes(reason), `finish_reason ${reason}`);
  assert.equal(text, plainText, 'temperature 0: streamed text differs from the plain one');
  return `${chunks} chunks, ${reason}`;
});

let chatText = '';
await check('chat.completions.create', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: maxTokens, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.ok(typeof m.content === 'string' && m.content.length > 0, 'empty content');
  assert.ok(reasons.includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  checkUsage(r.usage, maxTokens);
  chatText = m.content;
  return `${JSON.stringify(m.content)} (${r.choices[0].finish_reason}, ${r.usage.completion_tokens} tokens)`;
});

await check('chat.completions.create stream include_usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', reason = null, usage = null, chunks = 0, role = null;
  for await (const c of stream) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(usage, null, 'a chunk after the usage chunk');
    if (c.choices.length === 0) {
      usage = c.usage;
      assert.ok(reason, 'usage chunk before the closing chunk');
      continue;
    }
    assert.equal(reason, null, 'a chunk after the one with finish_reason');
    const d = c.choices[0].delta;
    if (chunks === 0) role = d.role;
    text += d.content ?? '';
    reason = c.choices[0].finish_reason;
    chunks++;
  }
  assert.equal(role, 'assistant', 'first delta has no role');
  assert.ok(text.length > 0, 'empty text');
  assert.ok(reasons.includes(reason), `finish_reason ${reason}`);
  checkUsage(usage, maxTokens);
  assert.equal(text, chatText, 'temperature 0: streamed text differs from the plain one');
  return `${chunks} chunks, ${reason}, usage ${JSON.stringify(usage)}`;
});

if (!process.env.TKV_API_KEY) console.log('skip wrong API key: TKV_API_KEY is not set (a server without --api-key)');
else await check('wrong API key -> AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: `${apiKey}-wrong`, maxRetries: 0 });
  for (const call of [() => bad.models.list(), () => bad.chat.completions.create({ model, messages, max_tokens: 4 })]) {
    await assert.rejects(call, (e) => {
      assert.ok(e instanceof openai.AuthenticationError, `got ${e?.constructor?.name}: ${e?.message}`);
      assert.equal(e.status, 401);
      return true;
    });
  }
  return 'models.list and chat.completions.create both 401';
});

console.log(failed ? `openai-client-test: ${failed} check(s) FAILED` : 'openai-client-test: all checks passed');
process.exit(failed ? 1 : 0);
