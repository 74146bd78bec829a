"use strict";
// Runs a binary of this machine's platform package, @safe-python-mcp/PLATFORM: an optional
// dependency of this package, which npm installs only where its `os`, `cpu` and `libc` match (the
// esbuild pattern: no download and no script at install time). The binary is the process that
// matters; this one only passes on its arguments, its signals and its exit.
const { spawn } = require("child_process");
const path = require("path");

// What a client or a terminal sends to stop the server; the child decides how to stop.
const FORWARDED = ["SIGINT", "SIGTERM", "SIGHUP"];

function launch(name) {
  const platform = `${process.platform}-${process.arch}`;
  const pkg = `@safe-python-mcp/${platform}`;
  let dir;
  try {
    dir = path.dirname(require.resolve(`${pkg}/package.json`));
  } catch {
    fail(missing(name, platform, pkg));
  }
  const exe = path.join(dir, "bin", name + (process.platform === "win32" ? ".exe" : ""));
  const child = spawn(exe, process.argv.slice(2), { stdio: "inherit" });
  // On Windows, Ctrl-C reaches every process of the console, the binary included, and
  // ChildProcess.kill would end it outright: there, only wait for its exit.
  const forward = process.platform === "win32" ? () => {} : (signal) => child.kill(signal);
  for (const signal of FORWARDED) process.on(signal, forward);
  child.on("error", (err) => fail(`${name}: cannot run ${exe}: ${err.message}`));
  child.on("exit", (code, signal) => {
    if (signal === null) process.exit(code);
    // Die of the same signal, so that whoever started us sees what happened to the binary.
    for (const s of FORWARDED) process.off(s, forward);
    process.kill(process.pid, signal);
  });
}

function missing(name, platform, pkg) {
  const supported = Object.keys(require("../package.json").optionalDependencies)
    .map((dep) => dep.slice("@safe-python-mcp/".length))
    .join(", ");
  return [
    `${name}: the package ${pkg}, which holds the binaries for this machine (${platform}), is not installed.`,
    `Platform packages exist for: ${supported}.`,
    "If this machine is one of them, npm left the optional dependency out: install again without",
    "--omit=optional or --no-optional, and without a lockfile made on another platform (the Linux",
    "packages also need glibc).",
    "Other ways to install: `uvx safe-python-mcp` (Python),",
    "`cargo install --locked safe-python-executor` (Rust).",
  ].join("\n");
}

function fail(message) {
  console.error(message);
  process.exit(1);
}

module.exports = launch;
