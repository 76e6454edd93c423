// The resident client (RVBOX_PERSIST): `rvbox` executed as a program, as an
// operator's shell runs it, against a REAL server and agent on loopback. What
// an operator sees must not change: output, exit codes, stdin, `| head`,
// Ctrl-C and SIGTERM, typos, relative file names; what changes is only that a
// resident process serves the command lines (its log says it listened once).
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { cleanupTemp, OPERATOR_TOKEN, ROOT, sleep, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";
import { frame, frameReader, FRAME_MAX_BYTES, LOAD_TIME_VARIABLES, persistMs, socketDir, socketName } from "../../shells/operator/resident-wire.js";

const BIN = path.join(ROOT, "bin/rvbox.js");
let s: TestServer;
let agent: AgentDaemon;
let dir: string;
let runtime: string;
let env: Record<string, string>;

interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

/** `rvbox ARGS` executed as a program; `onSpawn` may signal it; stdin from `input` (or nothing). */
function rvbox(args: string[], o: { env?: Record<string, string>; cwd?: string; input?: Buffer; onStart?: (pid: number) => void } = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, { cwd: o.cwd ?? dir, env: { ...process.env, ...env, ...o.env }, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    let err = "";
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => {
      err += b.toString();
    });
    child.on("error", reject);
    child.stdin.on("error", () => {});
    if (o.input) child.stdin.end(o.input);
    else child.stdin.end();
    if (child.pid !== undefined) o.onStart?.(child.pid);
    child.on("close", (code, signal) => resolve({ code, signal, stdout: Buffer.concat(out), stderr: err }));
  });
}

const socketPath = (): string => path.join(runtime, "rvbox", socketName(ROOT));
const residentLog = (): string => (existsSync(`${socketPath()}.log`) ? readFileSync(`${socketPath()}.log`, "utf8") : "");
const listened = (): number =>
  residentLog()
    .split("\n")
    .filter((l) => l.includes("resident: listening")).length;

beforeAll(async () => {
  dir = await tempDir("rvbox-resident-");
  runtime = await tempDir("rvbox-runtime-");
  writeFileSync(path.join(dir, "operator-token"), `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  s = await startServer();
  agent = await startAgent(s.url, "host-r", { cwd: dir, killGraceMs: 1000 });
  await waitFor("agent connected", () => agent.connected);
  // Each test's resident is its own (XDG_RUNTIME_DIR), and stays 60 s after its last command line.
  env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(dir, "operator-token"), XDG_RUNTIME_DIR: runtime, RVBOX_PERSIST: "60s" };
  // The CLI bundle the resident runs, built before anything is timed by the client's start wait.
  const v = await rvbox(["version"], { env: { RVBOX_PERSIST: "" } });
  expect(v.code).toBe(0);
}, 120_000);

afterAll(async () => {
  // Removing its socket file stops a resident (it checks every 2 s).
  const d = path.join(runtime, "rvbox");
  if (existsSync(d)) for (const f of readdirSync(d)) if (f.endsWith(".sock")) await import("node:fs").then((fs) => fs.rmSync(path.join(d, f), { force: true }));
  await agent?.close({ killProcesses: true });
  await s?.close();
  await cleanupTemp();
});

describe("the resident client's frames (shells/operator/resident-wire.js)", () => {
  it("a stream cut anywhere gives the same frames; a payload over the bound is refused", () => {
    const frames: Array<[number, string]> = [
      [1, "hello"],
      [2, ""],
      [11, "x".repeat(70_000)],
      [15, "0"],
    ];
    const bytes = Buffer.concat(frames.flatMap(([t, p]) => frame(t, p)));
    for (const step of [1, 3, 5, 7, 4096, bytes.length]) {
      const got: Array<[number, string]> = [];
      const read = frameReader((t, p) => got.push([t, p.toString()]));
      for (let i = 0; i < bytes.length; i += step) read(bytes.subarray(i, i + step));
      expect(got).toEqual(frames);
    }
    const read = frameReader(() => {}, 16);
    expect(() => read(Buffer.concat(frame(11, "x".repeat(17))))).toThrow("frame of 17 bytes (at most 16)");
    expect(FRAME_MAX_BYTES).toBe(1024 * 1024);
  });

  it("RVBOX_PERSIST is a duration; empty, 0, no or nonsense mean off", () => {
    expect([persistMs("90s"), persistMs("10m"), persistMs("1h"), persistMs("30"), persistMs("500ms")]).toEqual([90_000, 600_000, 3_600_000, 30_000, 500]);
    for (const off of [undefined, "", "0", "no", "soon", "-5s"]) expect(persistMs(off)).toBeNull();
    expect(persistMs("99h")).toBe(24 * 3_600_000); // bounded to a day
  });

  it("the socket directory must be this user's alone", async () => {
    const base = await tempDir("rvbox-sockdir-");
    expect(socketDir({ XDG_RUNTIME_DIR: base }, false).problem).toBe("missing");
    const made = socketDir({ XDG_RUNTIME_DIR: base }, true);
    expect(made).toEqual({ dir: path.join(base, "rvbox"), problem: null });
    chmodSync(made.dir, 0o755);
    expect(socketDir({ XDG_RUNTIME_DIR: base }, true).problem).toBe("mode 755: others may enter it");
  });
});

describe("rvbox with RVBOX_PERSIST", () => {
  it("runs command lines in one resident: output, stderr and exit codes as without it", async () => {
    const a = await rvbox(["run", "host-r", "--follow", "--shell", "--", "echo out; echo err >&2; exit 3"]);
    expect([a.code, a.stdout.toString()]).toEqual([3, "out\n"]);
    expect(a.stderr).toContain("err\n");
    expect(a.stderr).toMatch(/rvbox: command \S+ submitted to host-r/);
    const b = await rvbox(["run", "host-r", "--follow", "--", "true"]);
    expect(b.code).toBe(0);
    const c = await rvbox(["clients"]);
    expect(c.code).toBe(0);
    expect(c.stdout.toString()).toMatch(/host-r\s+connected/);
    // One resident served all three: it listened once, and its socket is there.
    expect(existsSync(socketPath())).toBe(true);
    expect(listened()).toBe(1);
    // Without it, the same command line gives the same result.
    const d = await rvbox(["run", "host-r", "--follow", "--shell", "--", "echo out; echo err >&2; exit 3"], { env: { RVBOX_PERSIST: "" } });
    expect([d.code, d.stdout.toString()]).toEqual([3, "out\n"]);
  });

  it("R-S1: stdin (-i < file) arrives byte-exact; file names are read from the caller's directory", async () => {
    const input = Buffer.from(Array.from({ length: 40_000 }, (_, i) => `line ${i}\n`).join(""));
    const r = await rvbox(["run", "host-r", "-i", "--follow", "--", "sha256sum"], { input });
    expect(r.code).toBe(0);
    expect(r.stdout.toString().split(" ")[0]).toBe(createHash("sha256").update(input).digest("hex"));
    // --token and --script relative to the operator's working directory, not the resident's (/).
    const sub = path.join(dir, "sub");
    mkdirSync(sub, { recursive: true });
    writeFileSync(path.join(sub, "tok"), `${OPERATOR_TOKEN}\n`);
    writeFileSync(path.join(sub, "hello.sh"), "#!/bin/sh\necho from-script\n");
    const t = await rvbox(["run", "host-r", "--follow", "--token", "tok", "--script", "hello.sh"], { cwd: sub, env: { RVBOX_TOKEN_FILE: "" } });
    expect([t.code, t.stdout.toString()]).toEqual([0, "from-script\n"]);
    const missing = await rvbox(["clients", "--token", "nope"], { cwd: sub });
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain("cannot read the token file nope: no such file");
    // `< DIR` is refused before anything is sent, as without the resident.
    const dirIn = await new Promise<Ran>((resolve) => {
      const child = spawn("sh", ["-c", `exec "${BIN}" run host-r -i --follow -- cat < "${sub}"`], { env: { ...process.env, ...env }, cwd: dir });
      let err = "";
      child.stderr.on("data", (b: Buffer) => {
        err += b.toString();
      });
      child.on("close", (code, signal) => resolve({ code, signal, stdout: Buffer.alloc(0), stderr: err }));
    });
    expect(dirIn.stderr).toContain("stdin is a directory");
    expect(dirIn.code).toBe(2);
  });

  it("R-O8: `| head` ends the command line quietly with 141; the resident serves the next one", async () => {
    const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn("sh", ["-c", `"${BIN}" run host-r --follow -- seq 1 3000000 | head -2`], { env: { ...process.env, ...env } });
      let out = "";
      child.stdout.on("data", (b: Buffer) => {
        out += b.toString();
      });
      child.on("close", (code) => resolve({ code, out }));
    });
    expect(r.out).toBe("1\n2\n");
    // The pipeline's status is head's; the CLI's own, through a pipe closed under it:
    const closed = await new Promise<number | null>((resolve) => {
      const child = spawn(BIN, ["run", "host-r", "--follow", "--", "seq", "1", "3000000"], {
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "ignore"],
      });
      child.stdout.once("data", () => child.stdout.destroy());
      child.on("close", (code) => resolve(code));
    });
    expect(closed).toBe(141);
    const next = await rvbox(["run", "host-r", "--follow", "--", "echo", "next"]);
    expect([next.code, next.stdout.toString()]).toEqual([0, "next\n"]);
  });

  it("Ctrl-C detaches a follow (130) and --cancel-on-interrupt cancels; SIGTERM with no handler ends it by the signal", async () => {
    const detach = await rvbox(["run", "host-r", "--follow", "--", "sleep", "5"], {
      onStart: (pid) => void sleep(1500).then(() => process.kill(pid, "SIGINT")),
    });
    expect(detach.code).toBe(130);
    expect(detach.stderr).toMatch(/rvbox: detached; \S+ keeps running/);
    const cancel = await rvbox(["run", "host-r", "--follow", "--cancel-on-interrupt", "--", "sleep", "5"], {
      onStart: (pid) => void sleep(1500).then(() => process.kill(pid, "SIGINT")),
    });
    expect(cancel.code).toBe(130);
    expect(cancel.stderr).toMatch(/rvbox: command \S+ cancelled/);
    const id = (await rvbox(["run", "host-r", "--", "sleep", "3"])).stdout.toString().trim();
    const term = await rvbox(["logs", "--follow", id], { onStart: (pid) => void sleep(1500).then(() => process.kill(pid, "SIGTERM")) });
    expect([term.code, term.signal]).toEqual([null, "SIGTERM"]);
  });

  it("command lines run side by side in one resident, each with its own output and exit code", async () => {
    const before = listened();
    const runs = await Promise.all([1, 2, 3, 4].map((n) => rvbox(["run", "host-r", "--follow", "--shell", "--", `sleep 1; echo run-${n}; exit ${n}`])));
    expect(runs.map((r) => [r.code, r.stdout.toString()])).toEqual([1, 2, 3, 4].map((n) => [n, `run-${n}\n`]));
    expect(listened()).toBe(before);
  });

  it("a command line that sets a variable read while the CLI loads runs without the resident", async () => {
    // @ts-expect-error plain JS module without declarations
    const { LOAD_TIME_ENV } = (await import("../../bin/cli-snapshot.js")) as { LOAD_TIME_ENV: string[] };
    expect(LOAD_TIME_VARIABLES).toEqual(LOAD_TIME_ENV);
    const own = await tempDir("rvbox-loadtime-");
    const r = await rvbox(["run", "host-r", "--follow", "--", "echo", "portable"], { env: { XDG_RUNTIME_DIR: own, RVBOX_ZSTD: "portable" } });
    expect([r.code, r.stdout.toString(), r.stderr.includes("resident")]).toEqual([0, "portable\n", false]);
    expect(existsSync(path.join(own, "rvbox", socketName(ROOT)))).toBe(false);
  });

  it("a typo, help and an RVBOX_PERSIST that is no duration are answered as without the resident", async () => {
    const typo = await rvbox(["clinets"]);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('unknown command "clinets" (did you mean clients?)');
    expect(typo.stderr).not.toContain("resident");
    const nonsense = await rvbox(["run", "host-r", "--follow", "--", "echo", "ok"], { env: { RVBOX_PERSIST: "soon" } });
    expect([nonsense.code, nonsense.stdout.toString()]).toEqual([0, "ok\n"]);
    expect(nonsense.stderr).toContain("rvbox: resident client not used: RVBOX_PERSIST=soon: expected a duration (90s, 10m, 1h)");
    // An environment past HELLO_MAX_BYTES (256 KiB) is refused by the resident, and the command line runs without it.
    const big = Object.fromEntries([1, 2, 3].map((i) => [`RVBOX_TEST_BIG_${i}`, "x".repeat(100_000)]));
    const large = await rvbox(["run", "host-r", "--follow", "--", "echo", "big"], { env: big });
    expect([large.code, large.stdout.toString()]).toEqual([0, "big\n"]);
    expect(large.stderr).toMatch(/rvbox: resident client not used: HELLO of \d+ bytes \(argv and environment\), at most 262144/);
    const help = await rvbox(["ls", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout.toString()).toContain("usage: rvbox ls");
  });

  it("a resident killed mid-command: the client says so and exits 1; the next command line starts a new one", async () => {
    const before = listened();
    const r = await rvbox(["run", "host-r", "--follow", "--", "sleep", "3"], {
      onStart: () =>
        void sleep(1500).then(async () => {
          // The newest resident's pid, from its log (no pgrep needed on the machine).
          const pids = [...residentLog().matchAll(/resident: listening on .* \(pid (\d+)\)/g)].map((m) => m[1]!).slice(-1);
          for (const p of pids) process.kill(Number(p), "SIGKILL");
        }),
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("the resident client went away before the command line ended");
    const again = await rvbox(["run", "host-r", "--follow", "--", "echo", "again"]);
    expect([again.code, again.stdout.toString()]).toEqual([0, "again\n"]);
    expect(listened()).toBe(before + 1);
  });

  it("a socket directory others may enter is not used: a note, and the command line runs without it", async () => {
    const open = await tempDir("rvbox-open-");
    mkdirSync(path.join(open, "rvbox"), { mode: 0o755 });
    chmodSync(path.join(open, "rvbox"), 0o755);
    const r = await rvbox(["run", "host-r", "--follow", "--", "echo", "ok"], { env: { XDG_RUNTIME_DIR: open } });
    expect([r.code, r.stdout.toString()]).toEqual([0, "ok\n"]);
    expect(r.stderr).toContain(`rvbox: resident client not used: ${path.join(open, "rvbox")}: mode 755: others may enter it`);
    expect(readdirSync(path.join(open, "rvbox"))).toEqual([]);
  });

  it("leaves after RVBOX_PERSIST with nothing running", async () => {
    const own = await tempDir("rvbox-idle-");
    const r = await rvbox(["clients"], { env: { XDG_RUNTIME_DIR: own, RVBOX_PERSIST: "1s" } });
    expect(r.code).toBe(0);
    const sock = path.join(own, "rvbox", socketName(ROOT));
    expect(existsSync(sock)).toBe(true);
    await waitFor("the idle resident gone", () => !existsSync(sock), 10_000);
    expect(readFileSync(`${sock}.log`, "utf8")).toContain("resident: stopping (idle)");
  });
});
