/**
 * The spawn helper: a small Node process, forked once by the agent's process
 * (spawn-client.ts), that runs every command with startProcess and relays its
 * hooks over the IPC channel. Why: fork() copies the caller's page tables, so
 * a spawn from the agent itself blocks its one thread for a time that grows
 * with the agent's RSS (docs/PERFORMANCE.md, "Spawning from a helper"); this
 * process stays small, so its spawns do not.
 *
 * It owns the commands' pipes (real pipes: a program that opens /dev/stdout
 * works as before) and relays output in order, with every pipe read to EOF
 * or reported incomplete by startProcess exactly as in the agent (R-O8).
 * Output is read only while the IPC channel's unsent backlog is small, so a
 * busy agent slows its commands' writes instead of growing this process.
 *
 * It exits when the channel closes (the agent exited or let it go); its
 * commands keep running, as they did when the agent itself was their parent
 * and exited: the next agent finds them through the identity records written
 * here before each pid is reported (shells/agent/proc-identity.ts).
 */
import { ProcRegistry } from "../agent/proc-identity.js";
import type { ProcessHandle, ProcessHooks } from "./process-runner.js";
import { startCommand } from "./pty-runner.js";
import type { FromHelper, ToHelper } from "./spawn-protocol.js";

/** Unsent output above which every command's pipes stop being read, and the level at which they resume. */
const BACKLOG_HIGH = 1024 * 1024;
const BACKLOG_LOW = 256 * 1024;

const send = process.send?.bind(process);
if (!send) {
  process.stderr.write("spawn-helper: must be started with an IPC channel\n");
  process.exit(2);
}

interface Entry {
  h: ProcessHandle;
  pausedByAgent: boolean;
}
const procs = new Map<number, Entry>();
const registries = new Map<string, ProcRegistry>();
let backlog = 0;
let backlogged = false;

function apply(e: Entry): void {
  if (e.pausedByAgent || backlogged) e.h.pauseOutput();
  else e.h.resumeOutput();
}

/** A send to a channel that has closed fails here, not as an unhandled 'error': the 'disconnect' handler exits. */
const ignoreClosed = (): void => {};

function post(m: FromHelper, bytes = 0): void {
  if (bytes === 0) {
    send!(m, undefined, undefined, ignoreClosed);
    return;
  }
  backlog += bytes;
  send!(m, undefined, undefined, () => {
    backlog -= bytes;
    if (backlogged && backlog <= BACKLOG_LOW) {
      backlogged = false;
      for (const e of procs.values()) apply(e);
    }
  });
  if (!backlogged && backlog > BACKLOG_HIGH) {
    backlogged = true;
    for (const e of procs.values()) apply(e);
  }
}

function onSpawnRequest(m: Extract<ToHelper, { t: "spawn" }>): void {
  const { id } = m;
  let registry: ProcRegistry | undefined;
  if (m.record) {
    registry = registries.get(m.record.dir);
    if (!registry) registries.set(m.record.dir, (registry = new ProcRegistry(m.record.dir)));
  }
  const hooks: ProcessHooks = {
    onSpawn: (pid) => {
      registry?.record(m.record!.uuid, pid);
      post({ t: "spawned", id, pid });
    },
    onSpawnError: (err) => {
      procs.delete(id);
      post({ t: "spawnError", id, code: err.code, message: err.message });
    },
    onOutput: (stream, chunk) => post({ t: "out", id, s: stream === "stdout" ? 0 : 1, data: chunk }, chunk.length),
    onExit: (info) => {
      procs.delete(id);
      post({ t: "exit", id, info });
    },
  };
  // A terminal's command runs on a pseudo-terminal this process holds (pty-runner.ts).
  const entry: Entry = { pausedByAgent: false, h: startCommand(m.spec, hooks) };
  procs.set(id, entry);
  if (backlogged) apply(entry);
}

process.on("message", (m: ToHelper) => {
  if (m.t === "spawn") return onSpawnRequest(m);
  const e = procs.get(m.id);
  if (!e) {
    if (m.t === "stdin") post({ t: "stdinDone", id: m.id, n: m.n, err: "stdin is closed" });
    return;
  }
  switch (m.t) {
    case "stdin":
      e.h.writeStdin(m.data).then(
        () => post({ t: "stdinDone", id: m.id, n: m.n }),
        (err: unknown) => post({ t: "stdinDone", id: m.id, n: m.n, err: err instanceof Error ? err.message : String(err) }),
      );
      break;
    case "closeStdin":
      e.h.closeStdin();
      break;
    case "terminate":
      e.h.terminate();
      break;
    case "pause":
      e.pausedByAgent = true;
      apply(e);
      break;
    case "resume":
      e.pausedByAgent = false;
      apply(e);
      break;
    case "resize":
      e.h.resize?.(m.rows, m.cols);
      break;
  }
});

// The agent went away: leave the commands running (see above) and go. An
// agent that died while this process was still loading closed the channel
// before the handler was there to hear it.
process.on("disconnect", () => process.exit(0));
if (!process.connected) process.exit(0);
post({ t: "ready", pid: process.pid });
