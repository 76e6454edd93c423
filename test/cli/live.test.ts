// The operator CLI against a REAL server and agent on loopback (in-process
// daemons, the CLI in-process with captured stdio, one run as a child process).
import { execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { closeSync, constants, openSync, readFileSync, readSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { cleanupTemp, OPERATOR_TOKEN, ROOT, sleep, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";
import { cli } from "./helpers.js";

let s: TestServer;
let agent: AgentDaemon;
let tokenFile: string;
let badTokenFile: string;
let dir: string;
let env: Record<string, string>;

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

beforeAll(async () => {
  dir = await tempDir("rvbox-cli-");
  tokenFile = path.join(dir, "operator-token");
  badTokenFile = path.join(dir, "bad-token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  writeFileSync(badTokenFile, "not-the-operator-token\n", { mode: 0o600 });
  // Small retention so a chatty command's old output is removed (R-O5).
  s = await startServer({ limits: { outputPerCommand: 256 * 1024, segmentBytes: 64 * 1024 } });
  agent = await startAgent(s.url, "host-a", { cwd: dir, killGraceMs: 1000 });
  await waitFor("agent connected", () => agent.connected);
  env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: tokenFile };
});

afterAll(async () => {
  await agent?.close({ killProcesses: true });
  await s?.close();
  await cleanupTemp();
});

async function waitRunning(uuid: string): Promise<void> {
  await waitFor(`${uuid} running`, async () => (await s.client.getCommand({ issueUuid: uuid })).command?.state === L.RUNNING);
}

describe("rvbox run", () => {
  it("prints the command id; get shows it; ls and ls --json list it", async () => {
    const r = await cli(["run", "host-a", "--", "echo", "hi"], { env });
    expect(r.code).toBe(0);
    const id = r.stdout.trim();
    expect(id).toMatch(UUID_RE);
    await waitFor("done", async () => (await s.client.getCommand({ issueUuid: id })).command?.state === L.SUCCEEDED);
    const g = await cli(["get", id], { env });
    expect(g.code).toBe(0);
    expect(g.stdout).toMatch(/state\s+succeeded \(exit 0\)/);
    expect(g.stdout).toContain("argv: echo hi");
    expect(g.stdout).toMatch(/cli exit code\s+0/);
    const ls = await cli(["ls", "--client", "host-a"], { env });
    expect(ls.stdout).toMatch(new RegExp(`${id}\\s+host-a\\s+succeeded\\s+1\\s+exit 0`));
    const js = JSON.parse((await cli(["ls", "--json", "--state", "succeeded"], { env })).stdout) as Array<{ uuid: string; state: string; exitCode: number }>;
    expect(js.find((c) => c.uuid === id)).toMatchObject({ state: "succeeded", exitCode: 0 });
    const gj = JSON.parse((await cli(["get", id, "--json"], { env })).stdout) as { uuid: string; program: string };
    expect(gj).toMatchObject({ uuid: id, program: "argv: echo hi" });
    // A client id that never registered (a typo) is named as such; a known one with nothing to show is not.
    const typo = await cli(["ls", "--client", "host-b"], { env });
    expect([typo.code, typo.stdout.trim()]).toEqual([0, "no commands"]);
    expect(typo.stderr).toContain("rvbox ls: no client host-b has registered with this server; did you mean host-a?");
    const none = await cli(["ls", "--client", "host-a", "--state", "expired"], { env });
    expect([none.stdout.trim(), none.stderr]).toEqual(["no commands", ""]);
    // By labels (-l) and creation time (--since/--until: an instant or a duration ago).
    await s.client.setClientLabels({ clientId: "host-a", set: { tier: "front" } });
    expect((await cli(["ls", "-l", "tier=front"], { env })).stdout).toContain(id);
    expect((await cli(["ls", "-l", "tier=back"], { env })).stdout.trim()).toBe("no commands");
    expect((await cli(["ls", "--since", "1h"], { env })).stdout).toContain(id);
    expect((await cli(["ls", "--until", "2000-01-01T00:00:00Z"], { env })).stdout.trim()).toBe("no commands");
    const bad = await cli(["ls", "--since", "2026-13-45T99:00:00Z"], { env });
    expect([bad.code, bad.stderr]).toEqual([2, expect.stringContaining("--since: not a time")]);
    await s.client.setClientLabels({ clientId: "host-a", remove: ["tier"] });
  });

  it("get says whether stdin was never opened, is open, was closed by an operator, or ended with the command", async () => {
    const stdinLine = async (id: string) => /^stdin\s+(.*)$/m.exec((await cli(["get", id], { env })).stdout)?.[1];
    const plain = (await cli(["run", "host-a", "--", "true"], { env })).stdout.trim();
    expect(await stdinLine(plain)).toBe("not opened (/dev/null)");
    // Reads one line, then waits for EOF with its stdin still held.
    const id = (await cli(["run", "host-a", "--open-stdin", "--shell", "--", "read l; echo got $l; sleep 30 < /dev/null"], { env })).stdout.trim();
    await waitRunning(id);
    expect(await stdinLine(id)).toBe("open (acked through write 0)");
    expect((await cli(["stdin", id, "one"], { env })).code).toBe(0);
    await waitFor("write 1 acked", async () => (await stdinLine(id)) === "open (acked through write 1)");
    expect((await cli(["close-stdin", id], { env })).code).toBe(0);
    await waitFor("close acked", async () => (await stdinLine(id)) === "closed by an operator (acked through write 2)");
    expect((await cli(["cancel", id], { env })).code).toBe(0);
    await waitFor("ended", async () => (await stdinLine(id))?.startsWith("ended with the command") === true);
  });

  it("--follow streams stdout and stderr separately and exits 0 on success", async () => {
    const r = await cli(["run", "host-a", "--follow", "--shell", "--", "echo out; echo err >&2"], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("out\n");
    expect(r.stderr).toContain("err\n");
    expect(r.stderr).toMatch(/rvbox: command [0-9a-f-]{36} submitted to host-a/);
  });

  it("--follow exits with the process's exit code (3)", async () => {
    const r = await cli(["run", "host-a", "-f", "--shell", "--", "echo failing; exit 3"], { env });
    expect(r.code).toBe(3);
    expect(r.stdout).toBe("failing\n");
    expect(r.stderr).not.toContain("exit 3;"); // a plain failure needs no extra line
  });

  it("--follow exits 128+N when the process dies of a signal nobody asked for (SIGKILL: 137)", async () => {
    const r = await cli(["run", "host-a", "-f", "--shell", "--", "kill -KILL $$"], { env });
    expect(r.code).toBe(137);
    expect(r.stderr).toMatch(/failed \(SIGKILL\).*exit 137/);
  });

  it("--follow exits 130 when the command is cancelled (rvbox cancel from another CLI)", async () => {
    const following = cli(["run", "host-a", "-f", "--id", "cancel-me-1", "--", "sleep", "30"], { env });
    await waitRunning("cancel-me-1");
    const c = await cli(["cancel", "cancel-me-1"], { env });
    expect(c.code).toBe(0);
    expect(c.stdout).toMatch(/cancel requested for cancel-me-1 \(revision 2\)/);
    const r = await following;
    expect(r.code).toBe(130);
    expect(r.stderr).toContain("command cancel-me-1 cancelled");
  });

  it("signal ID TERM ends the command cancelled (a requested signal): run --follow exits 130", async () => {
    const following = cli(["run", "host-a", "-f", "--id", "term-me-1", "--", "sleep", "30"], { env });
    await waitRunning("term-me-1");
    const sig = await cli(["signal", "term-me-1", "TERM"], { env });
    expect(sig.code).toBe(0);
    expect(sig.stdout).toContain("SIGTERM requested for term-me-1 (revision 2)");
    expect((await following).code).toBe(130);
  });

  it("R-S1: -i streams stdin as it arrives: a line reaches the command and its answer comes back before the next line or EOF", async () => {
    const { PassThrough, Writable } = await import("node:stream");
    const { runOperatorCli } = await import("../../shells/operator/cli.js");
    const input = new PassThrough();
    let out = "";
    const errs: string[] = [];
    const run = runOperatorCli(["run", "host-a", "-i", "-f", "--", "cat"], {
      stdin: input,
      stdout: new Writable({
        write(c, _e, cb) {
          out += String(c);
          cb();
        },
      }),
      stderr: new Writable({
        write(c, _e, cb) {
          errs.push(String(c));
          cb();
        },
      }),
      env,
      onInterrupt: () => () => {},
    });
    input.write("a\n");
    // Nothing more is typed until the answer is back: the CLI must not wait for 64 KiB or EOF.
    await waitFor("a echoed", () => out === "a\n", 15_000);
    input.write("b\n");
    await waitFor("b echoed", () => out === "a\nb\n", 15_000);
    input.end();
    expect(await run).toBe(0);
    expect(out).toBe("a\nb\n");
  }, 60_000);

  it("R-S1: stdin that arrives while a write is in flight is batched, in order, and a large input is split into pieces", async () => {
    const big = Buffer.alloc(300 * 1024, "x");
    const parts = [Buffer.from("head\n"), big, Buffer.from("\ntail\n")];
    const r = await cli(["run", "host-a", "-f", "-i", "--", "wc", "-c"], { env, stdin: Readable.from(parts) });
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(String(5 + big.length + 6));
  }, 60_000);

  it("R-S1: -i into a command that reads slower than the CLI writes waits out the server's full stdin queue, then delivers every byte in order", async () => {
    // More than the server's stdin queue (4 MiB) and the agent's window (1 MiB) hold while the command sleeps.
    const big = randomBytes(9 * 1024 * 1024);
    const parts: Buffer[] = [];
    for (let o = 0; o < big.length; o += 65536) parts.push(big.subarray(o, o + 65536));
    const r = await cli(["run", "host-a", "-f", "-i", "--shell", "--", "sleep 2; sha256sum"], {
      env: { ...env, RVBOX_STDIN_STATS: "1" },
      stdin: Readable.from(parts),
    });
    expect(r.stderr).not.toMatch(/stdin of .*(refused|try again)/);
    expect(r.code).toBe(0);
    expect(r.stdout.split(" ")[0]).toBe(createHash("sha256").update(big).digest("hex"));
    // The pump met the full queue and waited (the statistics line RVBOX_STDIN_STATS asks for).
    const stats = JSON.parse(/rvbox: stdin: (\{.*\})/.exec(r.stderr)![1]!) as { backpressured: number; bytes: number };
    expect(stats.bytes).toBe(big.length);
    expect(stats.backpressured).toBeGreaterThan(0);
  }, 90_000);

  it("a command that exits before reading all of its stdin ends the CLI with its exit code, and no stdin error", async () => {
    const big = Buffer.alloc(6 * 1024 * 1024, "y");
    const r = await cli(["run", "host-a", "-f", "-i", "--", "head", "-c", "10"], { env, stdin: Readable.from([big]) });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("yyyyyyyyyy");
    expect(r.stderr, r.stderr).not.toMatch(/rvbox: stdin/);
  }, 90_000);

  it("--stdin pipes the CLI's stdin to the command and closes it at EOF", async () => {
    const r = await cli(["run", "host-a", "-f", "--stdin", "--", "cat"], { env, stdin: Readable.from([Buffer.from("alpha\n"), Buffer.from("beta\n")]) });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("alpha\nbeta\n");
  });

  it("--cwd, --env and --timeout reach the process", async () => {
    const r = await cli(["run", "host-a", "-f", "--cwd", "/", "--env", "GREETING=hej", "--timeout", "20s", "--shell", "--", 'echo "$GREETING from $(pwd)"'], {
      env,
    });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("hej from /\n");
  });

  it("--script uploads and runs a script with its arguments", async () => {
    const f = path.join(dir, "greet.sh");
    writeFileSync(f, '#!/bin/sh\necho "script says $1"\nexit 4\n');
    const r = await cli(["run", "host-a", "-f", "--script", f, "--", "hello"], { env });
    expect(r.stdout).toBe("script says hello\n");
    expect(r.code).toBe(4);
  });

  it("a rejected command (unknown program) exits 125 when never launched, or 127 from the shell", async () => {
    const r = await cli(["run", "host-a", "-f", "--", "/nonexistent/program-xyz"], { env });
    expect([125, 127]).toContain(r.code);
    if (r.code === 125) expect(r.stderr).toContain("rejected");
  });

  it("Ctrl-C while following detaches (exit 130) and leaves the command running", async () => {
    const r = await cli(["run", "host-a", "-f", "--id", "detach-me-1", "--", "sleep", "30"], { env, interruptAfterMs: 1500 });
    expect(r.code).toBe(130);
    expect(r.stderr).toContain("detached; detach-me-1 keeps running");
    const g = await s.client.getCommand({ issueUuid: "detach-me-1" });
    expect([L.QUEUED, L.DISPATCHED, L.ACCEPTED, L.RUNNING]).toContain(g.command!.state);
    await cli(["cancel", "detach-me-1"], { env });
  });

  it("R-S4: with --cancel-on-interrupt, Ctrl-C cancels the command and the CLI exits when it has ended cancelled", async () => {
    const r = await cli(["run", "host-a", "-f", "--cancel-on-interrupt", "--id", "interrupt-cancels-1", "--", "sleep", "30"], { env, interruptAfterMs: 1500 });
    expect(r.code).toBe(130);
    expect(r.stderr).toContain("cancelling interrupt-cancels-1 (Ctrl-C again to detach)");
    expect(r.stderr).not.toContain("detached");
    expect((await s.client.getCommand({ issueUuid: "interrupt-cancels-1" })).command!.state).toBe(L.CANCELLED);
  });

  it("with --cancel-on-interrupt, SIGTERM (a CI runner stopping the job) cancels the command and the CLI follows it to its end", async () => {
    const r = await cli(["run", "host-a", "-f", "--cancel-on-interrupt", "--id", "term-cancels-1", "--", "sleep", "30"], {
      env,
      terminate: { signal: "SIGTERM", ms: 1500 },
    });
    expect(r.code).toBe(130);
    expect(r.stderr).toContain("SIGTERM: cancelling term-cancels-1 (SIGTERM again to detach)");
    expect(r.stderr).toContain("command term-cancels-1 cancelled");
    expect((await s.client.getCommand({ issueUuid: "term-cancels-1" })).command!.state).toBe(L.CANCELLED);
  });

  it("with --cancel-on-interrupt, a second SIGTERM detaches before a slow cancel has ended the command; it still ends cancelled", async () => {
    // The process ignores SIGTERM, so the agent's cancel takes its kill grace (1 s) to end it.
    const r = await cli(["run", "host-a", "-f", "--cancel-on-interrupt", "--id", "term-twice-1", "--shell", "--", "trap '' TERM; sleep 30"], {
      env,
      terminate: { signal: "SIGTERM", ms: 1500, againMs: 1700 },
    });
    expect(r.code).toBe(130);
    expect(r.stderr).toContain("SIGTERM: cancelling term-twice-1");
    expect(r.stderr).toContain("detached; term-twice-1 keeps running");
    await waitFor("cancelled", async () => (await s.client.getCommand({ issueUuid: "term-twice-1" })).command?.state === L.CANCELLED, 20_000);
  });

  it("with --cancel-on-interrupt, a hang-up (SIGHUP: the terminal closed) cancels the command and exits 129 once the server has the cancel", async () => {
    const r = await cli(["run", "host-a", "-f", "--cancel-on-interrupt", "--id", "hup-cancels-1", "--shell", "--", "trap '' TERM; echo up; sleep 30"], {
      env,
      terminate: { signal: "SIGHUP", ms: 1500 },
    });
    expect(r.code).toBe(129);
    expect(r.stderr).toContain("hang-up: cancelling hup-cancels-1");
    expect(r.stderr).not.toContain("detached");
    // The cancel was accepted before the CLI returned: the command's revision moved.
    expect((await s.client.getCommand({ issueUuid: "hup-cancels-1" })).command!.revision).toBeGreaterThan(1n);
    await waitFor("cancelled", async () => (await s.client.getCommand({ issueUuid: "hup-cancels-1" })).command?.state === L.CANCELLED, 20_000);
  });

  it("without --cancel-on-interrupt the CLI leaves SIGTERM and SIGHUP alone (they end it as any process)", async () => {
    const subscribed = { terminate: false };
    const r = await cli(["run", "host-a", "-f", "--", "true"], { env, subscribed });
    expect(r.code).toBe(0);
    expect(subscribed.terminate).toBe(false);
    const withFlag = { terminate: false };
    expect((await cli(["run", "host-a", "-f", "--cancel-on-interrupt", "--", "true"], { env, subscribed: withFlag })).code).toBe(0);
    expect(withFlag.terminate).toBe(true);
  });

  it("R-C4: a missing program ends rejected (never failed) and the CLI exits 127 as a shell does; argv[0] with spaces gets a --shell hint", async () => {
    const r = await cli(["run", "host-a", "-f", "--", "no-such-program-xyz", "arg"], { env });
    expect(r.code).toBe(127);
    expect(r.stderr).toMatch(/rejected: could not launch: ENOENT/);
    expect(r.stderr).not.toContain("hint");
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    expect((await s.client.getCommand({ issueUuid: id })).command?.state).toBe(L.REJECTED);
    const q = await cli(["run", "host-a", "-f", "--", "echo $HOME"], { env });
    expect(q.code).toBe(127);
    expect(q.stderr).toContain('rvbox: hint: argv[0] "echo $HOME" looks like a shell command line: run it with --shell');
    const g = await cli(["get", id], { env });
    expect(g.stdout).toMatch(/cli exit code\s+127/);
  });

  it("R-C4: a working directory that does not exist ends rejected with 125 (never launched), not a shell's 127 for a missing program", async () => {
    const r = await cli(["run", "host-a", "-f", "--cwd", path.join(dir, "no-such-dir"), "--", "pwd"], { env });
    expect(r.code).toBe(125);
    expect(r.stderr).toMatch(/rejected: could not launch: ENOENT: cwd is not usable/);
    expect(r.stderr).not.toContain("hint");
  });

  it("R-C4: a program that is not executable exits 126", async () => {
    const f = path.join(dir, "not-executable.sh");
    writeFileSync(f, "#!/bin/sh\necho never\n", { mode: 0o644 });
    const r = await cli(["run", "host-a", "-f", "--", f], { env });
    expect(r.code).toBe(126);
    expect(r.stdout).toBe("");
  });

  it("get, ls and --json show when a command started and ended and how long it ran", async () => {
    const t0 = Date.now();
    const r = await cli(["run", "host-a", "-f", "--", "sleep", "0.3"], { env });
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    const js = JSON.parse((await cli(["get", id, "--json"], { env })).stdout) as { startedAt: number; endedAt: number; durationMs: number; createdAt: number };
    expect(js.startedAt).toBeGreaterThanOrEqual(js.createdAt - 1000);
    expect(js.startedAt).toBeGreaterThanOrEqual(t0 - 1000);
    expect(js.endedAt - js.startedAt).toBe(js.durationMs);
    expect(js.durationMs).toBeGreaterThanOrEqual(250);
    expect(js.durationMs).toBeLessThan(30_000);
    const g = (await cli(["get", id], { env })).stdout;
    expect(g).toMatch(new RegExp(`started\\s+${new Date(js.startedAt).toISOString().slice(0, 19)}`));
    expect(g).toMatch(/ended\s+\d{4}-/);
    expect(g).toMatch(/duration\s+\d+(\.\d)?s|duration\s+\d+ms/);
    const ls = (await cli(["ls", "--client", "host-a", "--limit", "50"], { env })).stdout;
    expect(ls.split("\n")[0]).toMatch(/CREATED\s+DURATION\s+PROGRAM/);
    // A running command shows how long it has been running; one that never ran shows "-".
    const run = (await cli(["run", "host-a", "--", "sleep", "5"], { env })).stdout.trim();
    await waitRunning(run);
    await new Promise((res) => setTimeout(res, 1100));
    expect((await cli(["get", run], { env })).stdout).toMatch(/duration\s+\d+(\.\d)?s…/);
    await cli(["cancel", run], { env });
    const missing = await cli(["run", "host-a", "-f", "--", "no-such-program-xyz"], { env });
    const mid = /command ([0-9a-f-]{36})/.exec(missing.stderr)![1]!;
    expect(JSON.parse((await cli(["get", mid, "--json"], { env })).stdout)).toMatchObject({ startedAt: null, durationMs: null });
  });

  it("runs as a real child process with RVBOX_SERVER / RVBOX_TOKEN_FILE and exits with the command's code", async () => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", path.join(ROOT, "shells/operator/main.ts"), "run", "host-a", "--follow", "--shell", "--", "echo child; exit 3"],
      {
        cwd: ROOT,
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((r) => child.on("close", (c) => r(c)));
    expect(out).toBe("child\n");
    expect(code).toBe(3);
  });
});

describe("logs of a large finished command", () => {
  it("R-O5 R-T3: the real CLI (a child process, stdout a pipe) reads it as stored zstd frames, byte-exact: the retained tail after one retention marker; the decompressed form (RVBOX_FOLLOW_ZSTD=0) too", async () => {
    // 3 MiB of numbered lines; retention (256 KiB per command here) removes a prefix.
    const r = await cli(["run", "host-a", "--follow", "--shell", "--", "seq 1 420000 | head -c 3145728"], { env });
    expect(r.code).toBe(0);
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    const full = execFileSync("sh", ["-c", "seq 1 420000 | head -c 3145728"], { maxBuffer: 16 * 1024 * 1024 });
    // stdout a pipe, or (`> file`) a file: Node's synchronous file stream, whose batches go out as one writev each.
    const dir = await tempDir("rvbox-logs-");
    const read = (zstd: "0" | "1", toFile = false) =>
      new Promise<{ code: number | null; out: Buffer; err: string }>((resolve) => {
        const file = path.join(dir, `out-${zstd}`);
        const fd = toFile ? openSync(file, "w") : null;
        const child = spawn(process.execPath, [path.join(ROOT, "bin/rvbox.js"), "logs", id], {
          cwd: ROOT,
          env: { ...process.env, ...env, RVBOX_FOLLOW_ZSTD: zstd },
          stdio: ["ignore", fd ?? "pipe", "pipe"],
        });
        if (fd !== null) closeSync(fd);
        const parts: Buffer[] = [];
        let err = "";
        child.stdout?.on("data", (d: Buffer) => parts.push(d));
        child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
        child.on("close", (code) => {
          const out = fd !== null ? readFileSync(file) : Buffer.concat(parts);
          resolve({ code, out, err });
        });
      });
    // Each read: exactly one retention marker on stderr, then the bytes after it, exactly.
    for (const [zstd, toFile] of [
      ["1", false],
      ["0", false],
      ["1", true],
    ] as const) {
      const got = await read(zstd, toFile);
      expect(got.code, `RVBOX_FOLLOW_ZSTD=${zstd}`).toBe(0);
      const m = /^rvbox: \[… [\d.]+ [KM]iB of stdout removed by server retention: events \d+–\d+; stdout bytes 0–(\d+) …\]\n$/.exec(got.err);
      expect(m, got.err).not.toBeNull();
      const removed = Number(m![1]) + 1;
      expect(got.out.length).toBeGreaterThan(1024 * 1024);
      expect(got.out.equals(full.subarray(removed)), `RVBOX_FOLLOW_ZSTD=${zstd}`).toBe(true);
    }
  }, 120_000);
});

/** The real CLI as a child process whose stdout reader goes away after `lines` lines, as `| head -N` does. */
async function headOf(args: string[], lines: number): Promise<{ code: number | null; signal: string | null; out: string; err: string; ms: number }> {
  const t0 = Date.now();
  const child = spawn(process.execPath, [path.join(ROOT, "bin/rvbox.js"), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  child.stdout.on("data", (d: Buffer) => {
    if (out.split("\n").length > lines) return;
    out += d.toString();
    if (out.split("\n").length > lines) child.stdout.destroy(); // head has what it wants and exits
  });
  const [code, signal] = await new Promise<[number | null, string | null]>((r) => child.on("close", (c, s) => r([c, s])));
  return { code, signal, out: out.split("\n").slice(0, lines).join("\n"), err, ms: Date.now() - t0 };
}

/**
 * The real CLI as a child process with `stdin` or `stdout` opened on a path (`< path`, `> path`),
 * the other one a pipe or nothing; its exit status and stderr.
 */
function cliRedirected(args: string[], redirect: { stdin?: string; stdout?: string }): Promise<{ code: number | null; err: string }> {
  return new Promise((resolve) => {
    const inFd = redirect.stdin !== undefined ? openSync(redirect.stdin, "r") : null;
    const outFd = redirect.stdout !== undefined ? openSync(redirect.stdout, "w") : null;
    const child = spawn(process.execPath, [path.join(ROOT, "bin/rvbox.js"), ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: [inFd ?? "ignore", outFd ?? "pipe", "pipe"],
    });
    for (const fd of [inFd, outFd]) if (fd !== null) closeSync(fd);
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    child.on("close", (code) => resolve({ code, err }));
  });
}

describe("output that cannot be written", () => {
  /** The real CLI with its stdout on /dev/full (every write fails with ENOSPC), as `rvbox ... > file` on a full disk. */
  const toFullDisk = (args: string[]) => cliRedirected(args, { stdout: "/dev/full" });

  it("a full disk under logs, run --follow, ls and get is an error that says so (status 1), never a crash, a retry past unwritten output or status 0", async () => {
    const r = await cli(["run", "host-a", "--follow", "--shell", "--", "seq 1 300000"], { env });
    expect(r.code).toBe(0);
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    for (const args of [["logs", id], ["logs", id, "--tail", "5"], ["run", "host-a", "--follow", "--", "echo", "hi"], ["ls"], ["get", id]]) {
      const got = await toFullDisk(args);
      expect(got.code, `${args.join(" ")}: ${got.err}`).toBe(1);
      expect(got.err, args.join(" ")).toMatch(/^rvbox( \w+)?: cannot write the output: ENOSPC/m);
      expect(got.err, args.join(" ")).not.toMatch(/retrying|reconnected|Node\.js v|^\s+at /m);
    }
  }, 120_000);
});

describe("input that is a directory", () => {
  it("run -i < DIR and stdin ID --file - < DIR are refused before anything is sent (Node would read the directory as empty input)", async () => {
    // The commands' ids (not the whole listing: its queue expiry is a deadline shown as wall time, ±1 ms).
    const ids = async () => (JSON.parse((await cli(["ls", "--json"], { env })).stdout) as Array<{ uuid: string }>).map((c) => c.uuid);
    const before = await ids();
    const viaDir = (args: string[]) => cliRedirected(args, { stdin: ROOT });
    const run = await viaDir(["run", "host-a", "-i", "--follow", "--", "cat"]);
    expect(run.code).toBe(2);
    expect(run.err).toContain("rvbox run: -i: stdin is a directory");
    expect(await ids()).toEqual(before); // nothing was submitted
    const w = await viaDir(["stdin", "00000000-0000-0000-0000-000000000000", "--file", "-"]);
    expect(w.code).toBe(2);
    expect(w.err).toContain("rvbox stdin: --file -: stdin is a directory");
  }, 60_000);
});

describe("short id prefixes", () => {
  it("get, logs, cancel, stdin and close-stdin take a unique prefix of an id; an unknown one exits 66; an ambiguous one lists the matches", async () => {
    const r = await cli(["run", "host-a", "-f", "--", "echo", "prefixed"], { env });
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    // Find the shortest prefix that is unique among the commands the server holds now.
    const all = (await s.client.listCommands({ pageSize: 1000 })).commands.map((c) => c.issueUuid);
    let n = 4;
    while (all.filter((u) => u.startsWith(id.slice(0, n))).length > 1) n++;
    const short = id.slice(0, Math.max(n, 8));
    const g = await cli(["get", short, "--json"], { env });
    expect(g.code).toBe(0);
    expect(JSON.parse(g.stdout).uuid).toBe(id);
    const l = await cli(["logs", short], { env });
    expect(l.stdout).toBe("prefixed\n");
    const o = await cli(["run", "host-a", "--open-stdin", "--", "cat"], { env });
    const catId = o.stdout.trim();
    const catShort = catId.slice(0, 13);
    expect((await cli(["stdin", catShort, "x"], { env })).stdout).toContain(`stdin of ${catId}`);
    expect((await cli(["close-stdin", catShort], { env })).stdout).toContain(`stdin of ${catId} closed`);
    expect((await cli(["cancel", catShort], { env })).code).toBe(0);
    const none = await cli(["get", "ffffffff-ffff"], { env });
    expect(none.code).toBe(66);
    expect(none.stderr).toContain("no command id starts with ffffffff-ffff");
    // Three characters are no prefix (too many ids share them): said so, not "no command".
    const tiny = await cli(["logs", id.slice(0, 3)], { env });
    expect(tiny.code).toBe(2);
    expect(tiny.stderr).toContain(`${id.slice(0, 3)} is too short for a command id prefix: give at least 4 characters`);
    // Two ids that share a prefix: that prefix is ambiguous, and the error lists both.
    const twins = ["abcd0000-0000-4000-8000-000000000001", "abcd0000-0000-4000-8000-000000000002"];
    for (const t of twins) expect((await cli(["run", "host-a", "--id", t, "--", "true"], { env })).code).toBe(0);
    const amb = await cli(["get", "abcd0000"], { env });
    expect(amb.code).toBe(2);
    expect(amb.stderr).toContain("ambiguous id prefix abcd0000: 2 commands match");
    for (const t of twins) expect(amb.stderr).toContain(t);
    expect((await cli(["get", "abcd0000-0000-4000-8000-0000000000"], { env })).code).toBe(2);
  });
});

describe("-o json|wide", () => {
  it("-o json is --json; -o wide lists every column with the program untruncated; anything else is a usage error", async () => {
    const long = `echo ${"x".repeat(80)}`;
    const r = await cli(["run", "host-a", "-f", "--shell", "--", long], { env });
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    expect(JSON.parse((await cli(["get", id, "-o", "json"], { env })).stdout)).toMatchObject({ uuid: id, state: "succeeded" });
    const js = JSON.parse((await cli(["ls", "--client", "host-a", "-o", "json"], { env })).stdout) as Array<{ uuid: string }>;
    expect(js.some((c) => c.uuid === id)).toBe(true);
    const wide = (await cli(["ls", "--client", "host-a", "-o", "wide", "--limit", "200"], { env })).stdout;
    expect(wide.split("\n")[0]).toMatch(/STARTED\s+ENDED\s+DURATION\s+EVENTS\s+PROGRAM\s+REASON/);
    expect(wide).toContain(`sh: ${long}`);
    const narrow = (await cli(["ls", "--client", "host-a", "--limit", "200"], { env })).stdout;
    expect(narrow).not.toContain(`sh: ${long}`);
    expect((await cli(["ls", "-o", "yaml"], { env })).stderr).toContain('-o/--output: expected json or wide, got "yaml"');
  });
});

describe("usage errors", () => {
  it("are one line plus a pointer to --help, not the whole help text", async () => {
    const r = await cli(["logs"], { env });
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("rvbox logs: expected ID\nsee 'rvbox logs --help'\n");
  });
});

describe("rvbox logs --tail, --since, --timestamps", () => {
  it("--tail N prints the last N lines; --tail 0 none; a last line without a newline counts", async () => {
    const r = await cli(["run", "host-a", "-f", "--shell", "--", "seq 1 5000; printf 'no newline'"], { env });
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    expect((await cli(["logs", id, "--tail", "3"], { env })).stdout).toBe("4999\n5000\nno newline");
    expect((await cli(["logs", id, "--tail", "0"], { env })).stdout).toBe("");
    expect((await cli(["logs", id, "--tail", "x"], { env })).code).toBe(2);
  });

  it("--timestamps prefixes each line with its time; --since keeps only newer output", async () => {
    const before = Date.now() - 1000;
    const r = await cli(["run", "host-a", "-f", "--shell", "--", "echo one; echo two >&2; printf 'th'; sleep 0.2; echo ree"], { env });
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    const t = await cli(["logs", id, "--timestamps"], { env });
    const ts = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) /;
    const lines = t.stdout.split("\n").filter(Boolean);
    expect(lines.map((l) => l.replace(ts, ""))).toEqual(["one", "three"]);
    for (const l of lines) expect(Date.parse(ts.exec(l)![1]!)).toBeGreaterThanOrEqual(before);
    expect(t.stderr.replace(ts, "")).toBe("two\n");
    expect((await cli(["logs", id, "--since", "1h"], { env })).stdout).toBe("one\nthree\n");
    expect((await cli(["logs", id, "--since", new Date(Date.now() + 3_600_000).toISOString()], { env })).stdout).toBe("");
    expect((await cli(["logs", id, "--since", "2026-13-45T00:00:00Z"], { env })).code).toBe(2);
  });

  it("--tail with -f prints the stored tail, then live lines, and ends with the command", async () => {
    const r = await cli(["run", "host-a", "--open-stdin", "--shell", "--", "seq 1 100; cat"], { env });
    const id = r.stdout.trim();
    await waitFor("100 stored", async () => (await cli(["logs", id, "--tail", "1"], { env })).stdout === "100\n");
    const follow = cli(["logs", id, "-f", "--tail", "2"], { env });
    await new Promise((res) => setTimeout(res, 500));
    await cli(["stdin", id, "live"], { env });
    await cli(["close-stdin", id], { env });
    expect((await follow).stdout).toBe("99\n100\nlive\n");
  });
});

describe("stdout to a pipe that is behind", () => {
  it("R-O3 R-O8: run --follow exits only once its stdout pipe has taken the last bytes (they were dropped by process.exit, with no marker, when the pipe was full)", async () => {
    // 64 KiB (what a pipe holds) and, once that is in the pipe, 4,000 bytes more. Nothing reads
    // the pipe (a FIFO) until the command has ended and the CLI has had time to exit, so the
    // last write finds the pipe full: under the high-water mark, queued in the CLI's process.
    const payload = randomBytes(65536 + 4000);
    const a = path.join(dir, "late-a.bin");
    const b = path.join(dir, "late-b.bin");
    writeFileSync(a, payload.subarray(0, 65536));
    writeFileSync(b, payload.subarray(65536));
    const fifo = path.join(dir, "late.fifo");
    execFileSync("mkfifo", [fifo]);
    const rd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const wr = openSync(fifo, "w");
    const child = spawn(process.execPath, [path.join(ROOT, "bin/rvbox.js"), "run", "host-a", "--follow", "--shell", "--", `cat ${a}; sleep 0.5; cat ${b}`], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", wr, "pipe"],
    });
    closeSync(wr);
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    let code: number | null = null;
    const exited = new Promise<void>((r) => child.on("exit", (c) => ((code = c), r())));
    try {
      const id = await waitFor("submitted", () => /command ([0-9a-f-]{36})/.exec(err)?.[1], 60_000);
      await waitFor("ended", async () => (await s.client.getCommand({ issueUuid: id })).command?.state === L.SUCCEEDED, 60_000);
      await Promise.race([exited, sleep(1500)]);
      const got: Buffer[] = [];
      const buf = Buffer.alloc(65536);
      for (const end = Date.now() + 30_000; Date.now() < end; ) {
        let n: number;
        try {
          n = readSync(rd, buf, 0, buf.length, null);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== "EAGAIN") throw e;
          await sleep(5);
          continue;
        }
        if (n === 0) break; // EOF: the CLI has exited
        got.push(Buffer.from(buf.subarray(0, n)));
      }
      await exited;
      const all = Buffer.concat(got);
      expect(all.length).toBe(payload.length);
      expect(all.equals(payload)).toBe(true);
      expect(code).toBe(0);
      expect(err).not.toMatch(/rvbox: \[/);
    } finally {
      closeSync(rd);
      child.kill();
    }
  }, 90_000);
});

/** The CLI in-process with a stdout whose every write fails with EPIPE (its reader is gone): status, writes tried, stderr. */
async function cliIntoBrokenPipe(argv: string[]): Promise<{ code: number; writes: number; err: string }> {
  const { Writable } = await import("node:stream");
  const { runOperatorCli } = await import("../../shells/operator/cli.js");
  let writes = 0;
  const broken = new Writable({
    write(_c, _e, cb) {
      writes++;
      cb(Object.assign(new Error("write EPIPE"), { code: "EPIPE" }));
    },
  });
  broken.on("error", () => {});
  const errs: string[] = [];
  const code = await runOperatorCli(argv, {
    stdout: broken,
    stderr: new Writable({
      write(c, _e, cb) {
        errs.push(String(c));
        cb();
      },
    }),
    env,
    onInterrupt: () => () => {},
    onTerminate: () => () => {},
  });
  return { code, writes, err: errs.join("") };
}

describe("rvbox logs | head", () => {
  it("a closed stdout ends `logs` at once and quietly, with SIGPIPE's status, on a long finished output", async () => {
    const r = await cli(["run", "host-a", "-f", "--", "seq", "1", "300000"], { env });
    expect(r.code).toBe(0);
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    const h = await headOf(["logs", id], 3);
    expect(h.out.split("\n")).toHaveLength(3);
    expect(h.code).toBe(141);
    expect(h.err).not.toMatch(/EPIPE|retrying|lost the output stream|MaxListeners/);
  }, 60_000);

  it("a closed stdout ends `logs -f` of a running command at its next write", async () => {
    const r = await cli(["run", "host-a", "--shell", "--", "while true; do echo tick; sleep 0.05; done"], { env });
    const id = r.stdout.trim();
    await waitRunning(id);
    const h = await headOf(["logs", "-f", id], 2);
    expect(h.out).toBe("tick\ntick");
    expect(h.code).toBe(141);
    expect(h.err).not.toMatch(/EPIPE|retrying|lost the output stream|MaxListeners/);
    await cli(["cancel", id], { env });
  }, 60_000);

  it("run -f --cancel-on-interrupt | head cancels the command once its reader is gone (as ssh's does), then exits 141", async () => {
    const h = await headOf(["run", "host-a", "-f", "--cancel-on-interrupt", "--shell", "--", "while true; do echo tick; sleep 0.05; done"], 2);
    expect(h.out).toBe("tick\ntick");
    expect(h.code).toBe(141);
    const id = /command ([0-9a-f-]{36})/.exec(h.err)![1]!;
    expect(h.err).toContain(`the output was closed: cancelling ${id}`);
    // The CLI exits only after the server took the cancel.
    expect((await s.client.getCommand({ issueUuid: id })).command!.revision).toBeGreaterThan(1n);
    await waitFor("cancelled", async () => (await s.client.getCommand({ issueUuid: id })).command?.state === L.CANCELLED, 20_000);
  }, 60_000);

  it("run -f | head without --cancel-on-interrupt leaves the command running", async () => {
    const h = await headOf(["run", "host-a", "-f", "--shell", "--", "while true; do echo tick; sleep 0.05; done"], 2);
    expect(h.code).toBe(141);
    const id = /command ([0-9a-f-]{36})/.exec(h.err)![1]!;
    await sleep(500);
    expect((await s.client.getCommand({ issueUuid: id })).command!.state).toBe(L.RUNNING);
    await cli(["cancel", id], { env });
  }, 60_000);

  it("an in-process run -f --cancel-on-interrupt whose stdout errors with EPIPE cancels the command and returns 141", async () => {
    const r = await cliIntoBrokenPipe(["run", "host-a", "-f", "--cancel-on-interrupt", "--id", "epipe-cancels-1", "--shell", "--", "echo one; sleep 30"]);
    expect(r.code).toBe(141);
    expect(r.err).toContain("the output was closed: cancelling epipe-cancels-1");
    await waitFor("cancelled", async () => (await s.client.getCommand({ issueUuid: "epipe-cancels-1" })).command?.state === L.CANCELLED, 20_000);
  }, 60_000);

  it("an in-process follow whose stdout errors with EPIPE returns 141 without retrying", async () => {
    const r = await cli(["run", "host-a", "-f", "--", "seq", "1", "20000"], { env });
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    const r2 = await cliIntoBrokenPipe(["logs", id]);
    expect(r2.code).toBe(141);
    expect(r2.writes).toBe(1);
    expect(r2.err).toBe("");
  }, 60_000);
});

describe("rvbox logs and stdin", () => {
  it("logs prints stdout to stdout and stderr to stderr; --stream picks one", async () => {
    const r = await cli(["run", "host-a", "-f", "--shell", "--", "echo o1; echo e1 >&2; echo o2"], { env });
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    const l = await cli(["logs", id], { env });
    expect(l.code).toBe(0);
    expect(l.stdout).toBe("o1\no2\n");
    expect(l.stderr).toBe("e1\n");
    // The one stream asked for goes to stdout, so it can be piped (`--stream stderr | grep`).
    const only = await cli(["logs", id, "--stream", "stderr"], { env });
    expect(only.stdout).toBe("e1\n");
    expect(only.stderr).toBe("");
    const out = await cli(["logs", id, "--stream", "stdout"], { env });
    expect([out.stdout, out.stderr]).toEqual(["o1\no2\n", ""]);
    const ev = await cli(["logs", id, "--events"], { env });
    expect(ev.stderr).toMatch(/── running · event \d+, revision 1 ──/);
    expect(ev.stderr).toMatch(/── succeeded \(exit 0\)/);
  });

  it("R-O5: logs prints the server's retention marker on stderr; the stream is never silently shortened", async () => {
    // Incompressible output (retention counts stored zstd bytes): exactly 1,000,000 bytes.
    const r = await cli(["run", "host-a", "-f", "--shell", "--", "head -c 750000 /dev/urandom | base64 -w 0"], { env });
    expect(r.code).toBe(0);
    const id = /command ([0-9a-f-]{36})/.exec(r.stderr)![1]!;
    const l = await cli(["logs", id], { env });
    expect(l.code).toBe(0);
    expect(l.stderr).toMatch(/rvbox: \[… [\d.]+ KiB of stdout removed by server retention: events \d+–\d+; stdout bytes 0–\d+ …\]/);
    expect(l.stdoutBytes.length).toBeLessThan(1_000_000);
    expect(l.stdoutBytes.length).toBeGreaterThan(0);
    // Every byte is printed or accounted for by a marker (or, see below, a gap the CLI noticed), in `logs` and in the live follow alike.
    const removed = (stderr: string): number => [...stderr.matchAll(/stdout bytes (\d+)–(\d+)/g)].reduce((n, m) => n + Number(m[2]) - Number(m[1]) + 1, 0);
    expect(removed(l.stderr) + l.stdoutBytes.length, l.stderr).toBe(1_000_000);
    expect(removed(r.stderr) + r.stdoutBytes.length, r.stderr).toBe(1_000_000);
  });

  // The core keeps ONE cumulative retention marker per command that grows while a follower
  // streams; FollowOutput re-sends it clipped to what the reader has not had (6281177). Before
  // that, the CLI had to print its own "missing ... no marker was sent" gap line.
  it("R-O5: a live follower gets a retention marker for every removed range (no CLI-detected gaps)", async () => {
    for (let i = 0; i < 6; i++) {
      const r = await cli(["run", "host-a", "-f", "--shell", "--", "head -c 750000 /dev/urandom | base64 -w 0"], { env });
      expect(r.code).toBe(0);
      expect(r.stderr).not.toContain("no marker was sent");
    }
  });

  it("R-S2: stdin ID TEXT appends a newline by default; --no-newline sends the bytes exactly; close-stdin ends it", async () => {
    const r = await cli(["run", "host-a", "--open-stdin", "--", "cat"], { env });
    const id = r.stdout.trim();
    const w1 = await cli(["stdin", id, "hello"], { env });
    expect(w1.code).toBe(0);
    expect(w1.stdout).toMatch(/wrote 6 bytes to the stdin of .* \(write 1\)/);
    expect((await cli(["stdin", id, "--no-newline", "wor"], { env })).code).toBe(0);
    const f = path.join(dir, "stdin.txt");
    writeFileSync(f, "ld");
    expect((await cli(["stdin", id, "--file", f], { env })).code).toBe(0);
    const c = await cli(["close-stdin", id], { env });
    expect(c.code).toBe(0);
    expect(c.stdout).toContain(`stdin of ${id} closed`);
    const l = await cli(["logs", id, "-f", "--exit-code"], { env });
    expect(l.stdout).toBe("hello\nworld\n");
    expect(l.code).toBe(0);
  });

  it("stdin on a command whose stdin is closed is refused with exit 65", async () => {
    const r = await cli(["run", "host-a", "--", "true"], { env });
    const w = await cli(["stdin", r.stdout.trim(), "x"], { env });
    expect(w.code).toBe(65);
    expect(w.stderr).toMatch(/refused/);
  });
});

describe("rvbox clients, claims, authorize, incidents", () => {
  it("clients lists the agent as connected (table and --json)", async () => {
    const t = await cli(["clients"], { env });
    expect(t.stdout).toMatch(/CLIENT\s+STATE\s+INSTANCE\s+GEN/);
    expect(t.stdout).toMatch(/host-a\s+connected\s+[0-9a-f]+\s+\d+/);
    const j = JSON.parse((await cli(["clients", "--json"], { env })).stdout) as Array<{ clientId: string; link: string; instanceId: string }>;
    expect(j.find((c) => c.clientId === "host-a")).toMatchObject({ link: "connected", instanceId: agent.state.instanceId });
  });

  it("R-F4 R-F5: a second instance's claim shows in claims; authorize lets that exact instance take over once", async () => {
    const impostor = await startAgent(s.url, "host-b", {});
    await waitFor("host-b", () => impostor.connected);
    const other = await startAgent(s.url, "host-b", {});
    try {
      const claim = await waitFor("claim", async () => {
        const r = await cli(["claims", "--json"], { env });
        return (JSON.parse(r.stdout) as Array<{ clientId: string; instanceId: string }>).find((c) => c.clientId === "host-b");
      });
      expect(claim.instanceId).toBe(other.state.instanceId);
      const t = await cli(["claims"], { env });
      expect(t.stdout).toMatch(new RegExp(`host-b\\s+${other.state.instanceId}\\s+${impostor.state.instanceId}`));
      const a = await cli(["authorize", "host-b", claim.instanceId], { env });
      expect(a.code).toBe(0);
      expect(a.stdout).toMatch(new RegExp(`authorized instance ${claim.instanceId} for client host-b once, until \\d{4}-`));
      await waitFor("authorized instance took over", async () => {
        const j = JSON.parse((await cli(["clients", "--json"], { env })).stdout) as Array<{ clientId: string; instanceId: string }>;
        return j.find((c) => c.clientId === "host-b")?.instanceId === other.state.instanceId;
      });
    } finally {
      await other.close();
      await impostor.close();
    }
  });

  it("R-F5: authorize refuses what is not the exact pending claimant (65) or an unknown client (66); --revoke and dismiss-claim say when there is nothing", async () => {
    const noClaim = await cli(["authorize", "host-a", "0123abcd"], { env });
    expect(noClaim.code).toBe(65);
    expect(noClaim.stderr).toMatch(/client host-a has no pending claim/);
    const unknown = await cli(["authorize", "host-zz", "0123abcd"], { env });
    expect(unknown.code).toBe(66);
    const seen = await cli(["authorize", "host-a", "0123abcd", "--instance-not-yet-seen"], { env });
    expect(seen.code).toBe(0);
    const rv = await cli(["authorize", "--revoke", "host-a"], { env });
    expect(rv.code).toBe(0);
    expect(rv.stdout).toBe("revoked the authorization of instance 0123abcd for client host-a\n");
    expect((await cli(["authorize", "--revoke", "host-a"], { env })).code).toBe(66);
    const d = await cli(["dismiss-claim", "host-a"], { env });
    expect(d.code).toBe(66);
    expect(d.stderr).toMatch(/client host-a has no pending claim/);
  });

  it("R-F4: dismiss-claim forgets a pending claim; authorize of a prefix of the claimant is refused (65)", async () => {
    const other = await startAgent(s.url, "host-a", {});
    try {
      const claim = await waitFor("claim", async () => (await s.client.listClaims({})).claims.find((c) => c.clientId === "host-a"));
      const p = await cli(["authorize", "host-a", claim.instanceId.slice(0, 6)], { env });
      expect(p.code).toBe(65);
      expect(p.stderr).toMatch(/give the full id, not a prefix/);
      await other.close();
      const d = await cli(["dismiss-claim", "host-a"], { env });
      expect(d.code).toBe(0);
      expect(d.stdout).toBe(`dismissed the pending claim of instance ${claim.instanceId} for client host-a\n`);
      expect((await s.client.listClaims({})).claims.find((c) => c.clientId === "host-a")).toBeUndefined();
    } finally {
      await other.close();
    }
  });

  it("incidents says when there are none; ack-incident of an unknown id exits 66", async () => {
    const r = await cli(["incidents"], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/no incidents|ID\s+KIND/);
    expect(JSON.parse((await cli(["incidents", "--json", "--all"], { env })).stdout)).toBeInstanceOf(Array);
    const a = await cli(["ack-incident", "no-such-incident"], { env });
    expect(a.code).toBe(66);
    expect(a.stderr).toContain("no incident no-such-incident");
  });
});

describe("errors: clear messages and exit codes, no stack traces", () => {
  const noTrace = (t: string): void => expect(t).not.toMatch(/\n\s+at [\w.<]+ \(/);

  it("an unknown command id exits 66", async () => {
    for (const argv of [
      ["get", "00000000-0000-0000-0000-000000000000"],
      ["logs", "00000000-0000-0000-0000-000000000000"],
      ["cancel", "nope"],
      ["signal", "nope", "KILL"],
      ["stdin", "nope", "x"],
      ["close-stdin", "nope"],
    ]) {
      const r = await cli(argv, { env });
      expect(r.code, argv.join(" ")).toBe(66);
      expect(r.stderr).toMatch(/no command/);
      noTrace(r.stderr);
    }
  });

  it("a refused token exits 77", async () => {
    const r = await cli(["ls", "--token", badTokenFile, "--server", s.controlUrl], {});
    expect(r.code).toBe(77);
    expect(r.stderr).toContain(`the server at ${s.controlUrl} refused the operator token (HTTP 401)`);
    noTrace(r.stderr);
    const t = await cli(["tui", "--token", badTokenFile, "--server", s.controlUrl]);
    expect(t.code).toBe(77);
  });

  it("an unreachable server exits 69", async () => {
    const r = await cli(["clients", "--server", "http://127.0.0.1:1", "--token", tokenFile]);
    expect(r.code).toBe(69);
    expect(r.stderr).toContain("cannot reach the server at http://127.0.0.1:1 (ECONNREFUSED)");
    noTrace(r.stderr);
  });

  it("the agent endpoint instead of the control API is named as such", async () => {
    const r = await cli(["clients", "--server", s.url.replace("ws://", "http://").replace("/v1/agent", ""), "--token", tokenFile]);
    expect(r.code).toBe(69);
    expect(r.stderr).toContain("does not serve the RVBox control API");
    noTrace(r.stderr);
  });

  it("submitting to a client with an invalid request is refused with exit 65", async () => {
    const r = await cli(["run", "", "--", "true"], { env });
    expect(r.code === 2 || r.code === 65).toBe(true);
  });
});

describe("mistyped clients and waiting commands", () => {
  it("run for a client id the server never saw exits 66 naming the closest known ids; nothing is queued", async () => {
    const before = (await s.client.listCommands({})).commands.length;
    const r = await cli(["run", "host-q", "--", "true"], { env });
    expect(r.code).toBe(66);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/no client host-q has registered with this server; did you mean host-a\b.*--allow-unknown-client/);
    const f = await cli(["run", "nosuch-client", "--follow", "--", "true"], { env });
    expect(f.code).toBe(66);
    expect((await s.client.listCommands({})).commands.length).toBe(before);
  });

  it("a list or a wildcard as the client exits 65 and points to a job (--clients, -l), not to submitting once per client", async () => {
    for (const id of ["host-a,host-b", "host-*"]) {
      const r = await cli(["run", id, "--allow-unknown-client", "--", "true"], { env });
      expect(r.code).toBe(65);
      expect(r.stderr).toMatch(
        /looks like a list or a wildcard \(it names host-a[^)]*\); to run one command on several clients, submit a job: rvbox run --clients host-a\S* -- CMD/,
      );
      expect(r.stderr).toMatch(/rvbox run -l KEY=VALUE -- CMD/);
      expect(r.stderr).not.toMatch(/not supported|once per client/);
    }
  });

  it("run --allow-unknown-client --follow queues it and says on stderr, once, why it waits", async () => {
    const r = await cli(["run", "not-yet-here", "--allow-unknown-client", "--follow", "--", "true"], { env, interruptAfterMs: 5_000 });
    expect(r.code).toBe(130); // detached by the interrupt
    const notes = r.stderr.split("\n").filter((l) => l.startsWith("rvbox: waiting: "));
    expect(notes).toEqual(["rvbox: waiting: client not-yet-here has never registered (or was forgotten); the command waits for an agent under that id"]);
    const id = /command (\S+) submitted/.exec(r.stderr)![1]!;
    await s.client.signalCommand({ issueUuid: id, signal: SignalKind.CANCEL });
  });
});
