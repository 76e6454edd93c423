/**
 * A local demo fleet for `rvbox tui --demo` (and `npm start` once it points
 * there): a server and two agents (demo-a, demo-b) on loopback with embedded
 * storage under DIR (wiped first; default a temp directory, removed on stop), a third agent that claims demo-a from
 * another instance (so the claims view has something to authorize), and a
 * trickle of sample commands: quick ones, a ticking loop, a failure, a
 * sleeper to cancel, a `cat` waiting for stdin, and a chatty one whose old
 * output the server's (deliberately small) retention removes, so the output
 * pane shows a retention marker. Daemon logs go to DIR/fleet.log, never to
 * the terminal the TUI draws on.
 */
import { randomBytes } from "node:crypto";
import { appendFileSync, mkdirSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { ShellType } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../../core/dispatch/lifecycle.js";
import { AgentDaemon } from "../agent/agent-daemon.js";
import { createLogger, type LogLevel } from "../runtime/log.js";
import { AgentTokens, OperatorToken } from "../server/auth.js";
import { ServerDaemon } from "../server/server-daemon.js";
import { createControlClient } from "../../client/control-client.js";

export interface DemoFleetOptions {
  dir?: string;
  logLevel?: LogLevel;
  /** Milliseconds between sample submissions (0: submit the first round only). */
  everyMs?: number;
  /** Stop submitting after this many. */
  maxCommands?: number;
  impostor?: boolean;
}

export interface DemoFleet {
  controlUrl: string;
  agentUrl: string;
  token: string;
  tokenFile: string;
  dir: string;
  stop(): Promise<void>;
}

/**
 * The sample commands, submitted round-robin. A sample is never submitted
 * again while its previous instance is still active, so at most one of each
 * runs at a time and the slow ones (the sleeper, the `cat` waiting for
 * stdin) cannot fill an agent: the demo fleet stays usable for hours, with
 * a free slot for whatever the operator submits. Those two also end by
 * themselves (`timeoutMs`) if nobody cancels or answers them.
 */
const SAMPLES: Array<{ client: string; line: string; stdin?: boolean; timeoutMs?: number }> = [
  { client: "demo-a", line: "echo hello from $(hostname); uname -sr" },
  { client: "demo-b", line: "for i in $(seq 1 20); do echo tick $i; sleep 0.5; done" },
  { client: "demo-a", line: "echo about to fail >&2; exit 3" },
  { client: "demo-b", line: "sleep 600", timeoutMs: 10 * 60_000 },
  { client: "demo-a", line: "cat", stdin: true, timeoutMs: 10 * 60_000 },
  // ~3 MiB of incompressible text: more than the demo server retains per command (R-O5 marker).
  { client: "demo-b", line: "for i in 1 2 3 4 5 6 7 8; do head -c 300000 /dev/urandom | base64; sleep 0.3; done; echo chatty done" },
  { client: "demo-a", line: "ls -la / | head -20" },
  { client: "demo-b", line: "df -h . ; free -m 2>/dev/null || true" },
];

export async function startDemoFleet(o: DemoFleetOptions): Promise<DemoFleet> {
  const dir = path.resolve(o.dir ?? path.join(os.tmpdir(), `rvbox-tui-demo-${process.pid}`));
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const logFile = path.join(dir, "fleet.log");
  const sink = (line: string): void => appendFileSync(logFile, `${line}\n`);
  const level = o.logLevel ?? "info";
  const token = randomBytes(16).toString("hex");
  const fleetToken = randomBytes(16).toString("hex");
  const tokenFile = path.join(dir, "operator-token");
  appendFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  const server = await ServerDaemon.start({
    listen: { host: "127.0.0.1", port: 0 },
    control: { host: "127.0.0.1", port: 0 },
    dataDir: path.join(dir, "server"),
    agentTokens: AgentTokens.parse(`* ${fleetToken}\n`),
    operatorToken: new OperatorToken(token),
    // Small on purpose: the chatty sample's early output is removed by retention (R-O5).
    limits: { outputPerCommand: 1024 * 1024, segmentBytes: 128 * 1024 },
    log: createLogger("server", level, sink),
  });
  const agentUrl = `ws://127.0.0.1:${server.agentAddress.port}/v1/agent`;
  const controlUrl = `http://127.0.0.1:${server.controlAddress.port}`;
  const agents: AgentDaemon[] = [];
  for (const id of ["demo-a", "demo-b"]) {
    agents.push(
      await AgentDaemon.start({
        serverUrl: agentUrl,
        clientId: id,
        stateDir: path.join(dir, id),
        token: fleetToken,
        cwd: dir,
        killGraceMs: 2000,
        log: createLogger(`agent ${id}`, level, sink),
      }),
    );
  }
  for (let i = 0; i < 200 && !agents.every((a) => a.connected); i++) await new Promise((r) => setTimeout(r, 25));
  if (o.impostor ?? true) {
    agents.push(
      await AgentDaemon.start({
        serverUrl: agentUrl,
        clientId: "demo-a",
        stateDir: path.join(dir, "demo-a-impostor"),
        token: fleetToken,
        cwd: dir,
        log: createLogger("agent demo-a (impostor)", level, sink),
      }),
    );
  }
  const ctl = createControlClient({ baseUrl: controlUrl, token });
  let n = 0;
  let timer: NodeJS.Timeout | null = null;
  /** The last instance of each sample, by sample index. */
  const last = new Map<number, string>();
  let busy = false;
  const submitOne = async (): Promise<void> => {
    const k = n % SAMPLES.length;
    const s = SAMPLES[k]!;
    n++;
    try {
      const prev = last.get(k);
      if (prev !== undefined) {
        const c = (await ctl.getCommand({ issueUuid: prev })).command;
        if (c && !isTerminal(c.state)) return; // still active: skip this round
      }
      const r = await ctl.submitCommand({
        clientId: s.client,
        program: { case: "shell", value: { shell: ShellType.SH, commandLine: s.line } },
        stdinOpen: s.stdin ?? false,
        timeoutMs: BigInt(s.timeoutMs ?? 0),
      });
      if (r.command) last.set(k, r.command.issueUuid);
    } catch (err) {
      sink(`demo: submit failed: ${String(err)}`);
    }
  };
  for (let i = 0; i < SAMPLES.length; i++) await submitOne();
  const every = o.everyMs ?? 4000;
  const max = o.maxCommands ?? Number.POSITIVE_INFINITY; // history pruning bounds what the server keeps
  if (every > 0) {
    timer = setInterval(() => {
      if (n >= max) {
        if (timer) clearInterval(timer);
        return;
      }
      if (busy) return;
      busy = true;
      void submitOne().finally(() => (busy = false));
    }, every);
  }
  return {
    controlUrl,
    agentUrl,
    token,
    tokenFile,
    dir,
    async stop() {
      if (timer) clearInterval(timer);
      for (const a of agents) await a.close({ killProcesses: true });
      await server.close();
      if (!o.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}
