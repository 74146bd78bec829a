// The HTTP bench's Node client: `node client_node.mjs TARGET IN_FLIGHT CALLS`. It sends the same
// stateless 2026-07-28 `run_python` calls of `x = 1` over either transport, IN_FLIGHT at a time,
// until CALLS are answered:
// - TARGET an http:// URL: Node's own fetch (undici, what TypeScript MCP clients use), keep-alive,
//   so one connection per call in flight;
// - TARGET the path of a server: spawned, the calls in flight on its one stdin/stdout pipe as
//   newline-delimited JSON-RPC (stdio, measured by the same client for the bench's reference).
// Prints one JSON line: calls, calls per second, p50, p90 and max in ms, and the CPU time this
// client spent per call in ms (`cpu`: what the client itself costs the machine).
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

const [target, inFlight, calls] = [process.argv[2], +process.argv[3], +process.argv[4]];
const meta = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientCapabilities": {},
  "io.modelcontextprotocol/clientInfo": { name: "http-bench", version: "1" },
};
const headers = {
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2026-07-28",
  "mcp-method": "tools/call",
  "mcp-name": "run_python",
};

// Sends one request body; resolves to the reply's text once the status says it was answered.
function overHttp(url) {
  return {
    async send(_id, body) {
      const reply = await fetch(url, { method: "POST", body, headers });
      const text = await reply.text();
      if (reply.status !== 200) throw new Error(`${reply.status} ${text.slice(0, 300)}`);
      return text;
    },
    close() {},
  };
}

function overStdio(command) {
  const server = spawn(command, [], { stdio: ["pipe", "pipe", "inherit"] });
  const waiting = new Map();
  // Replies open with their id (`{"jsonrpc":"2.0","id":N,`); lines without one are notifications.
  createInterface({ input: server.stdout }).on("line", (line) => {
    const id = /"id":(\d+)/.exec(line)?.[1];
    const done = id && waiting.get(+id);
    if (done) {
      waiting.delete(+id);
      done(line);
    }
  });
  server.on("exit", (code) => {
    if (waiting.size) throw new Error(`the server exited (${code}) with calls in flight`);
  });
  return {
    send: (id, body) => new Promise((resolve) => {
      waiting.set(id, resolve);
      server.stdin.write(body + "\n");
    }),
    close: () => server.stdin.end(),
  };
}

const transport = target.startsWith("http") ? overHttp(target) : overStdio(target);
let id = 0;
async function call() {
  const body = JSON.stringify({
    jsonrpc: "2.0", id: ++id, method: "tools/call",
    params: { name: "run_python", arguments: { code: "x = 1" }, _meta: meta },
  });
  const text = await transport.send(id, body);
  if (!text.includes('"isError":false')) throw new Error(text.slice(0, 300));
}
for (let i = 0; i < 20; i++) await call();
const times = [];
let left = calls;
const started = performance.now();
const cpuStarted = process.cpuUsage();
await Promise.all(Array.from({ length: inFlight }, async () => {
  while (left-- > 0) {
    const t = performance.now();
    await call();
    times.push(performance.now() - t);
  }
}));
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuStarted);
transport.close();
times.sort((a, b) => a - b);
const at = (p) => times[Math.min(times.length - 1, Math.floor(times.length * p / 100))];
console.log(JSON.stringify({
  calls: times.length, per_s: times.length / seconds, p50: at(50), p90: at(90), max: times.at(-1),
  cpu: (cpu.user + cpu.system) / 1000 / times.length,
}));
