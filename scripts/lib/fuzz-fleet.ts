// The live fleet the control fuzzer (scripts/fuzz-control.ts) attacks: a real
// server process on 127.0.0.1 with an operator identities file (an admin, two
// operators scoped to role=web, a viewer) and real agent processes, started
// as `rvbox server|agent` (bin/rvbox.js through tsx, or the compiled
// dist/bin/rvbox.js). It notes every exit it did not ask for (a crash); each
// daemon's stderr goes to <dir>/<name>.log (kept with --keep).
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { createControlClient, type ControlClient } from "../../client/control-client.js";
import { mintToken, operatorLine } from "../../shells/server/operators.js";
import { freePort } from "./tcp-proxy.js";

export const IDENTITIES = {
  admin: { name: "carol", role: "admin", selector: "" },
  operator: { name: "alice", role: "operator", selector: "role=web" },
  operator2: { name: "dave", role: "operator", selector: "role=web" },
  viewer: { name: "bob", role: "viewer", selector: "" },
} as const;
export type Who = keyof typeof IDENTITIES;

export interface AgentSpec {
  id: string;
  labels: Record<string, string>;
}

export interface FleetOptions {
  /** A fresh directory for the run (data, state, token files, logs). */
  dir: string;
  /** bin/rvbox.js or dist/bin/rvbox.js. */
  entry: string;
  agents: AgentSpec[];
  /** The server's audit log bound (limits.auditMax). */
  auditMax: number;
  /** The daemons' --log-level (warn by default). */
  logLevel?: string;
}

interface Daemon {
  name: string;
  proc: ChildProcess;
  log: string;
  stopping: boolean;
  exited: Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** VmRSS of a live process, in KiB (null once it is gone). */
export function rssKiB(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

export class Fleet {
  readonly crashes: string[] = [];
  readonly tokens = {} as Record<Who, string>;
  server!: Daemon;
  readonly agents: Daemon[] = [];
  controlUrl = "";
  private agentUrl = "";

  constructor(readonly o: FleetOptions) {}

  client(who: Who): ControlClient {
    return createControlClient({ baseUrl: this.controlUrl, token: this.tokens[who] });
  }

  private spawnDaemon(name: string, argv: string[]): Daemon {
    const proc = spawn(process.execPath, [this.o.entry, ...argv], { cwd: this.o.dir, stdio: ["ignore", "ignore", "pipe"] });
    const d: Daemon = { name, proc, log: "", stopping: false, exited: Promise.resolve() };
    const file = path.join(this.o.dir, `${name.replace(/\W+/g, "-")}.log`);
    proc.stderr!.on("data", (b: Buffer) => {
      appendFileSync(file, b);
      d.log = (d.log + b.toString()).slice(-8000);
    });
    d.exited = new Promise((r) =>
      proc.on("exit", (code, sig) => {
        if (!d.stopping) this.crashes.push(`${name} exited by itself (code ${code}, signal ${sig}); log tail: ${d.log.slice(-600).replace(/\s+/g, " ")}`);
        r();
      }),
    );
    return d;
  }

  private writeFiles(): string {
    const dir = this.o.dir;
    const lines: string[] = [];
    for (const who of Object.keys(IDENTITIES) as Who[]) {
      const id = IDENTITIES[who];
      this.tokens[who] = mintToken();
      lines.push(operatorLine(id.name, id.role, id.selector, this.tokens[who]));
    }
    const fleet = mintToken();
    writeFileSync(path.join(dir, "operators"), `${lines.join("\n")}\n`, { mode: 0o600 });
    writeFileSync(path.join(dir, "agent-tokens"), `* ${fleet}\n`, { mode: 0o600 });
    writeFileSync(path.join(dir, "agent-token"), `${fleet}\n`, { mode: 0o600 });
    return fleet;
  }

  async start(): Promise<void> {
    const dir = this.o.dir;
    this.writeFiles();
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    this.controlUrl = `http://127.0.0.1:${controlPort}`;
    this.agentUrl = `ws://127.0.0.1:${agentPort}/v1/agent`;
    const cfg = path.join(dir, "server.json");
    const conf = {
      listen: `127.0.0.1:${agentPort}`,
      control: `127.0.0.1:${controlPort}`,
      data: path.join(dir, "server"),
      "agent-tokens": path.join(dir, "agent-tokens"),
      identities: path.join(dir, "operators"),
      "log-level": this.o.logLevel ?? "warn",
      limits: { auditMax: this.o.auditMax },
    };
    writeFileSync(cfg, JSON.stringify(conf));
    this.server = this.spawnDaemon("server", ["server", "--config", cfg]);
    const admin = this.client("admin");
    await this.until("the server answers", async () => (await admin.listClients({}, { timeoutMs: 3000 })) !== undefined);
    for (const a of this.o.agents) {
      const state = path.join(dir, `agent-${a.id}`);
      mkdirSync(state, { recursive: true });
      const argv = ["agent", "--server", this.agentUrl, "--client-id", a.id, "--state", state, "--token", path.join(dir, "agent-token")];
      this.agents.push(this.spawnDaemon(`agent ${a.id}`, [...argv, "--log-level", this.o.logLevel ?? "warn"]));
    }
    await this.until("every agent connected", async () => {
      const cs = (await admin.listClients({}, { timeoutMs: 3000 })).clients;
      return this.o.agents.every((a) => cs.some((c) => c.clientId === a.id && c.connected));
    });
    for (const a of this.o.agents) await admin.setClientLabels({ clientId: a.id, set: a.labels });
  }

  private async until(what: string, fn: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      if (this.crashes.length > 0) throw new Error(`${what}: ${this.crashes.join("; ")}`);
      if (await fn().catch(() => false)) return;
      if (Date.now() > end) throw new Error(`timed out waiting until ${what}; server log: ${this.server.log.slice(-1500)}`);
      await sleep(100);
    }
  }

  serverRss(): number | null {
    return rssKiB(this.server.proc.pid);
  }

  alive(d: Daemon): boolean {
    return d.proc.exitCode === null && d.proc.signalCode === null;
  }

  /** SIGTERM every daemon (agents first), SIGKILL any still running 10 s later. */
  async stop(): Promise<void> {
    const all = [...this.agents, ...(this.server ? [this.server] : [])];
    for (const d of all) {
      d.stopping = true;
      if (this.alive(d)) d.proc.kill("SIGTERM");
    }
    const late = setTimeout(() => {
      for (const d of all) if (this.alive(d)) d.proc.kill("SIGKILL");
    }, 10_000);
    await Promise.all(all.map((d) => d.exited));
    clearTimeout(late);
  }
}
