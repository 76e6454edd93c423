/**
 * The agent's side of the spawn helper (spawn-helper.ts): `startProcess` with
 * the same handle and hooks as process-runner.ts, the command started by a
 * small long-lived helper process instead of this one, so that the spawn does
 * not block this thread for a time that grows with this process's RSS.
 *
 * What stays here: signals go to the process group straight from this
 * process (`process.kill(-pgid)`, synchronous as before); everything else
 * (stdin, close, terminate, pause/resume) is a message, and every hook is a
 * message back, in the helper's order.
 *
 * The helper dying is this process losing its children: a command whose
 * spawn was requested and not answered may or may not have started, and a
 * running one's pipes and exit status went with the helper. Each such handle
 * gets `onLost` exactly once and nothing after it; the agent treats that as
 * its own crash (its restart ends those commands `interrupted`, R-C4, with
 * their output incomplete, R-O8, and kills what is left of them). With
 * nothing in flight, a dead helper is simply forked again on the next spawn.
 *
 * One helper serves every agent in a process (`sharedSpawnHelper`); it does
 * not keep the process alive while no command is in flight.
 */
import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import {
  buildChildEnv,
  type ExitInfo,
  type OutputStreamName,
  type ProcessHandle,
  type ProcessHooks,
  type ProcessSpec,
  type ProcessState,
  type SignalName,
  type SpawnFailure,
} from "./process-runner.js";
import type { FromHelper, ToHelper } from "./spawn-protocol.js";

export interface HelperHooks extends ProcessHooks {
  /** The helper died while this command was launching or running: its outcome is unknown. */
  onLost?(reason: string): void;
}

interface Live {
  hooks: HelperHooks;
  state: ProcessState;
  pid: number | undefined;
  stdinWaits: Map<number, { resolve: () => void; reject: (e: Error) => void }>;
}

function epipe(message: string): Error & { code: "EPIPE" } {
  const err = new Error(message) as Error & { code: "EPIPE" };
  err.code = "EPIPE";
  return err;
}

/** The helper's entry: the compiled .js next to this file, or the .ts source through tsx's loader. */
function helperEntry(): { file: string; execArgv: string[] } {
  const self = import.meta.url;
  const ts = self.endsWith(".ts");
  return {
    file: fileURLToPath(new URL(ts ? "./spawn-helper.ts" : "./spawn-helper.js", self)),
    // tsx as an absolute URL: a bare `--import tsx` is resolved from the
    // helper's cwd, the agent's, so an agent started from outside the repo
    // (`cd /srv && rvbox agent ...`) had a helper that died on its first
    // launch, taking the agent down with every command interrupted.
    // A small young generation: the helper allocates little, and its RSS is what its fork() copies.
    execArgv: [...(ts ? ["--import", import.meta.resolve("tsx")] : []), "--max-semi-space-size=1"],
  };
}

/**
 * The helper's own environment: the safe base every command gets anyway
 * (buildChildEnv with no overrides: PATH, HOME, USER, LANG, ...), nothing
 * else of the agent's. A command's parent is the helper, so whatever is here
 * a command can read in /proc/$PPID/environ; the agent's own variables
 * (tokens, secrets set for the agent) must not be. The helper needs none:
 * its Node is started by absolute path with explicit flags (helperEntry).
 */
export function helperEnv(agentEnv: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const env = buildChildEnv(undefined, agentEnv);
  // The test run's marks (test/support/leaks-global.ts), which carry no secret: without them a
  // helper a test leaked is invisible to the leak check and holds the run's output open.
  for (const k of TEST_RUN_MARKS) if (agentEnv[k] !== undefined) env[k] = agentEnv[k];
  return env;
}

/** The variables a test run marks its processes with (test/support/leaks-global.ts, leaks-setup.ts). */
const TEST_RUN_MARKS = ["RVBOX_TEST_RUN", "RVBOX_TEST_FILE"] as const;

export class SpawnHelper {
  private child: ChildProcess | undefined;
  private readonly live = new Map<number, Live>();
  private readonly ids = new WeakMap<ProcessHandle, number>();
  private nextId = 1;
  private stdinN = 1;
  /** Forks of the helper so far (tests and `rvbox` stats). */
  forks = 0;

  /** The helper's pid, once forked (tests kill it). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Fork the helper now if it is not running (it does not keep this process alive while idle). */
  warm(): void {
    this.ensure();
  }

  private ensure(): ChildProcess {
    if (this.child) return this.child;
    const { file, execArgv } = helperEntry();
    const child = fork(file, [], {
      execArgv,
      env: helperEnv(),
      serialization: "advanced",
      stdio: ["ignore", "ignore", "inherit", "ipc"],
    });
    this.forks++;
    this.child = child;
    child.on("message", (m: FromHelper) => this.onMessage(m));
    const gone = (why: string): void => {
      if (this.child !== child) return;
      this.child = undefined;
      const lost = [...this.live.values()];
      this.live.clear();
      for (const l of lost) {
        l.state = "failed";
        for (const w of l.stdinWaits.values()) w.reject(epipe(`spawn helper ${why}`));
        l.hooks.onLost?.(`spawn helper ${why}`);
      }
    };
    child.on("exit", (code, sig) => gone(`exited (${sig ?? `code ${code}`})`));
    child.on("error", (err) => gone(`failed: ${err.message}`));
    child.on("disconnect", () => gone("disconnected"));
    this.refresh();
    return child;
  }

  /** Keep the process alive only while some command is in flight. */
  private refresh(): void {
    const c = this.child;
    if (!c) return;
    if (this.live.size > 0) {
      c.ref();
      c.channel?.ref();
    } else {
      c.unref();
      c.channel?.unref();
    }
  }

  private post(m: ToHelper): void {
    const c = this.child;
    if (!c || !c.connected) return;
    c.send(m, undefined, undefined, () => {
      // a send to a channel that just closed: the 'exit'/'disconnect' handlers report it
    });
  }

  private onMessage(m: FromHelper): void {
    if (m.t === "ready") return;
    const l = this.live.get(m.id);
    if (!l) return;
    switch (m.t) {
      case "spawned":
        l.state = "running";
        l.pid = m.pid;
        l.hooks.onSpawn?.(m.pid);
        break;
      case "spawnError": {
        l.state = "failed";
        this.live.delete(m.id);
        this.refresh();
        const err = new Error(m.message) as SpawnFailure;
        err.code = m.code;
        l.hooks.onSpawnError?.(err);
        break;
      }
      case "out":
        l.hooks.onOutput?.((m.s === 0 ? "stdout" : "stderr") as OutputStreamName, m.data);
        break;
      case "exit":
        l.state = "finished";
        this.live.delete(m.id);
        this.refresh();
        for (const w of l.stdinWaits.values()) w.reject(epipe("stdin is closed"));
        l.hooks.onExit?.(m.info as ExitInfo);
        break;
      case "stdinDone": {
        const w = l.stdinWaits.get(m.n);
        l.stdinWaits.delete(m.n);
        if (m.err === undefined) w?.resolve();
        else w?.reject(epipe(m.err));
        break;
      }
    }
  }

  /**
   * Start one command through the helper: process-runner's contract (one of
   * onSpawnError, or onSpawn + onOutput* + onExit), plus onLost (above).
   * `record` asks the helper to write the identity record before the pid is reported.
   */
  startProcess(spec: ProcessSpec, hooks: HelperHooks = {}, record?: { dir: string; uuid: string }): ProcessHandle {
    const id = this.nextId++;
    const l: Live = { hooks, state: "starting", pid: undefined, stdinWaits: new Map() };
    let stdinClosed = !spec.stdinOpen;
    this.ensure();
    this.live.set(id, l);
    this.refresh();
    // The command's environment is made here, from the agent's, exactly as a spawn in this process would
    // make it; the helper merges it over its own, which holds only base variables it already contains.
    this.post({ t: "spawn", id, spec: { ...spec, env: buildChildEnv(spec.env) }, ...(record ? { record } : {}) });
    const running = (): boolean => l.state === "running";
    const handle: ProcessHandle = {
      get pid() {
        return l.pid;
      },
      get state() {
        return l.state;
      },
      writeStdin: (data: Uint8Array): Promise<void> => {
        if (stdinClosed || (l.state !== "starting" && l.state !== "running")) return Promise.reject(epipe("stdin is closed"));
        const n = this.stdinN++;
        return new Promise<void>((resolve, reject) => {
          l.stdinWaits.set(n, { resolve, reject });
          this.post({ t: "stdin", id, n, data });
        });
      },
      closeStdin: (): void => {
        if (stdinClosed) return;
        stdinClosed = true;
        this.post({ t: "closeStdin", id });
      },
      signal: (sig: SignalName): boolean => {
        if (!running() || l.pid === undefined) return false;
        try {
          process.kill(-l.pid, sig);
          return true;
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === "ESRCH" || code === "EPERM") return false;
          throw err;
        }
      },
      terminate: (): void => {
        if (running()) this.post({ t: "terminate", id });
      },
      pauseOutput: (): void => this.post({ t: "pause", id }),
      resumeOutput: (): void => this.post({ t: "resume", id }),
      // Posted before any later stdin write, so the helper applies it in order with the keystrokes.
      resize: (rows: number, cols: number): void => {
        if (running()) this.post({ t: "resize", id, rows, cols });
      },
    };
    this.ids.set(handle, id);
    return handle;
  }

  /**
   * Forget a command without stopping it: no hooks after this (an agent that
   * closes without killing its processes; the helper keeps reading their pipes
   * until they exit, as the agent's own process did).
   */
  abandon(h: ProcessHandle): void {
    const id = this.ids.get(h);
    if (id === undefined) return;
    this.ids.delete(h);
    this.live.delete(id);
    this.refresh();
  }

  /** Let the helper go (it exits; running commands keep running, as when the agent exits). */
  close(): void {
    const c = this.child;
    if (c?.connected) c.disconnect();
  }
}

let shared: SpawnHelper | undefined;

/** The process-wide helper (created on first use). */
export function sharedSpawnHelper(): SpawnHelper {
  return (shared ??= new SpawnHelper());
}
