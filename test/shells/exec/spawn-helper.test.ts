/**
 * The spawn helper (shells/exec/spawn-client.ts + spawn-helper.ts): commands
 * started by a small helper process instead of the agent's own, with the
 * runner's contract intact (pipes read to EOF or reported incomplete, R-O8),
 * and a helper that dies with a command launching or running handled as the
 * agent's crash: `interrupted` after the restart (R-C4), leftovers killed.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { ExitInfo, ProcessSpec } from "../../../shells/exec/process-runner.js";
import { SpawnHelper, type HelperHooks } from "../../../shells/exec/spawn-client.js";
import { cleanupTemp, collect, processAlive, sleep, startAgent, startServer, tempDir, waitFor } from "../e2e/helpers.js";

const ROOT = path.resolve(import.meta.dirname, "../../..");

afterAll(async () => {
  await cleanupTemp();
});

interface Run {
  pid?: number;
  out: { stdout: Buffer[]; stderr: Buffer[] };
  events: string[];
  exit: Promise<ExitInfo>;
  lost: Promise<string>;
  spawnError?: string;
}

function run(
  helper: SpawnHelper,
  spec: ProcessSpec,
  extra: Partial<HelperHooks> = {},
  record?: { dir: string; uuid: string },
): Run & { h: ReturnType<SpawnHelper["startProcess"]> } {
  let exitR!: (i: ExitInfo) => void;
  let lostR!: (w: string) => void;
  const r: Run = {
    out: { stdout: [], stderr: [] },
    events: [],
    exit: new Promise((res) => (exitR = res)),
    lost: new Promise((res) => (lostR = res)),
  };
  const h = helper.startProcess(
    spec,
    {
      onSpawn: (pid) => {
        r.pid = pid;
        r.events.push("spawn");
      },
      onSpawnError: (e) => {
        r.spawnError = e.code;
        r.events.push(`spawnError ${e.code}`);
        exitR({ exitCode: null, signal: null, timedOut: false, outputComplete: { stdout: false, stderr: false } });
      },
      onOutput: (s, d) => r.out[s].push(Buffer.from(d)),
      onExit: (i) => {
        r.events.push("exit");
        exitR(i);
      },
      onLost: (w) => {
        r.events.push("lost");
        lostR(w);
      },
      ...extra,
    },
    record,
  );
  return {
    ...r,
    h,
    get pid() {
      return r.pid;
    },
  } as Run & { h: typeof h };
}

const alive = processAlive;
const ppid = (pid: number): number => Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[1]);

describe.runIf(process.platform === "linux")("spawn helper", () => {
  it("a terminal's command (run -t) runs on a terminal the helper holds: one stream, keys and resizes in order, its exit code back", async () => {
    const helper = new SpawnHelper();
    try {
      const t = run(helper, {
        kind: "shell",
        shell: "sh",
        commandLine: "stty size; read x; stty size; echo got=$x; exit 4",
        stdinOpen: true,
        terminal: { rows: 20, cols: 70 },
      });
      await waitFor("spawned", () => t.events.includes("spawn"));
      expect(ppid(t.h.pid!)).toBe(helper.pid);
      await waitFor("first size", () => Buffer.concat(t.out.stdout).toString().includes("20 70"));
      t.h.resize?.(33, 99); // posted before the write below, so applied first
      await t.h.writeStdin(Buffer.from("hi\r"));
      const info = await t.exit;
      expect(info).toMatchObject({ exitCode: 4, signal: null });
      const text = Buffer.concat(t.out.stdout).toString();
      expect(text).toContain("33 99");
      expect(text).toContain("got=hi");
      expect(t.out.stderr).toEqual([]);
    } finally {
      helper.close();
    }
  });

  it("R-O8: output in order and complete to EOF, exit codes, stdin, spawn errors: what process-runner reports, from the helper's child", async () => {
    const helper = new SpawnHelper();
    try {
      const a = run(helper, { kind: "shell", shell: "sh", commandLine: "echo out; echo err >&2; cat; exit 3", stdinOpen: true });
      await waitFor("spawned", () => a.events.includes("spawn"));
      // the command is the helper's child, not this process's
      expect(ppid(a.h.pid!)).toBe(helper.pid);
      await a.h.writeStdin(Buffer.from("from stdin\n"));
      a.h.closeStdin();
      const ai = await a.exit;
      expect(ai).toEqual({ exitCode: 3, signal: null, timedOut: false, outputComplete: { stdout: true, stderr: true } });
      expect(Buffer.concat(a.out.stdout).toString()).toBe("out\nfrom stdin\n");
      expect(Buffer.concat(a.out.stderr).toString()).toBe("err\n");
      await expect(a.h.writeStdin(Buffer.from("late"))).rejects.toMatchObject({ code: "EPIPE" });

      const missing = run(helper, { kind: "argv", argv: ["/no/such/program"], stdinOpen: false });
      await missing.exit;
      expect(missing.events).toEqual(["spawnError ENOENT"]);

      // 16 MiB through the relay: every byte, in order, EOF seen.
      const big = run(helper, { kind: "shell", shell: "sh", commandLine: "seq 1 2000000", stdinOpen: false });
      const bi = await big.exit;
      expect(bi.outputComplete).toEqual({ stdout: true, stderr: true });
      const text = Buffer.concat(big.out.stdout).toString();
      expect(text.length).toBe(Array.from({ length: 2_000_000 }, (_, i) => `${i + 1}\n`).join("").length);
      expect(text.endsWith("1999999\n2000000\n")).toBe(true);

      // A grandchild holding stdout open past the drain deadline: reported incomplete, never invented.
      const held = run(helper, { kind: "shell", shell: "sh", commandLine: "echo before; (sleep 5 &) ; exit 0", stdinOpen: false, drainTimeoutMs: 200 });
      const hi = await held.exit;
      expect(hi.exitCode).toBe(0);
      expect(hi.outputComplete.stdout).toBe(false);
      expect(Buffer.concat(held.out.stdout).toString()).toBe("before\n");

      // Signals go to the process group from this process; terminate() and timeouts run in the helper.
      const s = run(helper, { kind: "argv", argv: ["sleep", "30"], stdinOpen: false });
      await waitFor("sleep spawned", () => s.events.includes("spawn"));
      expect(s.h.signal("SIGTERM")).toBe(true);
      expect((await s.exit).signal).toBe("SIGTERM");
      const t = run(helper, { kind: "argv", argv: ["sleep", "30"], stdinOpen: false, timeoutMs: 100, killGraceMs: 100 });
      expect((await t.exit).timedOut).toBe(true);
      expect(helper.forks).toBe(1);
    } finally {
      helper.close();
    }
  }, 60_000);

  it("R-O8: an agent started from a directory outside the repo (the README's `rvbox agent`, run from the sources) launches commands: the helper's loader does not depend on the cwd", async () => {
    const elsewhere = mkdtempSync(path.join(tmpdir(), "rvbox-cwd-"));
    const before = process.cwd();
    process.chdir(elsewhere);
    const helper = new SpawnHelper();
    try {
      const a = run(helper, { kind: "argv", argv: ["pwd"], stdinOpen: false });
      const ai = await Promise.race([a.exit, a.lost.then((w) => Promise.reject(new Error(`helper lost: ${w}`)))]);
      expect(ai.exitCode).toBe(0);
      expect(Buffer.concat(a.out.stdout).toString().trim()).toBe(realpathSync(elsewhere));
    } finally {
      helper.close();
      process.chdir(before);
      rmSync(elsewhere, { recursive: true, force: true });
    }
  }, 30_000);

  it("an agent that dies while its helper is still loading leaves no helper behind and no crash report on its stderr", async () => {
    // The agent's part, cut down: fork the helper as spawn-client.ts does, then exit at once.
    const agent = [
      'import { fork } from "node:child_process";',
      `const c = fork(${JSON.stringify(path.join(ROOT, "shells/exec/spawn-helper.ts"))}, [], {`,
      `  execArgv: ["--import", ${JSON.stringify(import.meta.resolve("tsx"))}], serialization: "advanced", stdio: ["ignore", "ignore", "inherit", "ipc"] });`,
      "process.stdout.write(String(c.pid));",
      "process.exit(0);",
    ].join("\n");
    const p = spawn(process.execPath, ["--input-type=module", "-e", agent], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (err += d));
    // The helper holds the agent's stderr open: its end means the helper has gone too.
    await new Promise<void>((res) => p.stderr.on("end", () => res()));
    const pid = Number(out);
    expect(pid).toBeGreaterThan(0);
    await waitFor("the orphaned helper to exit", () => !alive(pid), 10_000);
    expect(err).toBe("");
  });

  it("a helper killed mid-launch (its request unanswered) reports onLost once and nothing else; the next spawn forks a new helper", async () => {
    const helper = new SpawnHelper();
    try {
      const warm = run(helper, { kind: "argv", argv: ["true"], stdinOpen: false });
      await warm.exit;
      const first = helper.pid!;
      process.kill(first, "SIGSTOP"); // the request below sits unread
      const mark = path.join(await tempDir("rvbox-helper-"), "ran");
      const r = run(helper, { kind: "shell", shell: "sh", commandLine: `echo ran > ${mark}`, stdinOpen: false });
      await sleep(100);
      process.kill(first, "SIGKILL");
      expect(await r.lost).toMatch(/spawn helper/);
      await sleep(100);
      expect(r.events).toEqual(["lost"]);
      expect(existsSync(mark)).toBe(false);
      const again = run(helper, { kind: "argv", argv: ["echo", "again"], stdinOpen: false });
      await again.exit;
      expect(Buffer.concat(again.out.stdout).toString()).toBe("again\n");
      expect(helper.forks).toBe(2);
      expect(helper.pid).not.toBe(first);
    } finally {
      helper.close();
    }
  }, 30_000);

  it("a helper killed while a command runs reports onLost; the command's group outlives it, found by its identity record", async () => {
    const helper = new SpawnHelper();
    const dir = await tempDir("rvbox-helper-procs-");
    try {
      const r = run(helper, { kind: "argv", argv: ["sleep", "30"], stdinOpen: false }, {}, { dir, uuid: "u-1" });
      await waitFor("spawned", () => r.events.includes("spawn"));
      const rec = JSON.parse(readFileSync(path.join(dir, "u-1"), "utf8")) as { pid: number; startTicks: string };
      expect(rec.pid).toBe(r.h.pid);
      expect(rec.startTicks).not.toBe("");
      process.kill(helper.pid!, "SIGKILL");
      await r.lost;
      expect(r.events).toEqual(["spawn", "lost"]);
      expect(alive(rec.pid)).toBe(true);
      process.kill(-rec.pid, "SIGKILL");
    } finally {
      helper.close();
    }
  }, 30_000);
});

describe.runIf(process.platform === "linux")("agent with a spawn helper that dies", () => {
  async function setup(id: string) {
    const s = await startServer();
    const state = await tempDir(`rvbox-agent-${id}-`);
    const work = await tempDir(`rvbox-work-${id}-`);
    const helper = new SpawnHelper();
    const fatal: unknown[] = [];
    const agent = await startAgent(s.url, id, { stateDir: state, cwd: work, spawnHelper: helper, onFatal: (e) => fatal.push(e) });
    await waitFor("connected", () => agent.connected);
    return { s, state, work, helper, fatal, agent };
  }

  it("R-C4 R-O8: killed while the authorized launch waits in it, the agent stops as crashed; restarted, the command ends interrupted with its output incomplete, and it never ran", async () => {
    const { s, state, work, helper, fatal, agent } = await setup("mid-launch");
    let again: Awaited<ReturnType<typeof startAgent>> | undefined;
    try {
      const warm = await s.client.submitCommand({ clientId: "mid-launch", program: { case: "argv", value: { argv: ["true"] } } });
      expect((await collect(s.client, warm.command!.issueUuid)).finished?.state).toBe(L.SUCCEEDED);
      process.kill(helper.pid!, "SIGSTOP");
      const mark = path.join(work, "ran");
      const c = await s.client.submitCommand({ clientId: "mid-launch", program: { case: "shell", value: { commandLine: `echo ran > ${mark}` } } });
      const uuid = c.command!.issueUuid;
      await waitFor("spawn requested (launch authorized)", () => agent.stats.spawned === 2);
      process.kill(helper.pid!, "SIGKILL");
      await waitFor("agent fatal", () => fatal.length > 0);
      expect(String(fatal[0])).toMatch(/spawn helper .* its outcome is unknown/);
      await agent.close();
      again = await startAgent(s.url, "mid-launch", { stateDir: state, cwd: work, onFatal: (e) => fatal.push(e) });
      const got = await collect(s.client, uuid);
      expect(got.finished?.state).toBe(L.INTERRUPTED);
      expect(got.items.some((i) => i.kind === "incomplete")).toBe(true);
      expect(existsSync(mark)).toBe(false);
      expect(fatal).toHaveLength(1);
    } finally {
      await again?.close({ killProcesses: true });
      await agent.close();
      helper.close();
      await s.close();
    }
  }, 60_000);

  it("R-C4: killed while a command runs, the restarted agent ends it interrupted and kills its leftover process group", async () => {
    const { s, state, work, helper, fatal, agent } = await setup("mid-run");
    let again: Awaited<ReturnType<typeof startAgent>> | undefined;
    try {
      const ticks = path.join(work, "ticks");
      const c = await s.client.submitCommand({
        clientId: "mid-run",
        program: { case: "shell", value: { commandLine: `while true; do echo t >> ${ticks}; sleep 0.1; done` } },
      });
      const uuid = c.command!.issueUuid;
      await waitFor("running", async () => (await s.client.getCommand({ issueUuid: uuid })).command!.state === L.RUNNING);
      const pid = (await waitFor("pid", () => [...agent.state.commands.values()].find((x) => x.uuid === uuid && x.pid > 0)))!.pid;
      process.kill(helper.pid!, "SIGKILL");
      await waitFor("agent fatal", () => fatal.length > 0);
      await agent.close();
      expect(alive(pid)).toBe(true); // the loop outlived the helper
      again = await startAgent(s.url, "mid-run", { stateDir: state, cwd: work, onFatal: (e) => fatal.push(e) });
      expect((await collect(s.client, uuid)).finished?.state).toBe(L.INTERRUPTED);
      await waitFor("orphan group killed", () => !alive(pid), 10_000);
      const n = readFileSync(ticks, "utf8").length;
      await sleep(400);
      expect(readFileSync(ticks, "utf8").length).toBe(n);
    } finally {
      await again?.close({ killProcesses: true });
      await agent.close();
      helper.close();
      await s.close();
    }
  }, 60_000);
});
