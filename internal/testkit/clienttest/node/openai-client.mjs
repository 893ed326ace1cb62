// Drives a Chat Completions server with the official openai package and
// prints, as one JSON object, exactly what the library handed back:
//
//   node openai-client.mjs BASE_URL SEED
//
// {"sent":    [request bodies, as the library put them on the wire],
//  "tools":   ChatCompletion  (tools, tool_choice "auto"),
//  "stream":  [ChatCompletionChunk, ...]  (the same request, stream: true),
//  "plain":   ChatCompletion  (no tools)}
//
// The Go test runs it against the model server and through the recording
// proxy and compares the two outputs.
import OpenAI from 'openai';

const [baseURL, seedArg] = process.argv.slice(2);
if (!baseURL || !seedArg) {
  console.error('usage: node openai-client.mjs BASE_URL SEED');
  process.exit(2);
}
const seed = Number(seedArg);

const sent = [];
const client = new OpenAI({
  baseURL,
  apiKey: 'unused',
  maxRetries: 0, // a retry would be a second, differently numbered call
  timeout: 30_000,
  // Keep the exact bodies the library sent, to compare with the proxy's records.
  fetch: async (url, init) => {
    sent.push(typeof init?.body === 'string' ? init.body : null);
    return fetch(url, init);
  },
});

const messages = [
  { role: 'system', content: 'you control a robot arm at a table with a drawer, a cabinet and a cube. call exactly one tool per turn.' },
  { role: 'user', content: 'task: put the cube in the drawer.' },
];
const tools = ['open_drawer', 'pick_cube', 'place_in_drawer', 'finish'].map((name) => ({
  type: 'function',
  function: { name, description: name.replaceAll('_', ' ') + '.', parameters: { type: 'object', properties: {} } },
}));

const out = { sent };
out.tools = await client.chat.completions.create({
  model: 'toy', messages, tools, tool_choice: 'auto', seed, temperature: 1,
});
out.stream = [];
const stream = await client.chat.completions.create({
  model: 'toy', messages, tools, tool_choice: 'auto', seed, temperature: 1, stream: true,
});
for await (const chunk of stream) {
  out.stream.push(chunk);
}
out.plain = await client.chat.completions.create({
  model: 'toy', messages: [{ role: 'user', content: 'which object is on the table?' }], seed: seed + 1,
});
process.stdout.write(JSON.stringify(out) + '\n');
