// npm run bench:tui: what opening a large finished command costs the TUI.
// A real server and agent run in this process on loopback; the TUI runs in
// tmux as its own process (tsx loader, as `npm run tui`), and this script
// reads its memory from /proc.
//
// For each size, `seq 1 N` runs to its end first; then the TUI opens it
// (`--client bench`, Enter on the newest command) and the script measures:
//   time to end   Enter until the pane shows the command's last line and "ended"
//   peak RSS      VmHWM of the TUI process when the end is shown
//   RSS at end    VmRSS then; RSS after Esc: VmRSS 5 s after Esc (back to the list)
//
// --baseline=REF also runs the TUI of git REF (a temporary worktree sharing
// node_modules) against the same server and command, and prints the ratios.
// A baseline run is stopped once its RSS passes --max-rss=MiB (default 6144)
// or --max-secs (default 300): the row then says ">".
//
// Flags: --lines=2000000,12400000 (seq sizes; 2,000,000 lines is 14.9 MB)
//        --size=120x40 (the terminal)  --baseline=REF  --max-rss=MiB  --max-secs=S  --prof=DIR
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { randomBytes, randomUUID } from "node:crypto";
import { ControlService } from "../protos/gen/rvbox/v1/control_pb.js";
import { AgentDaemon } from "../shells/agent/agent-daemon.js";
import { AgentTokens, OperatorToken } from "../shells/server/auth.js";
import { ServerDaemon } from "../shells/server/server-daemon.js";
import { createLogger } from "../shells/runtime/log.js";
import { commandInfo } from "../client/model.js";
import { memKiB, ROOT, TmuxSession } from "../test/tui/tmux.js";

const args = process.argv.slice(2);
const arg = (name: string): string | undefined => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const LINES = (arg("lines") ?? "2000000,12400000").split(",").map(Number);
const [W, H] = (arg("size") ?? "120x40").split("x").map(Number) as [number, number];
const BASELINE = arg("baseline");
const MAX_RSS_KIB = Number(arg("max-rss") ?? 6144) * 1024;
const MAX_MS = Number(arg("max-secs") ?? 300) * 1000;
/** --prof=DIR: a V8 CPU profile of each TUI run there (written when it quits). */
const PROF = arg("prof");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mib = (kib: number): string => `${(kib / 1024).toFixed(0)} MiB`;

interface Run {
  secs: number;
  peakKiB: number;
  endKiB: number;
  escKiB: number;
  stopped: string | null;
}

async function measure(tree: string, label: string, controlUrl: string, tokenFile: string, last: number): Promise<Run> {
  const term = new TmuxSession(`bench-tui-${label}`, W, H);
  try {
    term.start(
      ["tui", "--server", controlUrl, "--token", tokenFile, "--client", "bench"],
      PROF ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${path.resolve(PROF)}` } : {},
      tree,
    );
    await term.waitFor((s) => /seq 1 \d+/.test(s), "the commands view", 60_000);
    const pid = term.programPid();
    if (pid === null) throw new Error("no TUI process in the pane");
    const before = memKiB(pid);
    const lastLine = new RegExp(`^${last}\\s*$`, "m");
    const t0 = performance.now();
    term.keys("Enter");
    let stopped: string | null = null;
    for (;;) {
      const s = term.screen();
      if (lastLine.test(s) && s.includes("ended")) break;
      const m = memKiB(pid);
      const ms = performance.now() - t0;
      if (m.rss > MAX_RSS_KIB) stopped = `stopped at ${mib(m.rss)} RSS after ${(ms / 1000).toFixed(0)} s`;
      else if (ms > MAX_MS) stopped = `stopped after ${(ms / 1000).toFixed(0)} s at ${mib(m.rss)} RSS`;
      if (stopped) break;
      await sleep(100);
    }
    const secs = (performance.now() - t0) / 1000;
    const end = memKiB(pid);
    let escKiB = 0;
    if (!stopped) {
      term.keys("Escape");
      await sleep(5000);
      escKiB = memKiB(pid).rss;
      term.keys("q");
      await term.waitFor((x) => x.includes("[exited"), "the TUI to quit", 30_000).catch(() => undefined);
    }
    console.log(
      `  ${label.padEnd(9)} ${stopped ? `> ${secs.toFixed(1)} s (${stopped})` : `${secs.toFixed(1)} s to the end`} · RSS before ${mib(before.rss)}, peak ${mib(end.peak)}, at end ${mib(end.rss)}${stopped ? "" : `, 5 s after Esc ${mib(escKiB)}`}`,
    );
    return { secs, peakKiB: end.peak, endKiB: end.rss, escKiB, stopped };
  } finally {
    term.kill();
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-bench-tui-"));
  const operator = `operator-${randomBytes(8).toString("hex")}`;
  const fleet = `fleet-${randomBytes(8).toString("hex")}`;
  const tokenFile = path.join(dir, "operator-token");
  writeFileSync(tokenFile, `${operator}\n`, { mode: 0o600 });
  const log = createLogger("bench", "warn");
  const server = await ServerDaemon.start({
    listen: { host: "127.0.0.1", port: 0 },
    control: { host: "127.0.0.1", port: 0 },
    agentTokens: AgentTokens.parse(`* ${fleet}\n`),
    operatorToken: new OperatorToken(operator),
    log,
    dataDir: path.join(dir, "server"),
  });
  const agent = await AgentDaemon.start({
    serverUrl: `ws://127.0.0.1:${server.agentAddress.port}/v1/agent`,
    clientId: "bench",
    stateDir: path.join(dir, "agent"),
    token: fleet,
    log,
  });
  while (!agent.connected) await sleep(50);
  const controlUrl = `http://127.0.0.1:${server.controlAddress.port}`;
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${operator}`);
    return next(req);
  };
  const ctl = createClient(ControlService, createConnectTransport({ baseUrl: controlUrl, httpVersion: "1.1", interceptors: [auth] }));
  let baseTree: string | null = null;
  try {
    if (BASELINE) {
      baseTree = path.join(dir, "baseline");
      execFileSync("git", ["worktree", "add", "--detach", baseTree, BASELINE], { cwd: ROOT, stdio: "ignore" });
      symlinkSync(path.join(ROOT, "node_modules"), path.join(baseTree, "node_modules"));
    }
    const rev = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
    console.log(`bench:tui: TUI in tmux ${W}x${H} · this tree ${rev}${BASELINE ? ` · baseline ${BASELINE}` : ""}`);
    for (const n of LINES) {
      const t0 = performance.now();
      const r = await ctl.submitCommand({
        clientId: "bench",
        program: { case: "argv", value: { argv: ["seq", "1", String(n)] } },
        issueUuid: randomUUID(),
        requestId: randomUUID(),
      });
      const uuid = r.command!.issueUuid;
      let c = commandInfo((await ctl.getCommand({ issueUuid: uuid })).command!);
      while (c.endedAt === null) {
        await sleep(250);
        c = commandInfo((await ctl.getCommand({ issueUuid: uuid })).command!);
      }
      console.log(
        `seq 1 ${n}: ${c.state}, ${c.storedThrough} events, ${mib(c.retainedBytes / 1024)} retained (zstd), ran and stored in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
      );
      const now = await measure(ROOT, "this tree", controlUrl, tokenFile, n);
      if (baseTree) {
        const base = await measure(baseTree, "baseline", controlUrl, tokenFile, n);
        const ratio = (a: number, b: number, more: boolean): string => `${more ? ">" : ""}${(a / b).toFixed(1)}x`;
        console.log(
          `  baseline / this tree: time to end ${ratio(base.secs, now.secs, base.stopped !== null)}, peak RSS ${ratio(base.peakKiB, now.peakKiB, base.stopped !== null)}${base.stopped ? "" : `, RSS after Esc ${ratio(base.escKiB, now.escKiB, false)}`}`,
        );
      }
    }
  } finally {
    await agent.close({ killProcesses: true });
    await server.close();
    if (baseTree) execFileSync("git", ["worktree", "remove", "--force", baseTree], { cwd: ROOT, stdio: "ignore" });
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
