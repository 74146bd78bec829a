"""The HTTP bench's Python client: `python client_sdk.py TARGET IN_FLIGHT CALLS`.

The MCP Python SDK's client, IN_FLIGHT calls at a time until CALLS `run_python` calls of `x = 1`
are answered, over either transport: TARGET an http:// URL (streamable HTTP over httpx,
keep-alive, so one connection per call in flight), or the path of a server, which the SDK spawns
and speaks stdio to (the bench's reference, measured by the same client). Prints one JSON line: calls,
calls per second, p50, p90 and max in ms, and the CPU time this client spent per call in ms (`cpu`:
what the client itself costs the machine).
"""

import asyncio
import json
import os
import sys
import time

from mcp import Client, StdioServerParameters


async def main(target: str, in_flight: int, calls: int) -> None:
    # The server inherits this environment (its module cache), which the SDK would otherwise trim.
    server = target if target.startswith("http") else StdioServerParameters(
        command=target, env=dict(os.environ))
    async with Client(server) as client:
        for _ in range(20):
            await client.call_tool("run_python", {"code": "x = 1"})
        times: list[float] = []
        left = [calls]

        async def caller() -> None:
            while left[0] > 0:
                left[0] -= 1
                started = time.perf_counter()
                reply = await client.call_tool("run_python", {"code": "x = 1"})
                times.append((time.perf_counter() - started) * 1000)
                if reply.is_error:
                    raise RuntimeError(f"a call failed: {reply}")

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller() for _ in range(in_flight)))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu
    times.sort()

    def at(p: int) -> float:
        return times[min(len(times) - 1, len(times) * p // 100)]

    print(json.dumps({"calls": len(times), "per_s": len(times) / seconds,
                      "p50": at(50), "p90": at(90), "max": times[-1],
                      "cpu": cpu * 1000 / len(times)}))


asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
