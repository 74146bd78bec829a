// The HTTP bench's Node client: `node http_fetch.mjs URL CONNECTIONS CALLS`. Node's own fetch
// (undici, what TypeScript MCP clients use), keep-alive, CONNECTIONS calls in flight (so as many
// connections) until CALLS stateless 2026-07-28 `run_python` calls of `x = 1` are answered. Prints
// one JSON line: calls, calls per second, p50, p90 and max in ms, and the CPU time this client
// spent per call in ms (`cpu`: what the client itself costs the machine).
const [url, connections, calls] = [process.argv[2], +process.argv[3], +process.argv[4]];
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
let id = 0;
async function call() {
  const body = JSON.stringify({
    jsonrpc: "2.0", id: ++id, method: "tools/call",
    params: { name: "run_python", arguments: { code: "x = 1" }, _meta: meta },
  });
  const reply = await fetch(url, { method: "POST", body, headers });
  const text = await reply.text();
  if (reply.status !== 200 || !text.includes('"isError":false')) {
    throw new Error(`${reply.status} ${text.slice(0, 300)}`);
  }
}
for (let i = 0; i < 20; i++) await call();
const times = [];
let left = calls;
const started = performance.now();
const cpuStarted = process.cpuUsage();
await Promise.all(Array.from({ length: connections }, async () => {
  while (left-- > 0) {
    const t = performance.now();
    await call();
    times.push(performance.now() - t);
  }
}));
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuStarted);
times.sort((a, b) => a - b);
const at = (p) => times[Math.min(times.length - 1, Math.floor(times.length * p / 100))];
console.log(JSON.stringify({
  calls: times.length, per_s: times.length / seconds, p50: at(50), p90: at(90), max: times.at(-1),
  cpu: (cpu.user + cpu.system) / 1000 / times.length,
}));
