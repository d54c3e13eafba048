// The Pi extension's own tests, run by Node's test runner (tests/harness/test_pi_extension_node.py runs
// them): its MCP client against a loopback endpoint that answers as corral's does, the tools it makes,
// and the TypeScript entry loaded as Pi loads it (jiti, from the Pi package named by CORRAL_PI_JITI).

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const EXTENSION_DIR = fileURLToPath(new URL("../../../src/corral/pi_extension/", import.meta.url));
const doorModule = await import(`${EXTENSION_DIR}mcp_door.mjs`);
const { Door, SHELL_ENV, TOKEN_ENV, TOOLS, URL_ENV, answerOf, corralTools } = doorModule;

/** A loopback endpoint speaking as corral's: a session per initialize, answers as event streams. */
async function endpoint({ token = "tok", tools = [], answer } = {}) {
  const seen = [];
  let sessions = 0;
  const live = new Set();
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const message = JSON.parse(body);
      seen.push({ headers: req.headers, message });
      if (req.headers.authorization !== `Bearer ${token}`) {
        res.writeHead(401, { "content-type": "application/json" });
        const error = { code: "agent-token-invalid", message: "A bearer token is needed." };
        return res.end(JSON.stringify({ error }));
      }
      if (message.method === "initialize") {
        const id = `s${++sessions}`;
        live.add(id);
        res.writeHead(200, { "content-type": "text/event-stream", "mcp-session-id": id });
        const result = { protocolVersion: "2025-06-18", capabilities: {}, serverInfo: { name: "corral" } };
        return res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: message.id, result })}\n\n`);
      }
      if (!live.has(req.headers["mcp-session-id"])) {
        res.writeHead(404);
        return res.end();
      }
      if (message.id === undefined) {
        res.writeHead(202);
        return res.end();
      }
      let result;
      if (message.method === "tools/list") result = { tools };
      else result = answer(message.params);
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: message.id, result })}\n\n`);
    });
  });
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  const url = `http://127.0.0.1:${server.address().port}/mcp`;
  return { url, seen, live, close: () => new Promise((done) => server.close(done)) };
}

const text = (doc, isError = false) => ({ content: [{ type: "text", text: JSON.stringify(doc) }], isError });

test("an answer is read from JSON or from an event stream, by its id", () => {
  assert.deepEqual(answerOf("application/json", '{"id":1,"result":{}}', 1), { id: 1, result: {} });
  const stream = 'event: message\ndata: {"id":7,"result":{"a":1}}\n\nevent: message\ndata: {"id":8,"result":{}}\n\n';
  assert.deepEqual(answerOf("text/event-stream", stream, 7), { id: 7, result: { a: 1 } });
  assert.throws(() => answerOf("text/event-stream", "event: ping\n\n", 1), /no answer/);
});

test("a confined turn gets corral's bash and failure_disposition, as the endpoint describes them", async () => {
  const calls = [];
  const door = await endpoint({ answer: (p) => (calls.push(p), text({ corral_shell: 1, exit_code: 0 })) });
  try {
    const tools = corralTools({ [URL_ENV]: door.url, [TOKEN_ENV]: "tok", [SHELL_ENV]: "1" });
    assert.deepEqual(tools.map((t) => t.name), ["bash", "failure_disposition"]);
    assert.deepEqual(tools[0].parameters, TOOLS.bash.inputSchema); // the MCP shell's (a pytest holds them equal)
    assert.equal(tools[0].description, TOOLS.bash.description);
    const intent = ["attemptId", "command", "expectedExitCodes", "operationId", "timeout_seconds"];
    assert.deepEqual(Object.keys(tools[0].parameters.properties).sort(), intent);
    assert.deepEqual(door.seen, []); // nothing asked of the endpoint before the first call
    const done = await tools[0].execute("call-1", { command: "true", attemptId: "a1" });
    assert.deepEqual(JSON.parse(done.content[0].text), { corral_shell: 1, exit_code: 0 });
    assert.deepEqual(calls, [{ name: "bash", arguments: { command: "true", attemptId: "a1" } }]);
    await tools[1].execute("call-2", { disposition: "expected", targets: ["x"], reason: "y" });
    // the token in a header of every request, one session for every call
    assert.ok(door.seen.every((r) => r.headers.authorization === "Bearer tok"));
    const methods = ["initialize", "notifications/initialized", "tools/call", "tools/call"];
    assert.deepEqual(door.seen.map((r) => r.message.method), methods);
    assert.ok(door.seen.slice(1).every((r) => r.headers["mcp-session-id"] === "s1"));
  } finally {
    await door.close();
  }
});

test("an unconfined turn gets failure_disposition only: Pi's own bash stays", async () => {
  const door = await endpoint({ answer: () => text({ recorded: false, ignored: true }) });
  try {
    const tools = corralTools({ [URL_ENV]: door.url, [TOKEN_ENV]: "tok" });
    assert.deepEqual(tools.map((t) => t.name), ["failure_disposition"]);
  } finally {
    await door.close();
  }
});

test("a call corral answers as an error fails in Pi, with corral's JSON as its text", async () => {
  const refused = { error: { code: "intent-rejected", message: "attemptId 'a1' was used before", hint: "x" } };
  const door = await endpoint({ answer: () => text(refused, true) });
  try {
    const [bash] = corralTools({ [URL_ENV]: door.url, [TOKEN_ENV]: "tok", [SHELL_ENV]: "1" });
    await assert.rejects(bash.execute("c", { command: "true" }), (err) => {
      assert.deepEqual(JSON.parse(err.message), refused);
      return true;
    });
  } finally {
    await door.close();
  }
});

test("a session the endpoint forgot is opened again, once", async () => {
  const door = await endpoint({ answer: () => text({ ok: 1 }) });
  try {
    const client = new Door(door.url, "tok");
    await client.tools();
    door.live.clear(); // a restarted daemon
    assert.deepEqual(textOf(await client.call("failure_disposition", {})), { ok: 1 });
    assert.equal(door.seen.filter((r) => r.message.method === "initialize").length, 2);
  } finally {
    await door.close();
  }
});

function textOf(result) {
  return JSON.parse(result.content[0].text);
}

test("a refused token and a missing endpoint are said, never run around", async () => {
  const door = await endpoint({ token: "other" });
  try {
    const [disposition] = corralTools({ [URL_ENV]: door.url, [TOKEN_ENV]: "tok" });
    await assert.rejects(disposition.execute("c", {}), /HTTP 401: A bearer token is needed\. \(agent-token-invalid\)/);
    assert.deepEqual(door.seen.map((r) => r.message.method), ["initialize"]); // refused at once: nothing called
  } finally {
    await door.close();
  }
  assert.throws(() => corralTools({}), /CORRAL_MCP_URL and CORRAL_AGENT_TOKEN/);
});

const withJiti = { skip: !process.env.CORRAL_PI_JITI };
test("the TypeScript entry, loaded as Pi loads it, registers the tools", withJiti, async () => {
  const { createJiti } = await import(process.env.CORRAL_PI_JITI);
  const door = await endpoint({ answer: () => text({}) });
  const saved = { ...process.env };
  Object.assign(process.env, { [URL_ENV]: door.url, [TOKEN_ENV]: "tok", [SHELL_ENV]: "1" });
  try {
    const jiti = createJiti(import.meta.url, { moduleCache: false, fsCache: false });
    const factory = await jiti.import(`${EXTENSION_DIR}corral_tools.ts`, { default: true });
    const registered = [];
    await factory({ registerTool: (tool) => registered.push(tool.name) });
    assert.deepEqual(registered, ["bash", "failure_disposition"]);
  } finally {
    for (const key of [URL_ENV, TOKEN_ENV, SHELL_ENV]) if (!(key in saved)) delete process.env[key];
    await door.close();
  }
});
