/**
 * The CLI's start-up snapshot (bin/cli-snapshot.js, bin/rvbox-snapshot.ts):
 * an operator command restored from it answers as it does without it, each
 * process gets its own randomness, and a snapshot that is stale, of another
 * tree, or baked with a load-time setting the run changes is never used: the
 * command then runs the old way. (Not a protocol requirement; the start-up
 * path of issue 11.)
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BIN, controlClient, OPERATOR_TOKEN, ROOT, startAgent, startServer, waitFor, type TestServer } from "../shells/e2e/helpers.js";

// @ts-expect-error plain JS module without declarations
const snapshot = (await import("../../bin/cli-snapshot.js")) as {
  buildSnapshot(o: { root: string; dir: string; link: string }): Promise<string | undefined>;
  buildSnapshotInBackground(o: { root: string; dir: string }): boolean;
};
const routes = await import("../../bin/cli-routes.js");

const tmp = mkdtempSync(path.join(tmpdir(), "rvbox-snapshot-"));
let blob = "";
let inputs = "";
let server: TestServer;
let stopAgent: () => Promise<void>;
const env: NodeJS.ProcessEnv = { ...process.env };
for (const k of ["RVBOX_BUNDLE", "RVBOX_SNAPSHOT", "RVBOX_ZSTD", "RVBOX_LAUNCH"]) delete env[k];

beforeAll(async () => {
  const id = await snapshot.buildSnapshot({ root: ROOT, dir: tmp, link: path.join(tmp, "snapshot") });
  expect(id).toBeDefined();
  blob = path.join(tmp, id!, "blob");
  inputs = path.join(tmp, id!, "inputs.json");
  server = await startServer();
  const agent = await startAgent(server.url, "snap-a");
  stopAgent = () => agent.close();
  const tokenFile = path.join(tmp, "operator-token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  Object.assign(env, { RVBOX_SERVER: server.controlUrl, RVBOX_TOKEN_FILE: tokenFile });
  await waitFor("agent snap-a connected", async () => {
    const r = await controlClient(server.controlUrl).listClients({});
    return r.clients.some((c) => c.clientId === "snap-a" && c.connected) || undefined;
  });
}, 120_000);

afterAll(async () => {
  await stopAgent?.();
  await server?.close();
  rmSync(tmp, { recursive: true, force: true });
});

/** Not spawnSync: the server under test runs in this process and must keep answering. */
function restored(args: string[], extra: NodeJS.ProcessEnv = {}, script = BIN): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, ["--snapshot-blob", blob, script, ...args], { cwd: ROOT, env: { ...env, ...extra }, stdio: ["ignore", "pipe", "pipe"] });
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

describe("rvbox restored from its start-up snapshot", () => {
  it("prints the same version line as the bundle", async () => {
    const a = await restored(["--version"]);
    const b = spawnSync(process.execPath, [BIN, "--version"], { cwd: ROOT, env: { ...env, RVBOX_SNAPSHOT: "0" }, encoding: "utf8" });
    expect(a.status, a.stderr).toBe(0);
    expect(a.stdout).toMatch(/^rvbox \d+\.\d+\.\d+ on Node v\d+/);
    expect(a.stdout).toBe(b.stdout);
  });

  it("runs a command with --follow: its output, its exit code, and the server's view", async () => {
    const r = await restored(["run", "snap-a", "--follow", "--", "sh", "-c", "echo out; echo err >&2; exit 3"], { RVBOX_BUNDLE_DEBUG: "1" });
    expect(r.stdout).toBe("out\n");
    expect(r.stderr).toContain("err\n");
    expect(r.stderr).not.toContain("snapshot not used");
    expect(r.status).toBe(3);
    const clients = await restored(["clients", "--json"]);
    expect(clients.status, clients.stderr).toBe(0);
    expect(JSON.parse(clients.stdout).map((c: { clientId: string }) => c.clientId)).toContain("snap-a");
  });

  it("gives every process its own randomness: two submits from two restored processes are two commands", async () => {
    const before = (await controlClient(server.controlUrl).listCommands({ clientId: "snap-a" })).commands.length;
    for (let i = 0; i < 2; i++) {
      const r = await restored(["run", "snap-a", "--follow", "--", "true"]);
      expect(r.status, r.stderr).toBe(0);
    }
    // Idempotent submits: a request id baked into the snapshot would make the second a repeat of the first.
    const after = (await controlClient(server.controlUrl).listCommands({ clientId: "snap-a" })).commands;
    expect(after.length).toBe(before + 2);
    expect(new Set(after.map((c) => c.issueUuid)).size).toBe(after.length);
  });

  it("refuses an argument that is not valid UTF-8 itself, before a fallback child could get it as replaced text (exit 2)", async () => {
    // A shell puts the raw byte in argv; Node's spawn takes strings only.
    const args = [process.execPath, "--snapshot-blob", blob, BIN, "run", "snap-a", "--", "echo"];
    for (const extra of [{}, { RVBOX_ZSTD: "portable" }]) {
      const r = await new Promise<{ status: number | null; stderr: string }>((resolve) => {
        const p = spawn("/bin/sh", ["-c", 'exec "$@" "$(printf "a\\377")"', "sh", ...args], { cwd: ROOT, env: { ...env, ...extra, RVBOX_BUNDLE_DEBUG: "1" } });
        let stderr = "";
        p.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
        p.on("close", (status) => resolve({ status, stderr }));
      });
      expect(r.stderr).toContain('rvbox: argument 5 is not valid UTF-8: "a\\xff"');
      expect(r.stderr).not.toContain("snapshot not used");
      expect(r.status).toBe(2);
    }
  });

  it("is not used once a file it was built from changed: the command runs the old way and says why", async () => {
    const saved = readFileSync(inputs, "utf8");
    try {
      const m = JSON.parse(saved) as { inputs: string[][] };
      m.inputs[0]![4] = "0"; // a ctime no file has: as if the file had been written since
      writeFileSync(inputs, JSON.stringify(m));
      const r = await restored(["--version"], { RVBOX_BUNDLE_DEBUG: "1", RVBOX_SNAPSHOT: undefined });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).toContain("start-up snapshot not used: sources changed");
      expect(r.stdout).toMatch(/^rvbox \d+\.\d+\.\d+ on Node v\d+/);
    } finally {
      writeFileSync(inputs, saved);
    }
  });

  it("is not used with a setting read while modules load (RVBOX_ZSTD), nor for the daemons' commands", async () => {
    const z = await restored(["--version"], { RVBOX_ZSTD: "portable", RVBOX_BUNDLE_DEBUG: "1" });
    expect(z.status, z.stderr).toBe(0);
    expect(z.stdout).toContain("zstd portable");
    expect(z.stderr).toContain("RVBOX_ZSTD is set");
    const s = await restored(["server", "--help"], { RVBOX_BUNDLE_DEBUG: "1" });
    expect(s.stderr).toContain("unbundled command");
    expect(s.stdout + s.stderr).toMatch(/--listen/);
  });

  it("is not used for another tree's script: that script runs instead", async () => {
    const other = path.join(tmp, "other/bin");
    mkdirSync(other, { recursive: true });
    writeFileSync(path.join(other, "rvbox.js"), 'console.log("other tree", process.argv.slice(2).join(" "));\n');
    const r = await restored(["clients"], { RVBOX_BUNDLE_DEBUG: "1" }, path.join(other, "rvbox.js"));
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe("other tree clients\n");
    expect(r.stderr).toContain("another tree");
  });
});

describe("background snapshot builds", () => {
  it("start one at a time, and none for a while after one failed (every command would pay for it)", async () => {
    const root = path.join(tmp, "no-sources"); // nothing to build: the build fails
    const dir = path.join(tmp, "cache-of-no-sources");
    mkdirSync(root, { recursive: true });
    expect(snapshot.buildSnapshotInBackground({ root, dir })).toBe(true);
    expect(snapshot.buildSnapshotInBackground({ root, dir })).toBe(false); // the first still holds the lock
    await waitFor(
      "the failed build's marker",
      () => (existsSync(path.join(dir, "snapshot.failed")) && !existsSync(path.join(dir, "snapshot.lock"))) || undefined,
      60_000,
      100,
    );
    expect(snapshot.buildSnapshotInBackground({ root, dir })).toBe(false);
    expect(readdirSync(dir).filter((n) => n.startsWith("s") && n !== "snapshot.failed")).toEqual([]); // nothing half-built left
  });
});

describe("bin/rvbox.js's first line", () => {
  it("sends exactly the unbundled commands (bin/cli-routes.js), help and version past the snapshot", () => {
    const line = readFileSync(BIN, "utf8").split("\n")[1]!;
    const cases = /case "\$RVBOX_BUNDLE\$RVBOX_SNAPSHOT:\$1" in ([^)]*)\)/.exec(line)![1]!.split("|");
    const named = new Set(cases.filter((c) => c.startsWith("*:")).map((c) => c.slice(2)));
    // help and version load too little to gain from a snapshot: they start as before
    for (const cheap of ["", "help", "-h", "--help", "version", "-V", "--version"]) expect(named.delete(cheap)).toBe(true);
    expect(named).toEqual(routes.UNBUNDLED_COMMANDS);
    expect(cases).toContain("*0:*"); // RVBOX_BUNDLE=0 or RVBOX_SNAPSHOT=0
    // the very patterns `npm run build` writes into dist/bin/rvbox.js's first line (bin/cli-dist.js)
    expect(cases.join("|")).toBe(routes.noSnapshotCases());
  });
});
