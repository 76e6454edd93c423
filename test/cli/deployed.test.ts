/**
 * The deployed CLI (issue 41, section 2): `npm run build` (tsc, then
 * bin/cli-dist.js) gives dist/ the CLI bundle and start-up snapshot the
 * README's bin/rvbox.js has, so `node dist/bin/rvbox.js` (the systemd units,
 * DEPLOY.md) runs the operator commands from the bundle and `dist/bin/rvbox.js`
 * executed (DEPLOY.md's `rvbox` on PATH) from the snapshot; an operator sees
 * which with RVBOX_BUNDLE_DEBUG=1. The install directory is read-only to them:
 * nothing is written under it (root could write there, so the test compares
 * the tree's listing before and after instead of relying on the permissions).
 * Not a protocol requirement; no timing is asserted (`npm run bench:startup`
 * measures it).
 */
import { execFile, spawn } from "node:child_process";
import { chmodSync, copyFileSync, lstatSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanupTemp, controlClient, OPERATOR_TOKEN, ROOT, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";

const run = promisify(execFile);
let tree = "";
let home = "";
let server: TestServer;
let stopAgent: () => Promise<void>;
const env: NodeJS.ProcessEnv = { ...process.env };
for (const k of ["RVBOX_BUNDLE", "RVBOX_SNAPSHOT", "RVBOX_ZSTD", "RVBOX_LAUNCH", "RVBOX_PERSIST", "XDG_CACHE_HOME", "NODE_COMPILE_CACHE"]) delete env[k];

/** Every path under `dir` (symlinks not followed) with its size and mtime: what a write would change. */
function listing(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    const s = lstatSync(p);
    out.push(`${p} ${s.size} ${s.mtimeMs}`);
    if (s.isDirectory()) out.push(...listing(p));
  }
  return out.sort();
}

/** Not spawnSync: the server under test runs in this process and must keep answering. */
function rvbox(cmd: string, args: string[], extra: NodeJS.ProcessEnv = {}): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd: home, env: { ...env, ...extra }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    p.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => p.kill("SIGKILL"), 60_000);
    p.on("error", reject);
    p.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

beforeAll(async () => {
  // A deployed tree of its own (the suite's other tests build ROOT/dist with a bare tsc):
  // package.json, node_modules (this checkout's, linked), dist/ from `npm run build`'s two steps.
  const base = await tempDir("rvbox-deployed-");
  tree = path.join(base, "opt-rvbox");
  home = path.join(base, "home");
  mkdirSync(tree);
  mkdirSync(home);
  copyFileSync(path.join(ROOT, "package.json"), path.join(tree, "package.json"));
  symlinkSync(path.join(ROOT, "node_modules"), path.join(tree, "node_modules"));
  await run(process.execPath, [path.join(ROOT, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.build.json", "--outDir", path.join(tree, "dist")], {
    cwd: ROOT,
  });
  await run(process.execPath, [path.join(ROOT, "bin/cli-dist.js"), path.join(tree, "dist")], { cwd: ROOT });
  // Read-only, as an install under /opt is to an operator.
  for (const p of listing(tree)) {
    const f = p.slice(0, p.indexOf(" "));
    if (!lstatSync(f).isSymbolicLink()) chmodSync(f, lstatSync(f).mode & ~0o222);
  }
  chmodSync(tree, 0o555);

  server = await startServer();
  const agent = await startAgent(server.url, "deployed-a");
  stopAgent = () => agent.close();
  const tokenFile = path.join(home, "operator-token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  Object.assign(env, { HOME: home, RVBOX_SERVER: server.controlUrl, RVBOX_TOKEN_FILE: tokenFile });
  await waitFor("agent deployed-a connected", async () => {
    const r = await controlClient(server.controlUrl).listClients({});
    return r.clients.some((c) => c.clientId === "deployed-a" && c.connected) || undefined;
  });
}, 300_000);

afterAll(async () => {
  await stopAgent?.();
  await server?.close();
  if (tree) chmodSync(tree, 0o755); // so that the temporary directory can be removed
  await cleanupTemp();
});

describe("the deployed CLI (npm run build)", () => {
  it("`node dist/bin/rvbox.js` (the units' and scripts' way) runs an operator command from the build's snapshot, else its bundle, and writes nothing under the install directory", async () => {
    const before = listing(tree);
    const dist = path.join(tree, "dist");
    const bin = path.join(dist, "bin/rvbox.js");
    const build = `${dist}/cli/b[0-9a-z]+-\\d+`;
    // Node started without the snapshot replaces itself with one started from it (bin/cli-built.js)
    const r = await rvbox(process.execPath, [bin, "clients", "--json"], { RVBOX_BUNDLE_DEBUG: "1" });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`^rvbox: start: snapshot ${build}/snapshot/blob\\n`));
    expect(JSON.parse(r.stdout).map((c: { clientId: string }) => c.clientId)).toContain("deployed-a");
    // RVBOX_SNAPSHOT=0, or a variable baked into the snapshot set: the bundle, in this process
    for (const extra of [{ RVBOX_SNAPSHOT: "0" }, { RVBOX_ZSTD: "portable" }]) {
      const b = await rvbox(process.execPath, [bin, "clients", "--json"], { RVBOX_BUNDLE_DEBUG: "1", ...extra });
      expect(b.status, b.stderr).toBe(0);
      expect(b.stderr).toMatch(new RegExp(`^rvbox: start: bundle ${build}\\n`));
      expect(JSON.parse(b.stdout).map((c: { clientId: string }) => c.clientId)).toContain("deployed-a");
    }
    // version (never from the snapshot) from the bundle still finds the release's package.json two levels above dist/bin
    const v = await rvbox(process.execPath, [bin, "version"], { RVBOX_BUNDLE_DEBUG: "1" });
    expect(v.stderr).toMatch(/^rvbox: start: bundle /);
    expect(v.stdout).toMatch(/^rvbox 0\.1\.0 on Node v\d+/);
    // RVBOX_BUNDLE=0: the compiled files, as before the build bundled the CLI
    const plain = await rvbox(process.execPath, [bin, "clients"], { RVBOX_BUNDLE: "0", RVBOX_BUNDLE_DEBUG: "1" });
    expect(plain.status, plain.stderr).toBe(0);
    expect(plain.stderr).not.toContain("rvbox: start:");
    expect(listing(tree)).toEqual(before);
    // V8's compile cache went to the user's cache directory instead
    expect(readdirSync(path.join(home, ".cache/rvbox/v8")).length).toBeGreaterThan(0);
  });

  it("`dist/bin/rvbox.js` executed (through a symlink on PATH) runs from the build's start-up snapshot: output, exit code, nothing written", async () => {
    const before = listing(tree);
    const link = path.join(home, "rvbox");
    symlinkSync(path.join(tree, "dist/bin/rvbox.js"), link);
    const r = await rvbox(link, ["run", "deployed-a", "--follow", "--", "sh", "-c", "echo out; exit 3"], { RVBOX_BUNDLE_DEBUG: "1" });
    expect(r.stdout).toBe("out\n");
    expect(r.stderr).toMatch(new RegExp(`^rvbox: start: snapshot ${path.join(tree, "dist/bin")}/\\.\\./cli/b[0-9a-z]+-\\d+/snapshot/blob\\n`));
    expect(r.status).toBe(3);
    // RVBOX_SNAPSHOT=0: the bundle instead
    const b = await rvbox(link, ["clients"], { RVBOX_SNAPSHOT: "0", RVBOX_BUNDLE_DEBUG: "1" });
    expect(b.status, b.stderr).toBe(0);
    expect(b.stderr).toMatch(/^rvbox: start: bundle /);
    expect(listing(tree)).toEqual(before);
  });

  it("the build's snapshot restored for another launcher (not the dist/bin/rvbox.js that names its build) is not used: that launcher runs instead", async () => {
    const cli = path.join(tree, "dist/cli");
    const build = readdirSync(cli).find((n) => /^b[0-9a-z]+-\d+$/.test(n))!;
    const blob = path.join(cli, build, "snapshot/blob");
    // another build's launcher, or one a bare tsc rewrote (BUILT_CLI = "")
    const other = path.join(home, "other-rvbox.js");
    writeFileSync(other, 'const BUILT_CLI = "";\nconsole.log(`other launcher: ${process.argv.slice(2).join(" ")}`);\n');
    const r = await rvbox(process.execPath, ["--snapshot-blob", blob, other, "clients", "--json"], { RVBOX_BUNDLE_DEBUG: "1" });
    expect(r.stderr).toContain("rvbox: start-up snapshot not used: another build");
    expect(r.stdout).toBe("other launcher: clients --json\n");
    expect(r.status, r.stderr).toBe(0);
  });
});
