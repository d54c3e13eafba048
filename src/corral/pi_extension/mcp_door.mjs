// corral's door for a Pi turn: its `bash` and `failure_disposition` are the MCP tools of the daemon's
// endpoint, called over streamable HTTP with the turn's own bearer token (docs/harnesses.md, "Pi's
// trusted path").
//
// The tools' descriptions and input schemas are the endpoint's own (mcp_tools.json, written from
// corral/mcp/tools.py; a test holds them equal), so Pi offers and validates exactly what corral's MCP
// shell takes, and the daemon checks every call again (intents, the token's turn, the sandbox). They
// are read from that file, not asked for at start: Pi's launch waits on no request, and the session
// opens on the first call. Plain JavaScript, so Node's own test runner loads it.

import { readFileSync } from "node:fs";

/** The variables corral sets for a Pi turn (corral.domain.agent_tools and adapters/harness/pi.py). */
export const URL_ENV = "CORRAL_MCP_URL";
export const TOKEN_ENV = "CORRAL_AGENT_TOKEN";
export const TIMEOUT_ENV = "CORRAL_TOOL_TIMEOUT_MS";
export const SHELL_ENV = "CORRAL_PI_SHELL";
/** The MCP protocol version asked for; the server answers with the one it speaks. */
const PROTOCOL = "2025-06-18";

/** corral's MCP tools a Pi turn gets, as the endpoint's `tools/list` describes them (written by
 * tests/harness/test_pi_extension_node.py from corral/mcp/tools.py, and held equal there). */
export const TOOLS = JSON.parse(readFileSync(new URL("./mcp_tools.json", import.meta.url), "utf8"));

/** A JSON-RPC answer from a response body: JSON, or the `data:` lines of an event stream. */
export function answerOf(contentType, body, id) {
  if (!(contentType || "").includes("text/event-stream")) return JSON.parse(body);
  for (const event of body.split(/\r?\n\r?\n/)) {
    const data = event.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
    if (data.length === 0) continue;
    const message = JSON.parse(data.join("\n"));
    if (message && message.id === id) return message;
  }
  throw new Error("corral's endpoint sent no answer to the request");
}

/** One MCP client session on the endpoint: initialized on first use, renewed once if the server forgot it. */
export class Door {
  constructor(url, token, timeoutMs = 600_000) {
    if (!url || !token) {
      throw new Error(`corral's tools need ${URL_ENV} and ${TOKEN_ENV} (set by corral for its turns)`);
    }
    this.url = url;
    this.token = token;
    this.timeoutMs = timeoutMs;
    this.session = null;
    this.next = 1;
  }

  async post(message, signal) {
    const headers = {
      authorization: `Bearer ${this.token}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    };
    if (this.session) Object.assign(headers, { "mcp-session-id": this.session, "mcp-protocol-version": PROTOCOL });
    const limit = AbortSignal.timeout(this.timeoutMs);
    const response = await fetch(this.url, {
      method: "POST",
      headers,
      body: JSON.stringify(message),
      signal: signal ? AbortSignal.any([signal, limit]) : limit,
    });
    const body = await response.text();
    return { response, body };
  }

  async request(method, params, signal, renewed = false) {
    if (!this.session && method !== "initialize") await this.open(signal);
    const id = this.next++;
    const { response, body } = await this.post({ jsonrpc: "2.0", id, method, params }, signal);
    if (response.status === 404 && this.session && !renewed) {
      this.session = null; // the server ended the session (a restarted daemon): nothing ran; open another
      return this.request(method, params, signal, true);
    }
    if (!response.ok) throw new Error(refusal(response.status, body));
    const answer = answerOf(response.headers.get("content-type"), body, id);
    if (answer.error) throw new Error(`corral's endpoint refused ${method}: ${answer.error.message}`);
    return { answer: answer.result, response };
  }

  async open(signal) {
    const { response } = await this.request(
      "initialize",
      { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: "corral-pi", version: "1" } },
      signal,
    );
    this.session = response.headers.get("mcp-session-id");
    const note = await this.post({ jsonrpc: "2.0", method: "notifications/initialized" }, signal);
    if (!note.response.ok) throw new Error(refusal(note.response.status, note.body));
  }

  async tools(signal) {
    return (await this.request("tools/list", {}, signal)).answer.tools;
  }

  async call(name, args, signal) {
    return (await this.request("tools/call", { name, arguments: args }, signal)).answer;
  }
}

function refusal(status, body) {
  let words = body.slice(0, 300);
  try {
    const error = JSON.parse(body).error;
    if (error && error.message) words = `${error.message} (${error.code})`;
  } catch {}
  return `corral's endpoint answered HTTP ${status}: ${words}`;
}

/** A tool result's text: its text blocks. */
export function textOf(result) {
  return (result.content || []).filter((b) => b.type === "text").map((b) => b.text).join("");
}

/**
 * The tools a turn gets, as Pi tool definitions: `failure_disposition` always, `bash` only in a confined
 * turn (`CORRAL_PI_SHELL=1`). A call corral answers as an error throws, so Pi marks it failed
 * (`isError`) with corral's JSON as its text, as the MCP tools' results are read (adapters/harness/base.py).
 */
export function corralTools(env, door = new Door(env[URL_ENV], env[TOKEN_ENV], Number(env[TIMEOUT_ENV]) || undefined)) {
  const wanted = env[SHELL_ENV] === "1" ? ["bash", "failure_disposition"] : ["failure_disposition"];
  return wanted.map((name) => ({
    name,
    label: `corral ${name}`,
    description: TOOLS[name].description,
    promptSnippet: TOOLS[name].description.split(/(?<=[.;:])\s/)[0],
    parameters: TOOLS[name].inputSchema,
    async execute(_callId, params, signal) {
      const result = await door.call(name, params, signal);
      const text = textOf(result);
      if (result.isError) throw new Error(text);
      return { content: [{ type: "text", text }], details: { corral: name } };
    },
  }));
}
