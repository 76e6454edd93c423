// Operators: they submit commands through the control API, write and close
// stdin, send signals, resubmit (idempotently or conflicting), authorize
// pending identity claims and acknowledge incidents. In the heal phase they
// clean up: close stdin and cancel whatever still runs.
//
// A control request reaches the server only while it is up; a reply that
// never comes (the server crashed first) is retried once, as a CLI would.

import { create } from "@bufbuild/protobuf";
import type { ControlRequest, ControlResult } from "../core/server/server-types.js";
import { isTerminal } from "../core/dispatch/lifecycle.js";
import {
  ArgvProgramSchema,
  ExecutionSpecSchema,
  ScriptDescriptorSchema,
  ShellProgramSchema,
  ShellType,
  SignalKind,
  TerminalSizeSchema,
  TerminalSpecSchema,
  type ExecutionSpec,
} from "../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../core/errors.js";
import { encodeBehaviour, PROGRAM, type Behaviour } from "./behaviour.js";
import { Rng } from "./rng.js";
import type { Action } from "./schedule.js";
import { sha256 } from "./sim-ports.js";
import type { World } from "./world.js";

type SubmitAction = Extract<Action, { k: "submit" }>;
type JobAction = Extract<Action, { k: "job" }>;

/** A job the operator submitted (core/server/jobs.ts). */
export interface SubmittedJob {
  jobId: string;
  request: Extract<ControlRequest, { op: "submit_job" }>;
  /** The server answered ok (the job is durable). */
  acked: boolean;
}

export interface Submitted {
  i: number;
  uuid: string;
  clientId: string;
  request: Extract<ControlRequest, { op: "submit" }>;
  behaviour: Behaviour;
  /** The server answered ok (the command is durably created). */
  acked: boolean;
  stdinOpen: boolean;
  /** Ending signals the operator asked for (sent to the server). */
  endingSignals: number;
}

interface Pending {
  request: ControlRequest;
  retries: number;
  onReply?: (r: ControlResult) => void;
}

const ENDING = new Set<SignalKind>([SignalKind.CANCEL, SignalKind.TERMINATE, SignalKind.KILL, SignalKind.INTERRUPT, SignalKind.HANGUP, SignalKind.QUIT]);

export class Operator {
  readonly submitted = new Map<number, Submitted>();
  readonly byUuid = new Map<string, Submitted>();
  readonly jobs = new Map<string, SubmittedJob>();
  private readonly pending = new Map<string, Pending>();
  private reqSeq = 0;
  stats = { requests: 0, replies: 0, lost: 0, errors: 0 };

  constructor(private readonly w: World) {}

  private send(request: ControlRequest, onReply?: (r: ControlResult) => void, retries = 1): void {
    this.stats.requests++;
    this.pending.set(request.requestId, { request, retries, onReply });
    if (this.w.server.up) this.w.serverInput({ type: "control", request });
    // No answer in 20 s (server down or crashed before durable): retry once.
    this.w.q.after(20_000, () => {
      const p = this.pending.get(request.requestId);
      if (!p) return;
      this.pending.delete(request.requestId);
      this.stats.lost++;
      if (p.retries > 0) this.send({ ...request, requestId: this.nextId() }, onReply, p.retries - 1);
    });
  }

  private nextId(): string {
    return `req-${++this.reqSeq}`;
  }

  onReply(requestId: string, result: ControlResult): void {
    const p = this.pending.get(requestId);
    this.w.oracles.controlReply(p?.request ?? null, result);
    if (!p) return;
    this.pending.delete(requestId);
    this.stats.replies++;
    if (!result.ok) this.stats.errors++;
    p.onReply?.(result);
  }

  serverCrashed(): void {
    // Replies of requests in flight never come; the retry timers handle them.
  }

  get idle(): boolean {
    return this.pending.size === 0;
  }

  apply(a: Action): void {
    switch (a.k) {
      case "submit":
        return this.submit(a);
      case "resubmit": {
        const s = this.submitted.get(a.i);
        if (!s) return;
        if (!a.conflict) {
          this.send({ ...s.request, requestId: this.nextId() }, (r) => r.ok && this.markAcked(s));
          return;
        }
        const b2: Behaviour = { ...s.behaviour, s: (s.behaviour.s + 1) >>> 0, code: (s.behaviour.code + 1) % 3 };
        const req = {
          ...s.request,
          requestId: this.nextId(),
          spec: this.buildSpec({ prog: "argv", b: b2, stdinOpen: s.stdinOpen, timeoutMs: 0 } as SubmitAction).spec,
        };
        this.send(
          req,
          (r) => {
            if (r.ok && !s.acked) {
              // The original never became durable: this request is the command now.
              s.request = req;
              s.behaviour = b2;
              this.markAcked(s);
            }
          },
          0,
        );
        return;
      }
      case "stdin": {
        const s = this.submitted.get(a.i);
        if (!s) return;
        const data = new Rng(a.s).bytes(a.n);
        this.w.oracles.stdinRequested(s.uuid, data, a.nl);
        this.send({ op: "stdin", requestId: this.nextId(), uuid: s.uuid, data, appendNewline: a.nl, ...(a.resize ? { resize: a.resize } : {}) }, undefined, 0);
        return;
      }
      case "close_stdin": {
        const s = this.submitted.get(a.i);
        if (s) this.closeStdin(s);
        return;
      }
      case "signal": {
        const s = this.submitted.get(a.i);
        if (s) this.signal(s, a.sig);
        return;
      }
      case "authorize": {
        const st = this.w.server.state;
        const clientId = `agent-${a.client}`;
        const claim = st?.clients.get(clientId)?.pendingClaim;
        const imp = this.w.hosts.find((h) => h.kind === "impostor" && h.client === a.client && h.up && h.state);
        const instanceId = claim?.instanceId ?? imp?.state?.instanceId;
        if (!instanceId) return;
        this.send({ op: "authorize", requestId: this.nextId(), clientId, instanceId }, undefined, 0);
        return;
      }
      case "ack_incidents":
        return this.ackIncidents();
      case "repair": {
        const h = this.w.hosts.find((x) => x.kind === "agent" && x.client === a.client);
        if (!h) return;
        h.disk.corruption = null;
        if (h.up && h.state?.storeIncident !== null) h.deliver(h.inc, { type: "store_repaired" });
        return;
      }
      case "job":
        return this.job(a);
      case "fault":
        return;
    }
  }

  /**
   * A job over the planned clients the server knows now (all of them while
   * it is down: an unknown one is then refused NOT_FOUND, nothing created).
   */
  private job(a: JobAction): void {
    const known = this.w.server.state?.clients;
    const planned = a.clients.map((c) => `agent-${c}`);
    const named = known ? planned.filter((id) => known.has(id)) : planned;
    const clients = named.length > 0 ? named : planned;
    const spec = this.buildSpec({ prog: a.prog, b: a.b, stdinOpen: false, timeoutMs: 0, pad: 0, i: -1 } as SubmitAction).spec;
    const request: Extract<ControlRequest, { op: "submit_job" }> = {
      op: "submit_job",
      requestId: this.nextId(),
      jobId: a.jobId,
      clients,
      spec,
      ...(a.conc ? { maxConcurrency: a.conc } : {}),
      ...(a.errs ? { maxErrors: a.errs } : {}),
    };
    const sj: SubmittedJob = { jobId: a.jobId, request, acked: false };
    this.jobs.set(a.jobId, sj);
    this.w.oracles.jobSubmitted(sj);
    this.send(request, (r) => {
      if (r.ok) {
        if (!sj.acked) this.w.oracles.jobAcked(sj);
        sj.acked = true;
      } else if (r.error.code !== Code.NOT_FOUND && r.error.code !== Code.CAPACITY)
        this.w.oracles.unexpected("job-refused", `job ${a.jobId} refused: ${r.error.message}`);
    });
  }

  ackIncidents(): void {
    const st = this.w.server.state;
    if (!st) return;
    for (const inc of st.incidents.values()) {
      if (!inc.acknowledged) this.send({ op: "ack_incident", requestId: this.nextId(), incidentId: inc.id }, undefined, 0);
    }
  }

  closeStdin(s: Submitted): void {
    this.send({ op: "close_stdin", requestId: this.nextId(), uuid: s.uuid }, undefined, 0);
  }

  signal(s: Submitted, sig: SignalKind): void {
    if (ENDING.has(sig)) {
      s.endingSignals++;
      this.w.oracles.endingSignal(s.uuid);
    }
    this.send({ op: "signal", requestId: this.nextId(), uuid: s.uuid, signal: sig }, undefined, 0);
  }

  private markAcked(s: Submitted): void {
    if (s.acked) return;
    s.acked = true;
    this.w.oracles.submitAcked(s);
  }

  buildSpec(a: Pick<SubmitAction, "prog" | "b" | "stdinOpen" | "timeoutMs" | "pad" | "i">): { spec: ExecutionSpec; script?: Uint8Array } {
    const json = encodeBehaviour(a.b);
    const common = { stdinOpen: a.stdinOpen, timeoutMs: BigInt(a.timeoutMs), cwd: "", environment: [] };
    switch (a.prog) {
      case "argv":
        return { spec: create(ExecutionSpecSchema, { ...common, program: { case: "argv", value: create(ArgvProgramSchema, { argv: [PROGRAM, json] }) } }) };
      case "bad_argv":
        return { spec: create(ExecutionSpecSchema, { ...common, program: { case: "argv", value: create(ArgvProgramSchema, { argv: [""] }) } }) };
      case "shell":
        return {
          spec: create(ExecutionSpecSchema, {
            ...common,
            program: { case: "shell", value: create(ShellProgramSchema, { shell: ShellType.SH, commandLine: `${PROGRAM} ${json}` }) },
          }),
        };
      case "bad_shell":
        return {
          spec: create(ExecutionSpecSchema, {
            ...common,
            program: { case: "shell", value: create(ShellProgramSchema, { shell: ShellType.POWERSHELL, commandLine: `${PROGRAM} ${json}` }) },
          }),
        };
      case "script": {
        const head = new TextEncoder().encode(`#!${PROGRAM} ${json}\n`);
        const pad = new Rng(a.b.s ^ 0x5c819).bytes(a.pad);
        const script = new Uint8Array(head.length + pad.length);
        script.set(head, 0);
        script.set(pad, head.length);
        const desc = create(ScriptDescriptorSchema, { sizeBytes: BigInt(script.length), sha256: sha256(script), interpreter: "", args: [] });
        return { spec: create(ExecutionSpecSchema, { ...common, program: { case: "script", value: desc } }), script };
      }
    }
  }

  private submit(a: SubmitAction): void {
    const { spec, script } = this.buildSpec(a);
    // `run -t`: a terminal of the planned size (protocol 1.1).
    if (a.tty) spec.terminal = create(TerminalSpecSchema, { size: create(TerminalSizeSchema, a.tty), term: "xterm-256color" });
    // The operator names a wall-clock instant (queue_expiry_time).
    const expiry = a.expiryMs > 0 ? this.w.server.wall() + a.expiryMs : 0;
    const request: Extract<ControlRequest, { op: "submit" }> = {
      op: "submit",
      requestId: this.nextId(),
      uuid: a.uuid,
      clientId: `agent-${a.client}`,
      spec,
      // The schedule submits from the first instant, before agents register.
      allowUnknownClient: true,
      ...(script ? { script } : {}),
      ...(expiry ? { queueExpiry: expiry } : {}),
    };
    const s: Submitted = { i: a.i, uuid: a.uuid, clientId: request.clientId, request, behaviour: a.b, acked: false, stdinOpen: a.stdinOpen, endingSignals: 0 };
    this.submitted.set(a.i, s);
    this.byUuid.set(a.uuid, s);
    this.send(request, (r) => {
      if (r.ok) this.markAcked(s);
      // A resend whose first attempt ran and has since left the server's memory (pruned: its
      // ledger entry answers) is refused as already executed: the request ran, once.
      else if (r.error.code === Code.ALREADY_EXECUTED) this.markAcked(s);
      // A full metadata tier refuses new work with CODE_CAPACITY: a bound, not a bug.
      // A spec every agent would refuse is refused at submit (spec-limits.ts).
      else if (a.prog === "bad_argv" && r.error.code === Code.VALIDATION) return;
      // A terminal for a client connected at protocol 1.0 is refused at submit (R-T4/R-T5).
      else if (a.tty && r.error.code === Code.INCOMPATIBLE_VERSION) return;
      else if (r.error.code !== Code.CONFLICT && r.error.code !== Code.CAPACITY)
        this.w.oracles.unexpected("submit-refused", `submit of ${a.uuid} refused: ${r.error.message}`);
    });
  }

  /**
   * Heal-phase cleanup: a real agent an impostor's authorized takeover
   * displaced is refused (CODE_REPLACED) until an operator authorizes it
   * again, which is what an operator does once the impostor is gone.
   */
  readmitReplaced(): void {
    const st = this.w.server.state;
    if (!st) return;
    for (const h of this.w.hosts) {
      if (h.kind !== "agent" || !h.state) continue;
      const rec = st.clients.get(`agent-${h.client}`);
      const rep = rec?.replaced;
      if (!rec || !rep || !rep.authorized || rep.instanceId !== h.state.instanceId || rec.instanceId === h.state.instanceId) continue;
      if (rec.authorization?.instanceId === rep.instanceId) continue;
      this.send({ op: "authorize", requestId: this.nextId(), clientId: rec.clientId, instanceId: rep.instanceId }, undefined, 0);
    }
  }

  /** Heal-phase cleanup: close stdin of / cancel everything not yet terminal. */
  cleanup(kind: "close_stdin" | "cancel"): void {
    const st = this.w.server.state;
    if (!st) return;
    for (const s of this.submitted.values()) {
      const c = st.commands.get(s.uuid);
      if (!c || isTerminal(c.state)) continue;
      if (kind === "close_stdin" && c.spec.stdinOpen && !c.stdin.closeRequested) this.closeStdin(s);
      if (kind === "cancel") this.signal(s, SignalKind.CANCEL);
    }
    if (kind !== "cancel") return;
    // Jobs' children are commands too: whatever of them still runs is cancelled.
    for (const job of st.jobs.values()) {
      for (const ch of job.children) {
        const c = st.commands.get(ch.uuid);
        if (!c || isTerminal(c.state)) continue;
        this.w.oracles.endingSignal(ch.uuid);
        this.send({ op: "signal", requestId: this.nextId(), uuid: ch.uuid, signal: SignalKind.CANCEL }, undefined, 0);
      }
    }
  }
}
