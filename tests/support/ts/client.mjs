// A TypeScript-SDK MCP client for `toolpool mcp --http`, as an MCP host written in JS would be,
// then a plain-fetch client of the server's turn endpoint, as an agent loop in JS would be.
//
//   node client.mjs URL TOKEN FILE WORKSPACE
//
// MCP: with the official SDK's Client and StreamableHTTPClientTransport (the token as a bearer
// header in requestInit), it lists the tools and calls read_file on FILE (a path in the pool's
// workspace) and bash. Before that, plain fetch POSTs without the token and with a wrong one.
//
// Turns, with the same token and plain fetch: a whole turn POSTed to /turns; one posted with
// "wait": false and collected with GET /turns/{id}; malformed bodies; requests without the
// token. WORKSPACE is the pool's workspace folder on this machine: the only thing written there
// directly is the file that releases the waiting turn's call.
//
// It prints one line per check ("ok: ..."), then one JSON object with what it got, and exits 0;
// on any error or failed check it writes the reason to stderr and exits 1. The SDK resolves
// from the node_modules beside this file: the Python test copies it into the folder where it
// installed the SDK.
import { randomUUID } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

// Per request; the SDK's default (60 s) is short for a busy 2-core machine.
const REQUEST_TIMEOUT_MS = 120_000;

const INITIALIZE = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: {
    protocolVersion: "2025-06-18",
    capabilities: {},
    clientInfo: { name: "toolpool-ts-fetch", version: "0" },
  },
};

async function refusals(url) {
  const statuses = {};
  let challenge = null;
  for (const [label, extra] of [["none", {}], ["wrong", { Authorization: "Bearer nope" }]]) {
    const response = await fetch(url, {
      method: "POST",
      headers: {
        Accept: "application/json, text/event-stream",
        "Content-Type": "application/json",
        ...extra,
      },
      body: JSON.stringify(INITIALIZE),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    statuses[label] = response.status;
    challenge ??= response.headers.get("www-authenticate");
    await response.body?.cancel();
  }
  return { statuses, challenge };
}

function texts(result) {
  return result.content.map((item) => (item.type === "text" ? item.text : { type: item.type }));
}

async function mcp(url, token, file) {
  const unauthorized = await refusals(url);

  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "toolpool-ts-proof", version: "0" });
  const options = { timeout: REQUEST_TIMEOUT_MS };
  await client.connect(transport, options);
  try {
    const { tools } = await client.listTools(undefined, options);
    const read = await client.callTool(
      { name: "read_file", arguments: { path: file } }, undefined, options,
    );
    const bash = await client.callTool(
      { name: "bash", arguments: { command: "echo from-node" } }, undefined, options,
    );
    return {
      unauthorized,
      server: client.getServerVersion() ?? null,
      protocolVersion: transport.protocolVersion ?? null,
      tools: tools.map((tool) => ({ name: tool.name, annotations: tool.annotations ?? null })),
      read_file: { isError: read.isError ?? null, texts: texts(read) },
      bash: { isError: bash.isError ?? null, texts: texts(bash) },
    };
  } finally {
    await client.close();
  }
}

// -- the turn endpoint, with plain fetch --------------------------------------------------------

// GET /turns/{id}?wait=S answers 200 once every result is in, or 202 after S seconds with the
// results so far (null for calls still running, which run on). A client polls with short waits
// until the 200; a 503 (Redis unreachable) also means "ask again".
const POLL_WAIT_S = 2;
const COLLECT_BOUND_MS = 240_000;
const RETRY_PAUSE_MS = 1_000;
// The waiting call's own limit: past the whole collect, so it can never end the proof itself.
const RELEASE_TIMEOUT_S = 300;

class CheckFailed extends Error {}

/** One claim: a line saying it held, or the end of the run saying what was got instead. */
function check(holds, what, got) {
  if (!holds) {
    throw new CheckFailed(`check failed: ${what}\n  got: ${JSON.stringify(got, null, 1)}`);
  }
  console.log(`ok: ${what}`);
}

function call(id, name, args) {
  return { id, name, arguments: args };
}

/** `method path` on the server of `url`; its status, JSON body and auth challenge. */
async function request(url, method, path, { token, body, raw, waitMs = REQUEST_TIMEOUT_MS } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const payload = raw ?? (body === undefined ? undefined : JSON.stringify(body));
  if (payload !== undefined) {
    headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(new URL(path, url), {
      method, headers, body: payload, signal: AbortSignal.timeout(waitMs),
    });
  } catch (error) {
    throw new Error(`${method} ${path}: no answer (${error?.message ?? error})`, { cause: error });
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { notJson: text };
  }
  return {
    status: response.status, body: parsed, challenge: response.headers.get("www-authenticate"),
  };
}

function callIds(answer) {
  return (answer.body?.results ?? []).map((result) => result.call_id);
}

function statuses(answer) {
  return (answer.body?.results ?? []).map((result) => result.status);
}

function sameList(a, b) {
  return a.length === b.length && a.every((item, index) => item === b[index]);
}

/** GET /turns/{id} until it answers with all the turn's results (see POLL_WAIT_S). */
async function collect(url, token, turnId) {
  const path = `/turns/${encodeURIComponent(turnId)}?wait=${POLL_WAIT_S}`;
  const deadline = Date.now() + COLLECT_BOUND_MS;
  let pendingSeen = 0;
  for (let attempt = 1; ; attempt += 1) {
    const answer = await request(url, "GET", path, { token, waitMs: (POLL_WAIT_S + 30) * 1000 });
    if (answer.status === 202) {
      pendingSeen += 1;
      const pending = answer.body?.results?.filter((result) => result === null).length;
      if (pending !== answer.body?.pending) {
        throw new CheckFailed(`GET ${path}: 202 whose "pending" is not its null results: `
          + JSON.stringify(answer.body));
      }
    } else if (answer.status !== 503) {
      return { ...answer, attempts: attempt, pendingSeen };
    }
    if (Date.now() >= deadline) {
      throw new CheckFailed(`GET ${path} still answered ${answer.status} after ${attempt} tries: `
        + JSON.stringify(answer.body));
    }
    if (answer.status === 503) {
      await sleep(RETRY_PAUSE_MS);
    }
  }
}

/** A whole turn answered at once: in call order, each call seeing what the one before did. */
async function turnInOrder(url, token, note) {
  const calls = [
    call("t1-write", "write_file", { path: "note.txt", content: note }),
    call("t1-read", "read_file", { path: "note.txt" }),
    call("t1-list", "list_directory", { path: "." }),
    call("t1-cat", "bash", { command: "cat note.txt" }),
  ];
  const answer = await request(url, "POST", "/turns", { token, body: calls });
  check(answer.status === 200 && typeof answer.body?.turn_id === "string",
    "POST /turns: 200 with a turn id", answer);
  const ids = calls.map((c) => c.id);
  check(sameList(callIds(answer), ids), `POST /turns: results in call order (${ids})`, answer);
  check(statuses(answer).every((s) => s === "ok"), "POST /turns: every call ok", answer);
  const [, read, list, cat] = answer.body.results;
  check(read.content === note, "read_file after write_file read the text just written", read);
  check(list.content.split("\n").includes("note.txt"),
    "list_directory after write_file listed note.txt", list);
  check(cat.content === `exit code: 0\nstdout:\n${note.trimEnd()}`,
    "bash `cat note.txt` after write_file printed the text just written", cat);
  return answer;
}

/** A turn posted with "wait": false while its first call cannot end, then collected. */
async function turnLater(url, token, workspace, note) {
  // The first call waits for a file only this script writes, after the POST has answered: an
  // answer that had waited for the turn could not come.
  const release = `release-${randomUUID()}`;
  const calls = [
    call("t2-wait", "bash", {
      command: `while [ ! -e ${release} ]; do sleep 0.05; done; echo released; cat note.txt`,
      timeout: RELEASE_TIMEOUT_S,
    }),
    call("t2-read", "read_file", { path: "note.txt" }),
  ];
  const accepted = await request(url, "POST", "/turns", {
    token, body: { calls, wait: false },
  });
  check(accepted.status === 202 && typeof accepted.body?.turn_id === "string"
    && accepted.body.results === undefined,
  '"wait": false: 202 with a turn id, no results, while its first call still waits', accepted);

  const turnId = accepted.body.turn_id;
  const early = await request(url, "GET", `/turns/${encodeURIComponent(turnId)}?wait=0.5`,
    { token });
  check(early.status === 202 && early.body?.pending === 2
    && sameList(early.body.results, [null, null]),
  "GET /turns/{id} while its first call waits: 202, both results pending (null)", early);
  await writeFile(join(workspace, release), "");
  const collected = await collect(url, token, turnId);
  check(collected.status === 200 && collected.body?.turn_id === turnId,
    "GET /turns/{id}: 200 for that turn", collected);
  const ids = calls.map((c) => c.id);
  check(sameList(callIds(collected), ids), `GET /turns/{id}: results in call order (${ids})`,
    collected);
  check(statuses(collected).every((s) => s === "ok"), "GET /turns/{id}: every call ok",
    collected);
  const [waited, read] = collected.body.results;
  check(waited.content === `exit code: 0\nstdout:\nreleased\n${note.trimEnd()}`,
    "the waiting bash call ran on once released, and read the note", waited);
  check(read.content === note, "the read_file after it read the note", read);
  return {
    release, accepted: accepted.body, collected: collected.body, gets: collected.attempts,
  };
}

/** Bodies the server must refuse with 400 and a reason naming what was wrong. */
async function malformed(url, token) {
  const write = (id) => call(id, "write_file", { path: "refused-400.txt", content: "no\n" });
  const cases = [
    ["a body that is not JSON", { raw: '[{"id": "x", "name": ' }, "the body is not valid JSON"],
    ['"calls" not an array', { body: { calls: "read_file note.txt" } },
      '"calls" must be a non-empty JSON array'],
    ['"wait" not true or false', { body: { calls: [write("m1")], wait: "later" } },
      '"wait" must be true or false'],
    ["an unknown field", { body: { calls: [write("m2")], colls: [] } },
      "unknown field(s): colls"],
    ["a call without a name", { body: [{ id: "m3", arguments: {} }] },
      "Call 1 is not a tool call"],
    ["one call id twice", { body: [write("m4"), write("m4")] }, "'m4' appears twice"],
  ];
  const got = {};
  for (const [what, send, says] of cases) {
    const answer = await request(url, "POST", "/turns", { token, ...send });
    got[what] = { status: answer.status, error: answer.body?.error ?? null };
    check(answer.status === 400 && got[what].error?.includes(says),
      `malformed, ${what}: 400 saying ${JSON.stringify(says)}`, answer);
  }
  return got;
}

/** Every turn request without the right token is refused, an existing turn's included. */
async function refused(url, token, turnId) {
  const calls = [call("u1", "write_file", { path: "refused-401.txt", content: "no\n" })];
  const cases = [
    ["POST /turns without a token", "POST", "/turns", { body: calls }],
    ["POST /turns with a wrong token", "POST", "/turns", { body: calls, token: "nope" }],
    ["GET /turns/{id} without a token", "GET", `/turns/${turnId}`, {}],
    ["DELETE /turns/{id} without a token", "DELETE", `/turns/${turnId}`, {}],
  ];
  const got = {};
  for (const [what, method, path, options] of cases) {
    const answer = await request(url, method, path, options);
    got[what] = { status: answer.status, challenge: answer.challenge };
    check(answer.status === 401 && answer.challenge?.startsWith("Bearer"),
      `${what}: 401 with a Bearer challenge`, answer);
  }
  // Nothing refused ran: neither refused write left a file.
  const listed = await request(url, "POST", "/turns", {
    token, body: [call("t3-list", "list_directory", { path: "." })],
  });
  const entries = listed.body?.results?.[0]?.content?.split("\n") ?? [];
  check(listed.status === 200 && entries.includes("note.txt")
    && !entries.some((entry) => entry.startsWith("refused-")),
  "no refused turn ran: the workspace holds no refused-*.txt", listed);
  return { requests: got, entries };
}

async function turns(url, token, workspace) {
  // Unique to the run, and not plain ASCII, so an encoding slip shows.
  const note = `written by node ${randomUUID()}\nGrüße, 東京, ✓\n`;
  const inOrder = await turnInOrder(url, token, note);
  const later = await turnLater(url, token, workspace, note);
  const bad = await malformed(url, token);
  const unauthorized = await refused(url, token, inOrder.body.turn_id);
  return { note, inOrder: inOrder.body, later, malformed: bad, unauthorized };
}

async function main() {
  const [url, token, file, workspace] = process.argv.slice(2);
  if (!url || !token || !file || !workspace) {
    throw new Error("usage: node client.mjs URL TOKEN FILE WORKSPACE");
  }
  const got = await mcp(url, token, file);
  got.turns = await turns(url, token, workspace);
  console.log(JSON.stringify(got));
}

main().catch((error) => {
  console.error(error instanceof CheckFailed ? error.message : error?.stack ?? String(error));
  process.exit(1);
});
