-- The HTTP bench's wrk script: POSTs the stateless 2026-07-28 `run_python` call of `x = 1` that
-- the other clients send, and prints wrk's figures as one JSON line (ms).
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json, text/event-stream"
wrk.headers["mcp-protocol-version"] = "2026-07-28"
wrk.headers["mcp-method"] = "tools/call"
wrk.headers["mcp-name"] = "run_python"
wrk.body = [[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python",
"arguments":{"code":"x = 1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
"io.modelcontextprotocol/clientCapabilities":{},
"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"1"}}}}]]

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  io.write(string.format(
    '{"per_s": %f, "p50": %f, "p90": %f, "max": %f, "errors": %d}\n',
    summary.requests / summary.duration * 1e6, latency:percentile(50) / 1e3,
    latency:percentile(90) / 1e3, latency.max / 1e3, errors))
end
