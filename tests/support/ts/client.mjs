// A TypeScript-SDK MCP client for `toolpool mcp --http`, as an MCP host written in JS would be.
//
//   node client.mjs URL TOKEN FILE
//
// With the official SDK's Client and StreamableHTTPClientTransport (the token as a bearer header
// in requestInit), it lists the tools and calls read_file on FILE (a path in the pool's
// workspace) and bash. Before that, plain fetch POSTs without the token and with a wrong one.
// It prints one JSON object with what it got and exits 0; on any error it writes the error to
// stderr and exits 1. The SDK resolves from the node_modules beside this file: the Python test
// copies it into the folder where it installed the SDK.
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

async function main() {
  const [url, token, file] = process.argv.slice(2);
  if (!url || !token || !file) {
    throw new Error("usage: node client.mjs URL TOKEN FILE");
  }
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
    console.log(JSON.stringify({
      unauthorized,
      server: client.getServerVersion() ?? null,
      protocolVersion: transport.protocolVersion ?? null,
      tools: tools.map((tool) => ({ name: tool.name, annotations: tool.annotations ?? null })),
      read_file: { isError: read.isError ?? null, texts: texts(read) },
      bash: { isError: bash.isError ?? null, texts: texts(bash) },
    }));
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  console.error(error?.stack ?? String(error));
  process.exit(1);
});
