#!/usr/bin/env node
"use strict";
// Writes the package.json of a platform package, @safe-python-mcp/PLATFORM, which holds that
// platform's binaries in bin/ (scripts/dist.sh copies them there and runs `npm pack`).
//
//   node packaging/npm/platform.js PLATFORM VERSION OUTDIR
//
//   PLATFORM  a platform of packaging/targets.tsv, as Node names it: linux-x64, win32-x64, ...
//   VERSION   the release's version, which the main package (packaging/npm/main) pins exactly
//   OUTDIR    where to write package.json (created if missing)
const fs = require("fs");
const path = require("path");

const usage = "usage: node packaging/npm/platform.js PLATFORM VERSION OUTDIR";
const args = process.argv.slice(2);
if (args.includes("-h") || args.includes("--help")) {
  console.log(usage);
  process.exit(0);
}
if (args.length !== 3) fail(`expected 3 arguments, got ${args.length}\n${usage}`);
const [platform, version, outdir] = args;

const platforms = fs
  .readFileSync(path.join(__dirname, "..", "targets.tsv"), "utf8")
  .split("\n")
  .filter((line) => line.trim() && !line.startsWith("#"))
  .map((line) => line.split("\t")[0]);
if (!platforms.includes(platform)) {
  fail(`unknown platform ${platform}: packaging/targets.tsv has ${platforms.join(", ")}`);
}
// The main package takes its platform packages at its own exact version, so any other cannot be
// installed with it.
const main = require("./main/package.json");
if (version !== main.version) {
  fail(`version ${version} is not packaging/npm/main/package.json's ${main.version}`);
}

const [os, cpu] = platform.split("-");
const manifest = {
  name: `@safe-python-mcp/${platform}`,
  version,
  description: `The ${platform} binaries of safe-python-mcp; install safe-python-mcp, which depends on this package.`,
  license: main.license,
  repository: main.repository,
  os: [os],
  cpu: [cpu],
  // The binaries are linked against glibc; on musl (Alpine) npm skips this package.
  ...(os === "linux" && { libc: ["glibc"] }),
  files: ["bin/"],
  // Yarn PnP runs binaries from disk, not from its zip archives.
  preferUnplugged: true,
};
fs.mkdirSync(outdir, { recursive: true });
fs.writeFileSync(path.join(outdir, "package.json"), JSON.stringify(manifest, null, 2) + "\n");

function fail(message) {
  console.error(`platform.js: ${message}`);
  process.exit(2);
}
