// Simulated processes: the agent's spawn / write_stdin / close_stdin /
// signal / kill_orphan / write_script / discard_script effects land here,
// and the executor answers with process_started, process_output (at most
// 64 KiB each), stdin_written, process_exited, spawn_failed, script_prepared
// and script_failed, each at a seeded time. A process's behaviour comes from
// its command (behaviour.ts); its timing comes from a stream seeded by that
// behaviour, so it is the same wherever it runs.

import type { AgentEffect, AgentInput } from "../core/agent/agent-types.js";
import { CANCEL_GRACE_MS, MAX_CHUNK_BYTES } from "../core/limits.js";
import { SignalKind, type ExecutionSpec } from "../protos/gen/rvbox/v1/common_pb.js";
import { parseBehaviour, PROGRAM, outputBytes, type Behaviour } from "./behaviour.js";
import type { EventQueue, SimEvent } from "./event-queue.js";
import { Rng } from "./rng.js";
import { sha256 } from "./sim-ports.js";
import { bytesEqual } from "../core/bytes.js";

export interface ExecHost {
  readonly name: string;
  readonly lineage: number;
  inc: number;
  up: boolean;
  readonly fs: Map<string, Uint8Array>;
  /** Deliver an input to this host's core if incarnation `inc` is still alive. */
  deliver(inc: number, input: AgentInput): void;
}

export interface ExitInfo {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  /** An ending signal (or cancel) was delivered to the process before it ended. */
  signalled: boolean;
}

export interface ExecObserver {
  spawned(host: ExecHost, uuid: string): void;
  started(host: ExecHost, uuid: string, pid: number): void;
  output(host: ExecHost, uuid: string, stream: "stdout" | "stderr", data: Uint8Array): void;
  exited(host: ExecHost, uuid: string, info: ExitInfo): void;
  /** The process read `data` from its stdin (write `seq`). */
  stdinData(host: ExecHost, uuid: string, seq: number, data: Uint8Array): void;
}

export interface ExecConfig {
  pScriptFail: number;
  /** Processes survive their agent's crash until kill_orphan. */
  orphansSurvive: boolean;
}

interface Proc {
  uuid: string;
  host: ExecHost;
  inc: number;
  b: Behaviour;
  rng: Rng;
  pid: number;
  alive: boolean;
  started: boolean;
  written: { stdout: number; stderr: number };
  stdinClosed: boolean;
  timers: SimEvent[];
  signalled: boolean;
  orphan: boolean;
  /** On a terminal (protocol 1.1): everything it writes is one stream, stdout, as a terminal merges them. */
  tty: boolean;
}

export class Executor {
  private readonly procs = new Map<string, Map<string, Proc>>();
  private pidSeq = 100;
  stats = { spawns: 0, spawnFailed: 0, exits: 0, killedBySignal: 0, orphansKilled: 0, orphansLeaked: 0, scriptsPrepared: 0, scriptsFailed: 0, outputBytes: 0 };

  constructor(
    private readonly q: EventQueue,
    private readonly rng: Rng,
    public config: ExecConfig,
    private readonly obs: ExecObserver,
  ) {}

  private table(host: ExecHost): Map<string, Proc> {
    let t = this.procs.get(host.name);
    if (!t) this.procs.set(host.name, (t = new Map()));
    return t;
  }

  handle(host: ExecHost, e: AgentEffect): void {
    switch (e.type) {
      case "spawn":
        return this.spawn(host, e.uuid, e.spec, e.scriptPath);
      case "write_stdin":
        return this.stdin(host, e.uuid, e.seq, e.data, false);
      case "close_stdin":
        return this.stdin(host, e.uuid, e.seq, new Uint8Array(0), true);
      case "signal":
        return this.signal(host, e.uuid, e.signal);
      case "kill_orphan":
        return this.killOrphan(host, e.uuid, e.pid);
      case "write_script":
        return this.writeScript(host, e.uuid, e.data, e.sha256);
      case "discard_script":
        for (const [path] of host.fs) if (path === e.path) host.fs.delete(path);
        return;
      default:
        return;
    }
  }

  private behaviourOf(host: ExecHost, spec: ExecutionSpec, scriptPath: string): Behaviour | null {
    const p = spec.program;
    if (p.case === "argv") return p.value.argv[0] === PROGRAM && p.value.argv[1] ? parseBehaviour(p.value.argv[1]) : null;
    if (p.case === "shell") return p.value.commandLine.startsWith(`${PROGRAM} `) ? parseBehaviour(p.value.commandLine.slice(PROGRAM.length + 1)) : null;
    if (p.case === "script") {
      const data = host.fs.get(scriptPath);
      if (!data) return null;
      let nl = data.indexOf(10);
      if (nl < 0) nl = data.length;
      const line = new TextDecoder().decode(data.subarray(0, nl));
      return line.startsWith(`#!${PROGRAM} `) ? parseBehaviour(line.slice(PROGRAM.length + 3)) : null;
    }
    return null;
  }

  private spawn(host: ExecHost, uuid: string, spec: ExecutionSpec, scriptPath: string): void {
    this.stats.spawns++;
    this.obs.spawned(host, uuid);
    const inc = host.inc;
    const b = this.behaviourOf(host, spec, scriptPath);
    if (!b || b.nostart) {
      this.stats.spawnFailed++;
      this.q.after(this.rng.range(0, 20), () => host.deliver(inc, { type: "spawn_failed", uuid, reason: b ? "exec format error" : "program not found" }));
      return;
    }
    const p: Proc = {
      uuid,
      host,
      inc,
      b,
      rng: new Rng(b.s ^ 0x51ed270b),
      pid: ++this.pidSeq,
      alive: true,
      started: false,
      written: { stdout: 0, stderr: 0 },
      stdinClosed: !spec.stdinOpen,
      timers: [],
      signalled: false,
      orphan: false,
      tty: spec.terminal !== undefined,
    };
    const old = this.table(host).get(uuid);
    if (old && old.alive) this.obs.exited(host, uuid, { exitCode: null, signal: "DUPLICATE", timedOut: false, signalled: false });
    this.table(host).set(uuid, p);
    this.later(p, b.delay, () => {
      p.started = true;
      this.obs.started(host, uuid, p.pid);
      host.deliver(inc, { type: "process_started", uuid, pid: p.pid });
      const timeout = Number(spec.timeoutMs);
      if (timeout > 0) this.later(p, timeout, () => this.die(p, null, "SIGKILL", true));
      this.writeNext(p);
    });
  }

  private later(p: Proc, delay: number, fn: () => void): void {
    const ev = this.q.after(delay, () => {
      p.timers = p.timers.filter((t) => t !== ev);
      if (p.alive && !p.orphan) fn();
    });
    p.timers.push(ev);
  }

  private writeNext(p: Proc): void {
    const b = p.b;
    const rest = { stdout: b.out - p.written.stdout, stderr: b.err - p.written.stderr };
    if (rest.stdout <= 0 && rest.stderr <= 0) return this.ownOutputDone(p);
    const stream: "stdout" | "stderr" = rest.stdout > 0 && (rest.stderr <= 0 || p.rng.chance(0.7)) ? "stdout" : "stderr";
    const n = Math.min(Math.max(b.chunk, Math.ceil((b.out + b.err) / 1500)), MAX_CHUNK_BYTES, rest[stream]);
    const data = outputBytes(b, stream, p.written[stream], n);
    p.written[stream] += n;
    this.emitOutput(p, stream, data);
    this.later(p, Math.floor(n / b.rate) + p.rng.range(0, 2), () => this.writeNext(p));
  }

  private emitOutput(p: Proc, own: "stdout" | "stderr", data: Uint8Array): void {
    const stream = p.tty ? "stdout" : own;
    for (let o = 0; o < data.length; o += MAX_CHUNK_BYTES) {
      const part = data.subarray(o, Math.min(data.length, o + MAX_CHUNK_BYTES));
      this.stats.outputBytes += part.length;
      this.obs.output(p.host, p.uuid, stream, part);
      p.host.deliver(p.inc, { type: "process_output", uuid: p.uuid, stream, data: part });
    }
  }

  private ownOutputDone(p: Proc): void {
    if (p.b.hang) return;
    if (p.b.echo && !p.stdinClosed) return;
    if (p.b.sig) return this.die(p, null, p.b.sig, false);
    const client = (p.host as { client?: number }).client;
    const own = client !== undefined ? p.b.codeOn?.[`agent-${client}`] : undefined;
    this.die(p, own ?? p.b.code, null, false);
  }

  private die(p: Proc, exitCode: number | null, signal: string | null, timedOut: boolean): void {
    if (!p.alive) return;
    p.alive = false;
    for (const t of p.timers) t.cancelled = true;
    p.timers = [];
    this.stats.exits++;
    if (signal) this.stats.killedBySignal++;
    if (p.orphan) return;
    const info: ExitInfo = { exitCode, signal, timedOut, signalled: p.signalled };
    this.obs.exited(p.host, p.uuid, info);
    const inc = p.inc;
    this.q.after(p.rng.range(0, 5), () =>
      p.host.deliver(inc, { type: "process_exited", uuid: p.uuid, exitCode, signal, timedOut, incompleteStreams: [...(p.b.inc ?? [])] }),
    );
  }

  private stdin(host: ExecHost, uuid: string, seq: number, data: Uint8Array, close: boolean): void {
    const p = this.table(host).get(uuid);
    const inc = host.inc;
    if (!p || !p.alive || p.inc !== inc) {
      this.q.after(1, () => host.deliver(inc, { type: "stdin_written", uuid, seq, failure: "EPIPE: process gone" }));
      return;
    }
    this.later(p, p.rng.range(0, 10), () => {
      if (close) {
        p.stdinClosed = true;
        host.deliver(inc, { type: "stdin_written", uuid, seq });
        if (p.b.echo && p.written.stdout >= p.b.out && p.written.stderr >= p.b.err) this.ownOutputDone(p);
        return;
      }
      if (p.stdinClosed) {
        host.deliver(inc, { type: "stdin_written", uuid, seq, failure: "stdin closed" });
        return;
      }
      this.obs.stdinData(host, uuid, seq, data);
      if (p.b.echo && data.length > 0) this.emitOutput(p, "stdout", data);
      host.deliver(inc, { type: "stdin_written", uuid, seq });
    });
  }

  private signal(host: ExecHost, uuid: string, sig: SignalKind): void {
    const p = this.table(host).get(uuid);
    if (!p || !p.alive || p.inc !== host.inc) return;
    const catchable = (name: string): void => {
      p.signalled = true;
      if (!p.b.ignTerm) this.q.after(p.rng.range(0, 3), () => this.die(p, null, name, false));
    };
    switch (sig) {
      case SignalKind.CANCEL:
        catchable("SIGTERM");
        this.q.after(CANCEL_GRACE_MS, () => {
          if (p.alive && !p.orphan) this.die(p, null, "SIGKILL", false);
        });
        return;
      case SignalKind.TERMINATE:
        return catchable("SIGTERM");
      case SignalKind.INTERRUPT:
        return catchable("SIGINT");
      case SignalKind.HANGUP:
        return catchable("SIGHUP");
      case SignalKind.QUIT:
        return catchable("SIGQUIT");
      case SignalKind.KILL:
        p.signalled = true;
        this.q.after(p.rng.range(0, 3), () => this.die(p, null, "SIGKILL", false));
        return;
      default:
        return; // USR1/USR2: ignored
    }
  }

  private killOrphan(host: ExecHost, uuid: string, pid: number): void {
    const p = this.table(host).get(uuid);
    // pid 0: the agent never learned the pid durably; the shell finds the process by the command's marker.
    if (p && p.orphan && p.alive && (p.pid === pid || pid === 0)) {
      p.alive = false;
      this.stats.orphansKilled++;
    }
  }

  /** Script writes not yet answered, per host incarnation and command (see scriptWriteInFlight). */
  private readonly scriptWrites = new Map<string, number>();

  /** Is a write of `uuid`'s script file under way for this incarnation of the host (answered later by script_prepared or script_failed)? */
  scriptWriteInFlight(host: ExecHost, uuid: string): boolean {
    return (this.scriptWrites.get(`${host.name}#${host.inc}/${uuid}`) ?? 0) > 0;
  }

  private writeScript(host: ExecHost, uuid: string, data: Uint8Array, digest: Uint8Array): void {
    const inc = host.inc;
    const key = `${host.name}#${inc}/${uuid}`;
    this.scriptWrites.set(key, (this.scriptWrites.get(key) ?? 0) + 1);
    this.q.after(this.rng.range(1, 30), () => {
      const left = (this.scriptWrites.get(key) ?? 1) - 1;
      if (left > 0) this.scriptWrites.set(key, left);
      else this.scriptWrites.delete(key);
      if (!bytesEqual(sha256(data), digest)) {
        this.stats.scriptsFailed++;
        host.deliver(inc, { type: "script_failed", uuid, reason: "checksum mismatch while writing" });
        return;
      }
      if (this.rng.chance(this.config.pScriptFail)) {
        this.stats.scriptsFailed++;
        host.deliver(inc, { type: "script_failed", uuid, reason: "ENOSPC while writing the script" });
        return;
      }
      const path = `/var/lib/rvbox/scripts/${uuid}`;
      host.fs.set(path, data);
      this.stats.scriptsPrepared++;
      host.deliver(inc, { type: "script_prepared", uuid, path });
    });
  }

  /** The agent process died: its children die too, or live on as orphans. */
  agentCrashed(host: ExecHost): void {
    for (const p of this.table(host).values()) {
      if (!p.alive) continue;
      for (const t of p.timers) t.cancelled = true;
      p.timers = [];
      if (this.config.orphansSurvive && p.started) p.orphan = true;
      else p.alive = false;
    }
  }

  /** Orphans still alive (after their agent restarted and had its chance to kill them). */
  liveOrphans(host: ExecHost): string[] {
    return [...this.table(host).values()].filter((p) => p.orphan && p.alive).map((p) => p.uuid);
  }

  alive(host: ExecHost, uuid: string): boolean {
    const p = this.table(host).get(uuid);
    return !!p && p.alive && !p.orphan;
  }
}
