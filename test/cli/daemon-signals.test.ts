// `rvbox server` and `rvbox agent` and a signal that comes while they are
// still starting (shells/cli/server-cli.ts, agent-cli.ts). A SIGTERM sent
// right after the server's "listening" line once found no listener yet and
// killed it outright (an npm test run, 2026-12-07); SIGHUP's default action is
// to terminate as well. The preload test/support/slow-start.mjs holds start
// for 1.5 s at the daemon's first directory under its data or state dir, so
// the signal lands inside start every time.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BIN, ROOT, serverArgv, writeTokenFiles } from "../shells/e2e/helpers.js";

const tmp = mkdtempSync(path.join(tmpdir(), "rvbox-signals-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const SLOW = path.join(ROOT, "test/support/slow-start.mjs");

function start(argv: string[], slowPath: string) {
  const proc = spawn(process.execPath, ["--import", SLOW, BIN, ...argv], {
    cwd: ROOT,
    env: { ...process.env, RVBOX_TEST_SLOW_PATH: slowPath, NODE_OPTIONS: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const out = { text: "" };
  proc.stdout.on("data", (d: Buffer) => (out.text += d.toString()));
  proc.stderr.on("data", (d: Buffer) => (out.text += d.toString()));
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((r) => proc.on("exit", (code, sig) => r([code, sig])));
  const seen = async (re: RegExp): Promise<void> => {
    const deadline = Date.now() + 60_000;
    while (!re.test(out.text)) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`exited before ${re}: ${out.text.slice(-2000)}`);
      if (Date.now() > deadline) throw new Error(`no ${re} in 60 s: ${out.text.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  return { proc, out, exited, seen };
}

function server(name: string) {
  const dir = mkdtempSync(path.join(tmp, `${name}-`));
  const data = path.join(dir, "data");
  // (the last --log-level counts: info, for the lines these tests wait for)
  const argv = serverArgv({ agentPort: 0, controlPort: 0, data, files: writeTokenFiles(dir, "* agent-secret-token-0123456789\n") }, "--log-level", "info");
  return start(argv, data);
}

describe("a daemon signalled while it starts", () => {
  it("a SIGTERM while the server starts stops it gracefully once it has started (exit 0), instead of killing it", async () => {
    const s = server("term");
    try {
      await s.seen(/slow-start: waiting/);
      s.proc.kill("SIGTERM");
      expect(await s.exited).toEqual([0, null]);
      expect(s.out.text).toMatch(/listening/);
      expect(s.out.text).toMatch(/stopping.*SIGTERM/);
    } finally {
      s.proc.kill("SIGKILL");
    }
  }, 90_000);

  it("a SIGHUP while the server starts does not kill it: the tokens are reloaded once it has started, and it runs on", async () => {
    const s = server("hup");
    try {
      await s.seen(/slow-start: waiting/);
      s.proc.kill("SIGHUP");
      await s.seen(/tokens reloaded/);
      expect(s.out.text.indexOf("tokens reloaded")).toBeGreaterThan(s.out.text.indexOf("listening"));
      expect(s.proc.exitCode).toBeNull();
      s.proc.kill("SIGTERM");
      expect(await s.exited).toEqual([0, null]);
    } finally {
      s.proc.kill("SIGKILL");
    }
  }, 90_000);

  it("a SIGTERM while the agent starts stops it gracefully once it has started (exit 0)", async () => {
    const dir = mkdtempSync(path.join(tmp, "agent-"));
    const token = path.join(dir, "token");
    writeFileSync(token, "agent-secret-token-0123456789\n", { mode: 0o600 });
    const state = path.join(dir, "state");
    // Nothing listens on the server address: the agent starts, then keeps retrying its connection.
    const a = start(
      ["agent", "--server", "ws://127.0.0.1:9/v1/agent", "--client-id", "sig-a", "--state", state, "--token", token, "--log-level", "info"],
      state,
    );
    try {
      await a.seen(/slow-start: waiting/);
      a.proc.kill("SIGTERM");
      expect(await a.exited).toEqual([0, null]);
      expect(a.out.text).toMatch(/stopping.*SIGTERM/);
    } finally {
      a.proc.kill("SIGKILL");
    }
  }, 90_000);
});
