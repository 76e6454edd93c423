// `rvbox run -t` in a real terminal: tmux runs an operator's bash, which runs
// the real CLI (bin/rvbox.js) against real daemons; keys are typed with
// send-keys and the screen read with capture-pane. Agents of protocol 1.1
// and 1.0 (an agent, and a server, of the spec's first version) show the
// version gate (R-T4/R-T5).
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROTOCOL_1_0 } from "../../../core/codec/version.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { BIN, cleanupTemp, collect, OPERATOR_TOKEN, startAgent, startServer, type TestServer, tempDir, waitFor } from "./helpers.js";

const hasTmux = (() => {
  try {
    execFileSync("tmux", ["-V"], { stdio: "pipe" });
    return true;
  } catch {
    return false;
  }
})();

const tools = ["tmux", "vim", "top", "pgrep"].filter((t) => {
  try {
    execFileSync("sh", ["-c", `command -v ${t}`], { stdio: "pipe" });
    return false;
  } catch {
    return true;
  }
});

// Not a silent skip: CI installs these (.ci/run); a machine without them says so.
describe.runIf(process.platform === "linux")("the terminal test's tools", () => {
  it("tmux, vim, top and pgrep are installed (.ci/run installs them)", () => {
    expect(tools, "missing").toEqual([]);
  });
});

/** One tmux server of its own (-L), one session running an operator's plain bash. */
class Pane {
  readonly sock = `rvbox-pty-${randomBytes(4).toString("hex")}`;
  constructor(
    cols: number,
    rows: number,
    env: Record<string, string>,
    private readonly cwd: string,
  ) {
    const exports = Object.entries(env).map(([k, v]) => `${k}=${v}`);
    this.tmux("new-session", "-d", "-s", "op", "-x", String(cols), "-y", String(rows), "env", ...exports, "PS1=op$ ", "bash", "--norc", "--noprofile");
    this.tmux("set-option", "-t", "op", "status", "off");
  }
  tmux(...args: string[]): string {
    return execFileSync("tmux", ["-L", this.sock, ...args], { cwd: this.cwd, encoding: "utf8" });
  }
  /** Type `text` (literally), then Enter unless told not to. */
  type(text: string, enter = true): void {
    this.tmux("send-keys", "-t", "op", "-l", text);
    if (enter) this.tmux("send-keys", "-t", "op", "Enter");
  }
  keys(...k: string[]): void {
    this.tmux("send-keys", "-t", "op", ...k);
  }
  screen(): string {
    return this.tmux("capture-pane", "-p", "-N", "-J", "-t", "op");
  }
  async see(re: RegExp, ms = 20_000): Promise<string> {
    return waitFor(`screen to show ${re}`, () => (re.test(this.screen()) ? this.screen() : null), ms, 50).catch((e: Error) => {
      throw new Error(`${e.message}\n--- screen ---\n${this.screen()}`);
    });
  }
  resize(cols: number, rows: number): void {
    this.tmux("resize-window", "-t", "op", "-x", String(cols), "-y", String(rows));
  }
  /** The operator's terminal modes (as `stty -a` in the pane's own bash shows them). */
  async sttyLine(): Promise<string> {
    this.keys("C-l");
    this.type("stty -a | tr '\\n' ' ' | grep -o 'icanon\\|-icanon' | head -1; stty -a | grep -o ' -echo \\| echo ' | head -1");
    return this.see(/^(-?icanon)\s*$/m);
  }
  close(): void {
    try {
      this.tmux("kill-server");
    } catch {
      // already gone
    }
  }
}

describe.runIf(hasTmux && tools.length === 0 && process.platform === "linux")("run -t in a real terminal (tmux)", () => {
  let s: TestServer;
  let old: TestServer;
  const agents: AgentDaemon[] = [];
  let dir: string;
  let env: Record<string, string>;
  const panes: Pane[] = [];
  const rvbox = `node ${BIN}`;

  beforeAll(async () => {
    dir = await tempDir("rvbox-tty-");
    const tokenFile = path.join(dir, "token");
    writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
    s = await startServer();
    old = await startServer({ protocol: PROTOCOL_1_0 }); // a server of the spec's first version
    agents.push(await startAgent(s.url, "web-1", { cwd: dir }));
    agents.push(await startAgent(s.url, "old-1", { protocol: PROTOCOL_1_0 })); // an agent of the spec's first version
    agents.push(await startAgent(old.url, "web-2"));
    for (const a of agents) await waitFor("agents connected", () => a.connected);
    env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: tokenFile, RVBOX_PERSIST: "", TERM: "xterm-256color", HOME: dir };
  });

  afterAll(async () => {
    for (const p of panes) p.close();
    for (const a of agents) await a.close();
    await s?.close();
    await old?.close();
    await cleanupTemp();
  });

  const pane = (cols = 100, rows = 30, e: Record<string, string> = env): Pane => {
    const p = new Pane(cols, rows, e, dir);
    panes.push(p);
    return p;
  };

  it("R-T4: a shell on a terminal: Ctrl-C interrupts sleep, the exit code comes back, the terminal is restored, and the session is a recording", async () => {
    const p = pane();
    await p.see(/op\$ $/m);
    p.type(`${rvbox} run -t web-1 -- bash --norc --noprofile -i; echo "cli=$?"`);
    await p.see(/submitted to web-1 on a 100x30 terminal/);
    p.type("PS1='remote$ '; test -t 0 && echo tty-ok");
    await p.see(/^tty-ok/m);
    p.type("sleep 30");
    await new Promise((r) => setTimeout(r, 500));
    p.keys("C-c"); // a byte (0x03) to the remote terminal: SIGINT for sleep, not for the CLI
    p.type("echo rc=$?");
    await p.see(/^rc=130/m);
    p.type("exit 7");
    await p.see(/^cli=7/m);
    const modes = await p.sttyLine();
    expect(modes).toMatch(/^icanon\s*$/m);
    expect(modes).toMatch(/^ echo $/m);
    // The recording: `rvbox logs` replays what the terminal showed.
    const id = /command (\S+) submitted/.exec(p.screen())?.[1] ?? (await s.client.listCommands({ clientId: "web-1" })).commands[0]!.issueUuid;
    const rec = await collect(s.client, id);
    expect(rec.finished?.state).toBe(L.FAILED);
    expect(rec.finished?.exitCode).toBe(7);
    expect(rec.stdout.toString()).toContain("tty-ok");
    expect(rec.stdout.toString()).toContain("rc=130");
    // The audit log names who opened the terminal, and its size; resizes and keys are counted, never recorded.
    const audit = (await s.client.listAudit({})).entries.filter((e) => e.rpc === "SubmitCommand" && e.summary.includes(`id=${id}`));
    expect(audit).toHaveLength(1);
    expect(audit[0]!.operator).toBe("admin"); // the e2e server's legacy --operator-token identity
    expect(audit[0]!.summary).toContain("tty=100x30");
    // `rvbox get` shows the terminal.
    p.type(`${rvbox} get ${id} | grep terminal`);
    await p.see(/^terminal\s+100x30 xterm-256color \(run -t\)/m);
  }, 60_000);

  it("Ctrl-Z stops the remote foreground job and Ctrl-D ends the remote shell, as bytes through the terminal", async () => {
    const p = pane();
    await p.see(/op\$ $/m);
    p.type(`${rvbox} run -t web-1 -- bash --norc --noprofile -i; echo "cli=$?"`);
    await p.see(/submitted to web-1/);
    p.type("PS1='remote$ '; echo ready");
    await p.see(/^ready/m);
    p.type("sleep 30");
    await new Promise((r) => setTimeout(r, 500));
    p.keys("C-z"); // 0x1a: SIGTSTP for the remote job; this CLI is not stopped
    await p.see(/Stopped\s+sleep 30/);
    p.type("kill %1; wait; echo killed");
    await p.see(/^killed/m);
    p.keys("C-d"); // 0x04 at an empty line: EOF, the remote bash exits 0
    await p.see(/^cli=0/m);
  }, 60_000);

  it("vim opens and saves a file", async () => {
    const p = pane();
    await p.see(/op\$ $/m);
    writeFileSync(path.join(dir, "notes.txt"), "first line\n");
    p.type(`${rvbox} run -it web-1 --cwd ${dir} -- vim -u NONE -N notes.txt; echo "cli=$?"`);
    await p.see(/first line/);
    p.keys("G", "o");
    p.type("written through rvbox", false);
    p.keys("Escape");
    p.type(":wq");
    await p.see(/^cli=0/m);
    expect(readFileSync(path.join(dir, "notes.txt"), "utf8")).toBe("first line\nwritten through rvbox\n");
  }, 60_000);

  it("top redraws at the pane's new size (SIGWINCH reaches the remote terminal)", async () => {
    const p = pane(100, 30);
    await p.see(/op\$ $/m);
    p.type(`${rvbox} run -t web-1 -- top -d 0.3; echo "cli=$?"`);
    const widthOfHeader = (screen: string): number => screen.split("\n").find((l) => /PID\s+USER/.test(l))?.length ?? 0;
    await waitFor("top at 100 columns", () => widthOfHeader(p.screen()) === 100, 20_000, 50);
    p.resize(140, 40);
    await waitFor("top at 140 columns", () => widthOfHeader(p.screen()) === 140, 20_000, 50).catch((e: Error) => {
      throw new Error(`${e.message}\n${p.screen()}`);
    });
    p.keys("q");
    await p.see(/^cli=0/m);
  }, 60_000);

  it("R-T4 R-T5: a 1.0 agent is refused with a clear error, and never runs the command without a terminal", async () => {
    const p = pane();
    await p.see(/op\$ $/m);
    p.type(`${rvbox} run -t old-1 -- touch ${dir}/ran-without-tty; echo "cli=$?"`);
    const screen = await p.see(/cli=\d+/);
    expect(screen).toContain("the agent of old-1 speaks protocol 1.0; a terminal (rvbox run -t) needs 1.1");
    expect(screen).not.toMatch(/cli=0/);
    // Without -t it runs there as ever.
    p.type(`${rvbox} run -f old-1 -- echo plain-ok`);
    await p.see(/^plain-ok/m);
    expect(() => readFileSync(`${dir}/ran-without-tty`)).toThrow();
  }, 60_000);

  it("R-T4 R-T5 R-D4: a terminal queued for a client that then registers at 1.0 ends rejected with the reason; the CLI says so and restores the terminal", async () => {
    const p = pane();
    await p.see(/op\$ $/m);
    p.type(`${rvbox} run -t late-1 --allow-unknown-client -- touch ${dir}/ran-late; echo "cli=$?"`);
    await p.see(/submitted to late-1/);
    agents.push(await startAgent(s.url, "late-1", { protocol: PROTOCOL_1_0 }));
    const screen = await p.see(/cli=\d+/);
    expect(screen).toMatch(/rejected.*INCOMPATIBLE_VERSION: the agent of late-1 speaks protocol 1\.0/);
    expect(screen).not.toMatch(/cli=0/);
    expect(() => readFileSync(`${dir}/ran-late`)).toThrow();
    const modes = await p.sttyLine();
    expect(modes).toMatch(/^icanon\s*$/m);
  }, 60_000);

  it("R-T4 R-T5: behind a 1.0 server, a 1.1 agent negotiates 1.0: -t is rejected with the reason, plain commands run", async () => {
    const p = pane(100, 30, { ...env, RVBOX_SERVER: old.controlUrl });
    await p.see(/op\$ $/m);
    p.type(`${rvbox} run -t web-2 -- touch ${dir}/ran-behind-old; echo "cli=$?"`);
    const screen = await p.see(/cli=\d+/);
    expect(screen).toContain("speaks protocol 1.0");
    expect(screen).not.toMatch(/cli=0/);
    p.type(`${rvbox} run -f web-2 -- echo plain-ok`);
    await p.see(/^plain-ok/m);
    expect(() => readFileSync(`${dir}/ran-behind-old`)).toThrow();
  }, 60_000);

  it("kill -9 of the CLI: the operator's shell restores the terminal; the command keeps running on the agent until cancelled", async () => {
    const p = pane();
    await p.see(/op\$ $/m);
    p.type(`${rvbox} run -t web-1 -- bash --norc --noprofile -i; echo "cli=$?"`);
    await p.see(/submitted to web-1/);
    p.type("PS1='remote$ '; echo in-remote");
    await p.see(/^in-remote/m);
    const id = /command (\S+) submitted/.exec(p.screen())![1]!;
    // Every process of this CLI (with an older system node, bin/rvbox.js re-executes itself under the
    // project's: both go, so nothing of the CLI survives to clean up).
    const pids = execFileSync("pgrep", ["-f", `${BIN} run -t web-1 -- bash`], { encoding: "utf8" })
      .trim()
      .split("\n")
      .map(Number);
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) process.kill(pid, "SIGKILL");
    await p.see(/^cli=137/m);
    const modes = await p.sttyLine();
    expect(modes).toMatch(/^icanon\s*$/m);
    expect(modes).toMatch(/^ echo $/m);
    const c = (await s.client.getCommand({ issueUuid: id })).command!;
    expect(c.state).toBe(L.RUNNING);
    await s.client.signalCommand({ issueUuid: id, signal: 8, requestId: "cancel-after-kill" });
    await waitFor("cancelled", async () => (await s.client.getCommand({ issueUuid: id })).command!.state === L.CANCELLED);
  }, 60_000);
});
