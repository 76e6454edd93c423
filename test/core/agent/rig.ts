// The hand-stepped agent rig of the agent core tests (test/core/agent/*):
// one agent, persists applied to an in-memory disk and reported durable at
// once unless autoDurable is off, invariants checked after every step, and
// the helpers that build server frames and read what the agent sent. A thin
// layer on the Pair rig's parts (test/support/pair.ts): its disk and its
// checked step.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { expect } from "vitest";
import {
  AgentEnvelopeSchema,
  CommandDispatchSchema,
  ReconcileRequestSchema,
  ReconcileTargetSchema,
  ServerWelcomeSchema,
  type AgentError,
  type CommandAccepted,
} from "../../../protos/gen/rvbox/v1/agent_pb.js";
import {
  type CommandLifecycle as L,
  ExecutionSpecSchema,
  ProtocolVersionSchema,
  type SignalKind,
  type CommandEvent,
  type ExecutionSpec,
} from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultAgentConfig, restoreAgent, type AgentConfig, type AgentEffect, type AgentInput, type AgentState } from "../../../core/index.js";
import type { Code } from "../../../core/errors.js";
import { encodeEnvelope, type Fence, type Payload } from "../../../core/codec/frame-codec.js";
import { MAX_CHUNK_BYTES } from "../../../core/limits.js";
import { lifecycleName } from "../../../core/reader/command-view.js";
import { agentSnapshotOf, decode, Disk, retainedOf, sha, stepAgentChecked, T0, tombstonedOf, type AskTarget } from "../../support/pair.js";
import { toBinary } from "@bufbuild/protobuf";
export { decode, enc, sha, T0 } from "../../support/pair.js";
export type SpecInit = Exclude<MessageInitShape<typeof ExecutionSpecSchema>, ExecutionSpec>;
export const argv = (...a: string[]): SpecInit => ({ program: { case: "argv", value: { argv: a } } });

export function sends(effects: AgentEffect[], kind?: string) {
  return effects
    .filter((e) => e.type === "send")
    .map((e) => ({ env: decode((e as { data: Uint8Array }).data), lane: (e as { lane: string }).lane }))
    .filter((s) => !kind || s.env.payload.case === kind);
}
export const errorsIn = (effects: AgentEffect[]) => sends(effects, "error").map((s) => s.env.payload.value as AgentError);
export const accepts = (effects: AgentEffect[]) => sends(effects, "commandAccepted").map((s) => s.env.payload.value as CommandAccepted);
export const eventsIn = (effects: AgentEffect[], uuid?: string) =>
  sends(effects, "commandEvent")
    .map((s) => s.env.payload.value as CommandEvent)
    .filter((e) => !uuid || e.issueUuid === uuid);
export const lifecycles = (effects: AgentEffect[], uuid?: string) =>
  eventsIn(effects, uuid)
    .filter((e) => e.event.case === "lifecycle")
    .map((e) => e.event.value as { state: L; reason: string; exitCode?: number; signalName: string; error?: { code: Code } });
export const closes = (effects: AgentEffect[]) => effects.filter((e) => e.type === "close");
export const of = <T extends AgentEffect["type"]>(effects: AgentEffect[], type: T) =>
  effects.filter((e) => e.type === type) as Array<Extract<AgentEffect, { type: T }>>;

/** One agent, stepped by hand: persists are applied to a disk and reported durable at once unless autoDurable is off. */
export class AgentRig {
  now = T0;
  st: AgentState;
  cfg: AgentConfig;
  disk = new Disk();
  log: AgentEffect[] = [];
  autoDurable = true;
  private up = false;
  private snapshotSent = false;

  constructor(over: Partial<AgentConfig> = {}, seed = 7) {
    this.cfg = defaultAgentConfig("agent-1", over);
    this.st = restoreAgent(this.cfg, this.disk.tables(), seed);
  }

  step(input: AgentInput): AgentEffect[] {
    const effects = stepAgentChecked(this.st, input, this.now);
    if (input.type === "transport_open") this.up = true;
    if (input.type === "transport_open" || input.type === "transport_closed") this.snapshotSent = false;
    if (input.type === "transport_closed" || effects.some((e) => e.type === "close")) {
      this.up = false;
      this.snapshotSent = false;
    }
    if (effects.some((e) => e.type === "send" && e.kind === "reconcileSnapshot")) this.snapshotSent = true;
    this.log.push(...effects);
    const out = [...effects];
    for (const e of effects) if (e.type === "persist") this.autoDurable ? this.disk.apply(e) : this.disk.pending.push(e);
    const last = of(effects, "persist").at(-1);
    if (this.autoDurable && last) out.push(...this.step({ type: "durable", through: last.id }));
    return out;
  }

  flush(): AgentEffect[] {
    for (const p of this.disk.pending) this.disk.apply(p);
    this.disk.pending = [];
    return this.step({ type: "durable", through: this.st.gate.lastId });
  }

  frame(payload: Payload, fence: Fence | null = this.st.session.fence): AgentEffect[] {
    return this.step({ type: "frame", conn: this.st.session.conn, data: encodeEnvelope(fence, payload) });
  }

  welcome(generation = 1, sessionId = "sess-1", selected: { major: number; minor: number } | null = { major: 1, minor: 0 }): AgentEffect[] {
    return this.frame(
      { case: "serverWelcome", value: create(ServerWelcomeSchema, selected ? { selectedProtocol: create(ProtocolVersionSchema, selected) } : {}) },
      { sessionId, generation },
    );
  }

  /** start (or reconnect) up to registering. */
  register(): void {
    if (this.st.session.phase === "idle") this.step({ type: "start" });
    else if (this.st.session.phase === "backoff") {
      this.now = Math.max(this.now, this.st.session.retryAt);
      this.step({ type: "tick" });
    }
    this.step({ type: "transport_open", conn: this.st.session.conn });
    expect(this.st.session.phase).toBe("registering");
  }

  establish(generation = 1, sessionId = `sess-${generation}`): void {
    this.register();
    this.welcome(generation, sessionId);
    this.reconcile([]);
    expect(this.st.session.phase).toBe("established");
    expect(this.st.reconciled).toBe(true);
  }

  reconcile(targets: Array<MessageInitShape<typeof ReconcileTargetSchema>>): AgentEffect[] {
    return this.frame({ case: "reconcileRequest", value: create(ReconcileRequestSchema, { targets: targets.map((t) => create(ReconcileTargetSchema, t)) }) });
  }

  drop(reason = "cut"): AgentEffect[] {
    return this.step({ type: "transport_closed", conn: this.st.session.conn, reason });
  }

  dispatch(uuid: string, spec: SpecInit | null = argv("true"), o: { rev?: bigint; gen?: bigint; hash?: Uint8Array; expiry?: number } = {}): AgentEffect[] {
    return this.frame(this.dispatchPayload(uuid, spec, o));
  }

  /** The CommandDispatch `dispatch` sends (to `probe` with). */
  dispatchPayload(uuid: string, spec: SpecInit | null = argv("true"), o: { rev?: bigint; gen?: bigint; hash?: Uint8Array; expiry?: number } = {}): Payload {
    return {
      case: "commandDispatch",
      value: create(CommandDispatchSchema, {
        issueUuid: uuid,
        commandRevision: o.rev ?? 1n,
        targetSessionGeneration: o.gen ?? BigInt(this.st.session.fence?.generation ?? 0),
        ...(spec ? { spec: create(ExecutionSpecSchema, spec) } : {}),
        immutableRequestSha256: o.hash ?? sha(uuid),
        ...(o.expiry !== undefined ? { queueExpiryTime: timestampFromMs(o.expiry) } : {}),
      }),
    };
  }

  /** Dispatch and start the process. */
  run(uuid: string, spec: SpecInit = argv("true"), pid = 4242): AgentEffect[] {
    const out = this.dispatch(uuid, spec);
    expect(of(out, "spawn").map((s) => s.uuid)).toEqual([uuid]);
    const started = this.step({ type: "process_started", uuid, pid });
    expect(of(started, "signal")).toEqual([]); // nothing asked it to end
    const sent = of(started, "send").filter((x) => x.kind === "commandEvent");
    expect(sent.map((x) => x.lane)).toEqual(sent.map(() => "data"));
    return [...out, ...started];
  }

  exit(uuid: string, exitCode: number | null, extra: Partial<Extract<AgentInput, { type: "process_exited" }>> = {}): AgentEffect[] {
    return this.step({ type: "process_exited", uuid, exitCode, signal: null, timedOut: false, incompleteStreams: [], ...extra });
  }

  ackAll(uuid: string): AgentEffect[] {
    const cb = this.st.outbox.commands.get(uuid)!;
    return this.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: uuid, throughEventSeq: BigInt(cb.nextSeq - 1) } });
  }

  /** The agent's working record of a command: internal state, for invariant-level checks only (prefer the observations below). */
  cmd(uuid: string) {
    return this.st.commands.get(uuid)!;
  }

  // ------------------------------------------------------------ what the server sees of the agent

  /** Whether the agent's transport is open: opened and neither closed by the agent nor seen closed. */
  linkUp(): boolean {
    return this.up;
  }

  /** Commands the agent spawned a process for, in order. */
  spawned(): string[] {
    return of(this.log, "spawn").map((s) => s.uuid);
  }

  /** Whether the agent has sent its ReconcileSnapshot on the current link (it is reconciled: pinned events flow). */
  reconciled(): boolean {
    return this.up && this.snapshotSent;
  }

  /** What the agent would answer a ReconcileRequest naming `targets` now (pair.ts `agentSnapshotOf`; asking changes nothing). */
  snapshot(targets: ReadonlyArray<AskTarget> = []) {
    return agentSnapshotOf(this.st, targets);
  }

  /** What the agent would answer `payload` with now: the effects of that frame stepped on a copy of its state, its persists made durable (asking changes nothing). */
  probe(payload: Payload): AgentEffect[] {
    return this.probeInput({ type: "frame", conn: this.st.session.conn, data: encodeEnvelope(this.st.session.fence, payload) });
  }

  /** What the agent would do on `input` now (an executor report, a tick, …): stepped on a copy of its state, its persists made durable. */
  probeInput(input: AgentInput): AgentEffect[] {
    const copy = structuredClone(this.st);
    const out = stepAgentChecked(copy, input, this.now);
    // Its persists made durable at once, as the rig does, so what would be sent is sent.
    const last = of(out, "persist").at(-1);
    if (last) out.push(...stepAgentChecked(copy, { type: "durable", through: last.id }, this.now));
    return out;
  }

  /** The write_seq the agent expects next for a command's stdin, as its SEQUENCE_VIOLATION to a write far ahead names it (probed). */
  expectedWriteSeq(uuid: string): number {
    const msg = errorsIn(this.probe(stdinWrite(uuid, 2n ** 52n, [])))[0]?.error?.message ?? "";
    const m = /, expected (\d+)$/.exec(msg);
    if (!m) throw new Error(`no write_seq expectation in ${JSON.stringify(msg)}`);
    return Number(m[1]);
  }

  /** A copy of this rig (state, disk, clock, link), to try a sequence of inputs on without changing this one. */
  fork(): AgentRig {
    const f = new AgentRig(this.cfg);
    f.now = this.now;
    f.st = structuredClone(this.st);
    f.disk.durable = structuredClone(this.disk.durable);
    f.disk.pending = structuredClone(this.disk.pending);
    f.autoDurable = this.autoDurable;
    f.up = this.up;
    f.snapshotSent = this.snapshotSent;
    return f;
  }

  /** The agent after a crash now: a new rig restored from this one's durable disk (pending persists lost), not yet started. */
  crashed(seed = 9): AgentRig {
    const back = new AgentRig(this.cfg, seed);
    back.now = this.now;
    back.disk.durable = structuredClone(this.disk.durable);
    back.st = restoreAgent(back.cfg, back.disk.tables(), seed);
    return back;
  }

  /** The event seqs of `uuid` the agent would send again on a new session (its unacknowledged pinned events), tried on a fork. */
  resentOnReconnect(uuid: string): number[] {
    const f = this.fork();
    f.autoDurable = true;
    if (f.linkUp()) f.drop();
    f.register();
    f.welcome((f.st.session.fence?.generation ?? 0) + 100, "fork");
    return eventsIn(f.reconcile([]), uuid).map((e) => Number(e.eventSeq));
  }

  /** The commands a snapshot would report retained, in the agent's order. */
  retained(): string[] {
    return retainedOf(this.st);
  }

  /** Whether a ReconcileRequest naming `uuid` (with `hash`, default sha(uuid)) would be answered with a tombstone. */
  tombstoned(uuid: string, hash?: Uint8Array): boolean {
    return tombstonedOf(this.st, uuid, hash);
  }

  /** The last lifecycle state the agent sent for a command ("" for none), as a reader names it. */
  lifecycleOf(uuid: string): string {
    const last = lifecycles(this.log, uuid).at(-1);
    return last ? lifecycleName(last.state) : "";
  }
}

/** The frame was refused with `code` and the session closed (error first, on the priority lane). */
export function expectClosed(r: AgentRig, effects: AgentEffect[], code: Code, message?: string): void {
  const errs = sends(effects, "error");
  if (message !== undefined) expect((errs[0]?.env.payload.value as AgentError | undefined)?.error?.message).toBe(message);
  expect(errs.map((s) => [(s.env.payload.value as AgentError).error?.code, (s.env.payload.value as AgentError).closeSession, s.lane])).toEqual([
    [code, true, "priority"],
  ]);
  expect(closes(effects)).toHaveLength(1);
  const errAt = effects.findIndex((e) => e.type === "send" && e.kind === "error");
  expect(errAt).toBeLessThan(effects.findIndex((e) => e.type === "close"));
  expect(r.linkUp()).toBe(false);
  expect(r.st.reconciled).toBe(false);
}

/** The frame was refused with `code` and the session stays up. */
export function expectRefused(r: AgentRig, effects: AgentEffect[], code: Code, message?: string): void {
  if (message !== undefined) expect(errorsIn(effects)[0]?.error?.message).toBe(message);
  expect(errorsIn(effects).map((e) => [e.error?.code, e.closeSession])).toEqual([[code, false]]);
  expect(closes(effects)).toHaveLength(0);
  expect(r.linkUp()).toBe(true);
}

// A local stand-in for toBinary that keeps the import list above readable.

export function require_toBinary(env: ReturnType<typeof decode>): Uint8Array {
  return toBinary(AgentEnvelopeSchema, env);
}

void MAX_CHUNK_BYTES;

// ------------------------------------------------------------------ commands

export const stdinWrite = (uuid: string, seq: bigint, data: number[] | Uint8Array, appendNewline = false): Payload => ({
  case: "stdinWrite",
  value: { $typeName: "rvbox.v1.StdinWrite", issueUuid: uuid, writeSeq: seq, data: data instanceof Uint8Array ? data : new Uint8Array(data), appendNewline },
});
export const closeStdin = (uuid: string, seq: bigint): Payload => ({
  case: "closeStdin",
  value: { $typeName: "rvbox.v1.CloseStdin", issueUuid: uuid, writeSeq: seq },
});
export const signal = (uuid: string, rev: bigint, kind: SignalKind): Payload => ({
  case: "signalCommand",
  value: { $typeName: "rvbox.v1.SignalCommand", issueUuid: uuid, commandRevision: rev, signal: kind },
});
export const chunk = (uuid: string, offset: number | bigint, data: Uint8Array, digest = sha(data)): Payload => ({
  case: "scriptChunk",
  value: { $typeName: "rvbox.v1.ScriptChunk", issueUuid: uuid, offset: BigInt(offset), data, sha256: digest },
});
export const commit = (uuid: string, size: number, digest: Uint8Array): Payload => ({
  case: "scriptCommit",
  value: { $typeName: "rvbox.v1.ScriptCommit", issueUuid: uuid, sizeBytes: BigInt(size), sha256: digest },
});
export const stdinAcks = (effects: AgentEffect[], uuid?: string) =>
  eventsIn(effects, uuid)
    .filter((e) => e.event.case === "stdinAck")
    .map((e) => {
      const v = e.event.value as { writeSeq: bigint; closed: boolean; failure: string };
      return [Number(v.writeSeq), v.closed, v.failure];
    });
export const signalResults = (effects: AgentEffect[], uuid?: string) =>
  eventsIn(effects, uuid)
    .filter((e) => e.event.case === "signalResult")
    .map((e) => {
      const v = e.event.value as { signal: SignalKind; delivered: boolean; detail: string };
      return [Number(e.commandRevision), v.signal, v.delivered, v.detail];
    });
