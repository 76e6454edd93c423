// The agent node reducer driven directly (no server): every frame the agent
// refuses gets its exact error code and the exact close-or-not the protocol
// demands; registration, fencing and phase guards; dispatch admission bounds
// at n and n+1; the durable ordering of acceptance, launch and snapshot;
// reconciliation; the tombstone ledger; restart; and each invariant with a
// deliberately corrupted state.
import { createHash } from "node:crypto";
import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  AgentEnvelopeSchema,
  CommandDispatchSchema,
  ReconcileCommandStateSchema,
  ReconcileRequestSchema,
  ReconcileSnapshotSchema,
  ReconcileTargetSchema,
  ServerWelcomeSchema,
  type AgentError,
  type CommandAccepted,
  type ReconcileSnapshot,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import {
  CommandLifecycle as L,
  ExecutionSpecSchema,
  ProtocolVersionSchema,
  ShellType,
  SignalKind,
  type CommandEvent,
  type ExecutionSpec,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  agentInvariants,
  agentStep,
  defaultAgentConfig,
  restoreAgent,
  toHex,
  type AgentConfig,
  type AgentEffect,
  type AgentInput,
  type AgentState,
} from "../../core/index.js";
import { validateSpec } from "../../core/agent/admission.js";
import { fitSnapshot } from "../../core/agent/reconcile.js";
import { Code, InvariantViolation } from "../../core/errors.js";
import { encodeEnvelope, type Fence, type Payload } from "../../core/codec/frame-codec.js";
import { AGENT_SNAPSHOT_SLACK_BYTES, MAX_ARGV_ITEMS, MAX_CHUNK_BYTES, MAX_ENV_ITEMS, MAX_ENVELOPE_BYTES, MAX_SCRIPT_BYTES, MAX_SPEC_STRING_BYTES, STDIN_WRITES_IN_FLIGHT } from "../../core/limits.js";
import { Disk } from "../support/harness.js";
import { testPorts } from "../support/ports.js";

const T0 = 1_700_000_000_000;
const sha = (b: Uint8Array | string): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest());
const decode = (d: Uint8Array) => fromBinary(AgentEnvelopeSchema, d);
type SpecInit = Exclude<MessageInitShape<typeof ExecutionSpecSchema>, ExecutionSpec>;
const argv = (...a: string[]): SpecInit => ({ program: { case: "argv", value: { argv: a } } });

function sends(effects: AgentEffect[], kind?: string) {
  return effects.filter((e) => e.type === "send").map((e) => ({ env: decode((e as { data: Uint8Array }).data), lane: (e as { lane: string }).lane })).filter((s) => !kind || s.env.payload.case === kind);
}
const errorsIn = (effects: AgentEffect[]) => sends(effects, "error").map((s) => s.env.payload.value as AgentError);
const accepts = (effects: AgentEffect[]) => sends(effects, "commandAccepted").map((s) => s.env.payload.value as CommandAccepted);
const eventsIn = (effects: AgentEffect[], uuid?: string) =>
  sends(effects, "commandEvent")
    .map((s) => s.env.payload.value as CommandEvent)
    .filter((e) => !uuid || e.issueUuid === uuid);
const lifecycles = (effects: AgentEffect[], uuid?: string) =>
  eventsIn(effects, uuid)
    .filter((e) => e.event.case === "lifecycle")
    .map((e) => e.event.value as { state: L; reason: string; exitCode?: number; signalName: string; error?: { code: Code } });
const closes = (effects: AgentEffect[]) => effects.filter((e) => e.type === "close");
const of = <T extends AgentEffect["type"]>(effects: AgentEffect[], type: T) => effects.filter((e) => e.type === type) as Array<Extract<AgentEffect, { type: T }>>;

/** One agent, stepped by hand: persists are applied to a disk and reported durable at once unless autoDurable is off. */
class AgentRig {
  now = T0;
  st: AgentState;
  cfg: AgentConfig;
  disk = new Disk();
  log: AgentEffect[] = [];
  autoDurable = true;

  constructor(over: Partial<AgentConfig> = {}, seed = 7) {
    this.cfg = defaultAgentConfig("agent-1", over);
    this.st = restoreAgent(this.cfg, this.disk.tables(), seed);
  }

  step(input: AgentInput): AgentEffect[] {
    const r = agentStep(this.st, input, this.now, { ports: testPorts });
    agentInvariants(this.st);
    for (const e of of(r.effects, "persist")) for (const rec of e.records) expect(rec, "persist records are table/key/value rows").toEqual({ table: expect.any(String), key: expect.any(String), value: rec.value });
    this.log.push(...r.effects);
    const out = [...r.effects];
    for (const e of r.effects) if (e.type === "persist") (this.autoDurable ? this.disk.apply(e) : this.disk.pending.push(e));
    const last = of(r.effects, "persist").at(-1);
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
    return this.frame({
      case: "commandDispatch",
      value: create(CommandDispatchSchema, {
        issueUuid: uuid,
        commandRevision: o.rev ?? 1n,
        targetSessionGeneration: o.gen ?? BigInt(this.st.session.fence?.generation ?? 0),
        ...(spec ? { spec: create(ExecutionSpecSchema, spec) } : {}),
        immutableRequestSha256: o.hash ?? sha(uuid),
        ...(o.expiry !== undefined ? { queueExpiryTime: timestampFromMs(o.expiry) } : {}),
      }),
    });
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

  cmd(uuid: string) {
    return this.st.commands.get(uuid)!;
  }
}

/** The frame was refused with `code` and the session closed (error first, on the priority lane). */
function expectClosed(r: AgentRig, effects: AgentEffect[], code: Code, message?: string): void {
  const errs = sends(effects, "error");
  if (message !== undefined) expect((errs[0]?.env.payload.value as AgentError | undefined)?.error?.message).toBe(message);
  expect(errs.map((s) => [(s.env.payload.value as AgentError).error?.code, (s.env.payload.value as AgentError).closeSession, s.lane])).toEqual([[code, true, "priority"]]);
  expect(closes(effects)).toHaveLength(1);
  const errAt = effects.findIndex((e) => e.type === "send" && e.kind === "error");
  expect(errAt).toBeLessThan(effects.findIndex((e) => e.type === "close"));
  expect(r.st.session.phase).toBe("backoff");
  expect(r.st.reconciled).toBe(false);
}

/** The frame was refused with `code` and the session stays up. */
function expectRefused(r: AgentRig, effects: AgentEffect[], code: Code, message?: string): void {
  if (message !== undefined) expect(errorsIn(effects)[0]?.error?.message).toBe(message);
  expect(errorsIn(effects).map((e) => [e.error?.code, e.closeSession])).toEqual([[code, false]]);
  expect(closes(effects)).toHaveLength(0);
  expect(r.st.session.phase).toBe("established");
}

describe("agent registration", () => {
  it("R-F2: start persists a fresh instance id, connects, and the hello carries the agent's identity and limits", () => {
    const r = new AgentRig({ maxRunning: 3, maxQueued: 9 });
    const out = r.step({ type: "start" });
    expect(r.st.instanceId).toMatch(/^[0-9a-f]{32}$/);
    expect(r.disk.durable.get("meta")?.get("instance_id")).toBe(r.st.instanceId);
    expect(of(out, "connect")).toEqual([{ type: "connect", conn: 1 }]);
    expect(r.step({ type: "start" }).filter((e) => e.type === "connect")).toHaveLength(0); // start twice: once
    const hello = sends(r.step({ type: "transport_open", conn: 1 }), "clientHello");
    expect(hello).toHaveLength(1);
    expect(hello[0]!.lane).toBe("priority");
    expect(hello[0]!.env.sessionId).toBe("");
    expect(hello[0]!.env.sessionGeneration).toBe(0n);
    expect(hello[0]!.env.payload.value).toMatchObject({ clientId: "agent-1", clientInstanceId: r.st.instanceId, maxRunningCommands: 3, maxQueuedCommands: 9, daemonCwd: "/", architecture: "x86_64", daemonVersion: "rvbox-agent/0.1.0" });
    expect(of(r.log, "send").map((x) => [x.kind, x.lane])).toEqual([["clientHello", "priority"]]);
  });

  it("R-T4: a welcome without a selected version, or with one outside our range, is INCOMPATIBLE_VERSION and closes", () => {
    for (const sel of [null, { major: 2, minor: 0 }, { major: 1, minor: 1 }, { major: 0, minor: 9 }]) {
      const r = new AgentRig();
      r.register();
      const out = r.welcome(1, "s", sel);
      expect(errorsIn(out).map((e) => [e.error?.code, e.error?.message, e.closeSession])).toEqual([[Code.INCOMPATIBLE_VERSION, "server selected a version outside our range", true]]);
      expect(closes(out)).toHaveLength(1);
      expect(r.st.session.phase).toBe("backoff");
      expect(r.st.session.fence).toBeNull();
    }
  });

  it("R-F2 R-F7: a welcome with an empty session id, generation 0, an unsafe generation or one below the highest seen is STALE_GENERATION", () => {
    const cases: Array<[string, number | bigint]> = [
      ["", 1],
      ["s", 0],
    ];
    for (const [sid, gen] of cases) {
      const r = new AgentRig();
      r.register();
      const out = r.welcome(Number(gen), sid);
      expect(errorsIn(out).map((e) => [e.error?.code, e.error?.message])).toEqual([[Code.STALE_GENERATION, `welcome with unusable fence (generation ${gen})`]]);
      expect(r.st.session.phase).toBe("backoff");
    }
    const r = new AgentRig();
    r.register();
    const unsafe = r.step({
      type: "frame",
      conn: r.st.session.conn,
      data: (() => {
        const ok = encodeEnvelope({ sessionId: "s", generation: 1 }, { case: "serverWelcome", value: create(ServerWelcomeSchema, { selectedProtocol: create(ProtocolVersionSchema, { major: 1, minor: 0 }) }) });
        const env = decode(ok);
        env.sessionGeneration = 2n ** 53n;
        return new Uint8Array(Buffer.from(require_toBinary(env)));
      })(),
    });
    expect(errorsIn(unsafe).map((e) => e.error?.code)).toEqual([Code.STALE_GENERATION]);

    // Below the highest generation ever welcomed: refused; equal: accepted.
    const g = new AgentRig();
    g.establish(5);
    g.drop();
    g.register();
    const low = g.welcome(4, "older");
    expect(errorsIn(low).map((e) => e.error?.code)).toEqual([Code.STALE_GENERATION]);
    expect(g.st.session.phase).toBe("backoff");
    g.register();
    g.welcome(5, "same-gen");
    expect(g.st.session.phase).toBe("established");
    expect(g.st.session.fence).toEqual({ sessionId: "same-gen", generation: 5 });
  });

  it("R-F4: an error while registering ends the attempt without answering it; anything else before the welcome is PROTOCOL_ERROR", () => {
    const r = new AgentRig();
    r.register();
    const out = r.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", error: { $typeName: "rvbox.v1.ControlError", code: Code.IDENTITY_CONFLICT, message: "live elsewhere", issueUuid: "" }, closeSession: true } }, null);
    expect(errorsIn(out)).toEqual([]);
    expect(of(out, "close")).toEqual([{ type: "close", conn: 1, reason: "registration refused: IDENTITY_CONFLICT live elsewhere" }]);
    expect(r.st.session.phase).toBe("backoff");

    const p = new AgentRig();
    p.register();
    const bad = p.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 1n } }, null);
    expect(errorsIn(bad).map((e) => [e.error?.code, e.error?.message, e.closeSession])).toEqual([[Code.PROTOCOL_ERROR, "eventAck before ServerWelcome", true]]);
    expect(p.st.session.phase).toBe("backoff");
  });

  it("R-H6: frames on a connection that is still opening, or on a stale connection number, are ignored", () => {
    const r = new AgentRig();
    r.step({ type: "start" });
    expect(r.st.session.phase).toBe("connecting");
    const out = r.welcome(1, "s");
    expect(sends(out)).toEqual([]);
    expect(r.st.session.phase).toBe("connecting");
    r.step({ type: "transport_open", conn: 1 });
    const stale = r.step({ type: "frame", conn: 2, data: encodeEnvelope({ sessionId: "s", generation: 1 }, { case: "serverWelcome", value: create(ServerWelcomeSchema, { selectedProtocol: create(ProtocolVersionSchema, { major: 1, minor: 0 }) }) }) });
    expect(sends(stale)).toEqual([]);
    expect(r.st.session.phase).toBe("registering");
  });
});

// A local stand-in for toBinary that keeps the import list above readable.
import { toBinary } from "@bufbuild/protobuf";
import { agentRow, stdinKey } from "../../core/agent/store.js";
function require_toBinary(env: ReturnType<typeof decode>): Uint8Array {
  return toBinary(AgentEnvelopeSchema, env);
}

describe("agent frame handling once established", () => {
  it("R-T1 R-W10: a text frame or undecodable bytes are PROTOCOL_ERROR and close the session", () => {
    const r = new AgentRig();
    r.establish();
    expectClosed(r, r.step({ type: "frame", conn: r.st.session.conn, data: encodeEnvelope(r.st.session.fence, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 0n } }), binary: false }), Code.PROTOCOL_ERROR);
    const g = new AgentRig();
    g.establish();
    expectClosed(g, g.step({ type: "frame", conn: g.st.session.conn, data: new Uint8Array([0xff, 0xff, 0xff]) }), Code.PROTOCOL_ERROR);
    const t = new AgentRig();
    t.establish();
    expectClosed(t, t.step({ type: "frame", conn: t.st.session.conn, data: new Uint8Array(2) , binary: false }), Code.PROTOCOL_ERROR, "text frames are not part of the protocol");
  });

  it("R-F7: an envelope with another session id or generation is STALE_GENERATION and closes", () => {
    for (const fence of [
      { sessionId: "sess-1", generation: 2 },
      { sessionId: "other", generation: 1 },
      null,
    ]) {
      const r = new AgentRig();
      r.establish(1, "sess-1");
      expectClosed(r, r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 0n } }, fence), Code.STALE_GENERATION, `envelope fenced to generation ${fence?.generation ?? 0}, current 1`);
    }
  });

  it("R-W10: a server error that closes the session ends it without an answer; one that does not is only traced", () => {
    const r = new AgentRig();
    r.establish();
    const keep = r.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", error: { $typeName: "rvbox.v1.ControlError", code: Code.NOT_FOUND, message: "nope", issueUuid: "" }, closeSession: false } });
    expect(sends(keep)).toEqual([]);
    expect(of(keep, "trace").filter((t) => t.event === "server_error").map((t) => t.detail)).toEqual([{ code: "NOT_FOUND", message: "nope" }]);
    expect(r.st.session.phase).toBe("established");
    const end = r.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", error: { $typeName: "rvbox.v1.ControlError", code: Code.CAPACITY, message: "full", issueUuid: "" }, closeSession: true } });
    expect(errorsIn(end)).toEqual([]);
    expect(of(end, "close")).toEqual([{ type: "close", conn: 1, reason: "server error: CAPACITY full" }]);
    expect(r.st.session.phase).toBe("backoff");
  });

  it("R-W10: a payload only an agent sends, or a second welcome, is PROTOCOL_ERROR and closes", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.welcome(1, "sess-1");
    expectClosed(r, out, Code.PROTOCOL_ERROR);
    expect(errorsIn(out)[0]!.error?.message).toBe("unexpected serverWelcome from server");
    const a = new AgentRig();
    a.establish();
    expectClosed(a, a.frame({ case: "clientCapacity", value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 0, maxQueuedCommands: 0 } }), Code.PROTOCOL_ERROR);
  });

  it("R-W5: a full ingress queue on the current connection closes it; a report for a stale connection is ignored", () => {
    const r = new AgentRig();
    r.establish();
    expect(closes(r.step({ type: "ingress_full", conn: 99 }))).toHaveLength(0);
    expect(r.st.session.phase).toBe("established");
    const out = r.step({ type: "ingress_full", conn: r.st.session.conn });
    expect(of(out, "close")).toEqual([{ type: "close", conn: 1, reason: "ingress queue full" }]);
    expect(r.st.session.phase).toBe("backoff");
  });

  it("R-D13: store_repaired re-registers only when there was an incident", () => {
    const r = new AgentRig();
    r.establish();
    expect(closes(r.step({ type: "store_repaired" }))).toHaveLength(0);
    expect(r.st.session.phase).toBe("established");
    r.step({ type: "store_incident", detail: "crc" });
    expect(r.st.storeIncident).toBe("crc");
    const out = r.step({ type: "store_repaired" });
    expect(r.st.storeIncident).toBeNull();
    expect(of(out, "close")).toEqual([{ type: "close", conn: 1, reason: "store repaired: re-registering" }]);
  });

  it("R-H1: an activity report on the current connection moves the heartbeat; a stale one does not", () => {
    const r = new AgentRig();
    r.establish();
    r.now += 5_000;
    r.step({ type: "activity", conn: 7 });
    expect(r.st.session.hb.lastInbound).toBe(T0);
    r.step({ type: "activity", conn: r.st.session.conn });
    expect(r.st.session.hb.lastInbound).toBe(T0 + 5_000);
  });

  it("R-W2: capacity is reported once the session is reconciled, once per change, and again on every new session", () => {
    const r = new AgentRig({ maxRunning: 2, maxQueued: 3 });
    r.register();
    expect(sends(r.welcome(1, "s1"), "clientCapacity")).toEqual([]); // not before the snapshot
    const first = sends(r.reconcile([]), "clientCapacity");
    expect(first.map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ runningCommands: 0, queuedCommands: 0, maxRunningCommands: 2, maxQueuedCommands: 3 })]);
    expect(sends(r.step({ type: "tick" }), "clientCapacity")).toEqual([]);
    const after = sends(r.dispatch("c1"), "clientCapacity");
    expect(after.map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ runningCommands: 1, queuedCommands: 0 })]);
    r.drop();
    r.register();
    r.welcome(2, "s2");
    expect(sends(r.reconcile([]), "clientCapacity").map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ runningCommands: 1, queuedCommands: 0 })]);
  });
});

describe("dispatch admission", () => {
  it("R-D2 R-W10: an unusable issue_uuid is refused with VALIDATION without closing; 128 characters are fine", () => {
    for (const uuid of ["", "u".repeat(129)]) {
      const r = new AgentRig();
      r.establish();
      const out = r.dispatch(uuid);
      expectRefused(r, out, Code.VALIDATION, "dispatch without a usable issue_uuid");
      expect(accepts(out)).toEqual([]);
      expect(r.st.commands.size).toBe(0);
    }
    const r = new AgentRig();
    r.establish();
    expect(accepts(r.dispatch("u".repeat(128)))).toEqual([expect.objectContaining({ accepted: true, issueUuid: "u".repeat(128) })]);
  });

  it("R-D2: a request hash that is not 32 bytes is rejected with VALIDATION", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("c1", argv("true"), { hash: new Uint8Array(31), rev: 3n });
    expect(accepts(out)).toEqual([expect.objectContaining({ issueUuid: "c1", commandRevision: 3n, accepted: false, rejection: expect.objectContaining({ code: Code.VALIDATION, issueUuid: "c1", message: "immutable_request_sha256 must be 32 bytes" }) })]);
    expect(r.st.commands.size).toBe(0);
    expect(r.st.session.phase).toBe("established");
  });

  it("R-W10: a command revision beyond 2^53 is SEQUENCE_VIOLATION and closes", () => {
    const r = new AgentRig();
    r.establish();
    expectClosed(r, r.dispatch("c1", argv("true"), { rev: 2n ** 53n }), Code.SEQUENCE_VIOLATION, "command_revision out of range");
    expect(r.st.commands.size).toBe(0);
  });

  it("R-F7: a dispatch targeting another generation is rejected STALE_GENERATION and not retained", () => {
    const r = new AgentRig();
    r.establish(4);
    for (const gen of [3n, 5n, 0n]) {
      const out = r.dispatch("c1", argv("true"), { gen });
      expect(accepts(out).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([[false, Code.STALE_GENERATION, `dispatch targets generation ${gen}`]]);
    }
    expect(r.st.commands.size).toBe(0);
    expect(accepts(r.dispatch("c1", argv("true"), { gen: 4n }))[0]!.accepted).toBe(true);
  });

  it("R-D2: a redelivered dispatch of a live command is answered accepted again with the command's current revision", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.frame({ case: "signalCommand", value: { $typeName: "rvbox.v1.SignalCommand", issueUuid: "c1", commandRevision: 2n, signal: SignalKind.USER1 } });
    const again = r.dispatch("c1");
    expect(accepts(again)).toEqual([expect.objectContaining({ issueUuid: "c1", commandRevision: 2n, accepted: true })]);
    expect(of(again, "spawn")).toEqual([]);
    expect(r.st.commands.size).toBe(1);
    const other = r.dispatch("c1", argv("true"), { hash: sha("different request") });
    expect(accepts(other).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([[false, Code.CONFLICT, "issue_uuid already holds a different request"]]);
    expect(r.cmd("c1").hash).toBe(Buffer.from(sha("c1")).toString("hex"));
  });

  it("R-D2 R-D5: a tombstoned UUID is ALREADY_EXECUTED with the same hash and CONFLICT with another", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    r.ackAll("c1");
    expect(r.st.tombstones.get("c1")).toBe(Buffer.from(sha("c1")).toString("hex"));
    expect(accepts(r.dispatch("c1")).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([[false, Code.ALREADY_EXECUTED, "already executed (tombstone ledger)"]]);
    expect(accepts(r.dispatch("c1", argv("true"), { hash: sha("other") })).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([[false, Code.CONFLICT, "issue_uuid was used by a different request"]]);
    expect(r.st.commands.size).toBe(0);
  });

  it("R-D13: while a store incident is open every new dispatch is rejected STORE_INCIDENT", () => {
    const r = new AgentRig();
    r.establish();
    r.step({ type: "store_incident", detail: "disk gone" });
    const out = r.dispatch("c1");
    expect(accepts(out)).toEqual([expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.STORE_INCIDENT, message: "agent store incident: disk gone" }) })]);
    expect(r.st.commands.size).toBe(0);
  });

  it("R-D3: the queue bound: maxRunning + maxQueued commands are accepted, the next one is CAPACITY", () => {
    const r = new AgentRig({ maxRunning: 1, maxQueued: 1 });
    r.establish();
    expect(accepts(r.dispatch("c1"))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("c2"))[0]!.accepted).toBe(true);
    expect(r.cmd("c2").phase).toBe("queued");
    const out = r.dispatch("c3");
    expect(accepts(out)).toEqual([expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "queue full (1 running, 1 queued)" }) })]);
    expect(r.st.commands.has("c3")).toBe(false);
  });

  it("R-W2: the retained-command bound is maxRetained (done but unacknowledged commands count)", () => {
    const r = new AgentRig({ maxRunning: 8, maxQueued: 8, limits: { ...defaultAgentConfig("x").limits, maxRetained: 2 } });
    r.establish();
    r.run("c1");
    r.exit("c1", 0); // done, events not acknowledged: still retained
    expect(accepts(r.dispatch("c2"))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("c3"))).toEqual([expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "retained-command limit reached" }) })]);
    r.ackAll("c1");
    expect(r.st.commands.has("c1")).toBe(false);
    expect(accepts(r.dispatch("c3"))[0]!.accepted).toBe(true);
  });

  it("R-W2: the metadata budget admits exactly budget / per-command commands", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 8, maxQueued: 8, limits: { ...base, metadataBudget: 2 * base.metadataPerCommand } });
    r.establish();
    expect(accepts(r.dispatch("c1"))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("c2"))[0]!.accepted).toBe(true);
    expect(r.st.metadataUsed).toBe(2 * base.metadataPerCommand);
    expect(accepts(r.dispatch("c3"))).toEqual([expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "metadata budget full" }) })]);
  });

  it("R-W2 R-C2: the script storage budget admits scripts up to exactly scriptTotal bytes", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 8, maxQueued: 8, limits: { ...base, scriptTotal: 100 } });
    r.establish();
    const script = (n: number): SpecInit => ({ program: { case: "script", value: { sizeBytes: BigInt(n), sha256: new Uint8Array(32), interpreter: "/bin/sh" } } });
    expect(accepts(r.dispatch("s1", script(60)))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("s2", script(40)))[0]!.accepted).toBe(true);
    expect(r.st.scriptBytes).toBe(100);
    expect(accepts(r.dispatch("s3", script(1)))).toEqual([expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "script storage budget full" }) })]);
    // argv commands do not use the script budget
    expect(accepts(r.dispatch("a1"))[0]!.accepted).toBe(true);
  });

  it("R-D1: the accepted command is durable before CommandAccepted leaves, with its expiry, revision and time", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.autoDurable = false;
    const out = r.dispatch("c1", argv("sleep", "1"), { rev: 1n, expiry: T0 + 60_000 });
    expect(accepts(out)).toEqual([]);
    expect(r.cmd("c1")).toMatchObject({ uuid: "c1", revision: 1, queueExpiry: T0 + 60_000, acceptedAt: T0, phase: "queued", lifecycle: L.ACCEPTED, pid: 0, script: null, lastSignalRevision: 0, cancelRevision: 0 });
    expect(r.cmd("c1").stdin).toEqual({ next: 1, pending: [], pendingBytes: 0, inFlight: false, closed: false });
    const rec = r.disk.pending.flatMap((p) => p.records).find((x) => x.table === "command" && x.key === "c1");
    expect(rec?.value).toMatchObject({ uuid: "c1", phase: "queued", queueExpiry: T0 + 60_000 });
    expect(r.disk.pending.flatMap((p) => p.records).some((x) => x.table === "outbox" && x.key === "c1")).toBe(true);
    const done = r.flush();
    expect(accepts(done)).toEqual([expect.objectContaining({ issueUuid: "c1", commandRevision: 1n, accepted: true })]);
  });

  it("R-H6: an acceptance whose persist becomes durable only after a reconnect is not sent on the new session", () => {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    r.drop();
    r.register();
    r.welcome(2, "s2");
    r.reconcile([]);
    const out = r.flush();
    expect(sends(out, "reconcileSnapshot")).toHaveLength(1);
    expect(accepts(out)).toEqual([]);
  });

  it("R-D11: a command terminated by the reconcile result before its acceptance is durable is never reported accepted nor spawned", () => {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    expect(r.cmd("c1").phase).toBe("launching");
    r.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] } });
    const out = r.flush();
    expect(accepts(out)).toEqual([]);
    expect(of(out, "spawn")).toEqual([]);
    expect(r.st.tombstones.has("c1")).toBe(true);
  });
});

describe("execution spec validation (agent side)", () => {
  // Built inside each test (never at collection time), so a broken core fails a test, not the file.
  const check = (spec: SpecInit | undefined) => validateSpec(new AgentRig().st, spec === undefined ? undefined : (create(ExecutionSpecSchema, spec) as ExecutionSpec));
  const long = "x".repeat(MAX_SPEC_STRING_BYTES);
  const script = (over: Record<string, unknown> = {}): SpecInit => ({ program: { case: "script", value: { sizeBytes: 10n, sha256: new Uint8Array(32), interpreter: "/bin/sh", ...over } } });

  it("R-D4: each malformed spec gets VALIDATION (or UNSUPPORTED_PLATFORM) with its reason; the bounds are inclusive", () => {
    const cases: Array<[string, SpecInit | undefined, Code | null, string?]> = [
      ["no spec", undefined, Code.VALIDATION, "dispatch has no execution spec"],
      ["no program", {}, Code.VALIDATION, "execution spec names no program"],
      ["empty argv", argv(), Code.VALIDATION, "argv is empty"],
      ["empty argv[0]", argv("", "x"), Code.VALIDATION, "argv is empty"],
      ["max argv items", argv(...Array.from({ length: MAX_ARGV_ITEMS }, () => "a")), null],
      ["too many argv items", argv(...Array.from({ length: MAX_ARGV_ITEMS + 1 }, () => "a")), Code.VALIDATION, "argv has too many items"],
      ["longest argv item", argv("a", long), null],
      ["argv item too long", argv("a", long + "x"), Code.VALIDATION, "argv item too long or contains NUL"],
      ["argv NUL", argv("a", "b\0c"), Code.VALIDATION, "argv item too long or contains NUL"],
      ["unsupported shell", { program: { case: "shell", value: { shell: ShellType.POWERSHELL, commandLine: "dir" } } }, Code.UNSUPPORTED_PLATFORM, `shell ${ShellType.POWERSHELL} is not supported on this agent`],
      ["shell ok", { program: { case: "shell", value: { shell: ShellType.BASH, commandLine: "echo hi" } } }, null],
      ["empty command line", { program: { case: "shell", value: { shell: ShellType.SH, commandLine: "" } } }, Code.VALIDATION, "command line empty, too long or contains NUL"],
      ["command line NUL", { program: { case: "shell", value: { shell: ShellType.SH, commandLine: "a\0" } } }, Code.VALIDATION, "command line empty, too long or contains NUL"],
      ["command line too long", { program: { case: "shell", value: { shell: ShellType.SH, commandLine: long + "x" } } }, Code.VALIDATION],
      ["script ok", script(), null],
      ["script size 0", script({ sizeBytes: 0n }), Code.VALIDATION, `script size must be 1..${MAX_SCRIPT_BYTES} bytes`],
      ["script size max", script({ sizeBytes: BigInt(MAX_SCRIPT_BYTES) }), null],
      ["script size max+1", script({ sizeBytes: BigInt(MAX_SCRIPT_BYTES + 1) }), Code.VALIDATION],
      ["script size unsafe", script({ sizeBytes: 2n ** 60n }), Code.VALIDATION],
      ["script sha 31", script({ sha256: new Uint8Array(31) }), Code.VALIDATION, "script sha256 must be 32 bytes"],
      ["script sha 33", script({ sha256: new Uint8Array(33) }), Code.VALIDATION, "script sha256 must be 32 bytes"],
      ["interpreter NUL", script({ interpreter: "/bin/\0sh" }), Code.VALIDATION, "script interpreter/args invalid"],
      ["script arg NUL", script({ args: ["ok", "b\0"] }), Code.VALIDATION, "script interpreter/args invalid"],
      ["cwd NUL", { ...argv("a"), cwd: "/tmp\0" }, Code.VALIDATION, "cwd too long or contains NUL"],
      ["cwd longest", { ...argv("a"), cwd: long }, null],
      ["cwd too long", { ...argv("a"), cwd: long + "x" }, Code.VALIDATION, "cwd too long or contains NUL"],
      ["max env", { ...argv("a"), environment: Array.from({ length: MAX_ENV_ITEMS }, (_, i) => ({ name: `V${i}`, value: "" })) }, null],
      ["too many env", { ...argv("a"), environment: Array.from({ length: MAX_ENV_ITEMS + 1 }, (_, i) => ({ name: `V${i}`, value: "" })) }, Code.VALIDATION, "too many environment variables"],
      ["env empty name", { ...argv("a"), environment: [{ name: "", value: "x" }] }, Code.VALIDATION, 'invalid environment variable ""'],
      ["env name with =", { ...argv("a"), environment: [{ name: "A=B", value: "x" }] }, Code.VALIDATION, 'invalid environment variable "A=B"'],
      ["env name NUL", { ...argv("a"), environment: [{ name: "A\0", value: "x" }] }, Code.VALIDATION],
      ["env value NUL", { ...argv("a"), environment: [{ name: "A", value: "x\0" }] }, Code.VALIDATION, 'invalid environment variable "A"'],
      ["env value too long", { ...argv("a"), environment: [{ name: "A", value: long + "x" }] }, Code.VALIDATION],
      ["env long name cut in the message", { ...argv("a"), environment: [{ name: "N".repeat(100) + "=", value: "" }] }, Code.VALIDATION, `invalid environment variable "${"N".repeat(64)}"`],
    ];
    for (const [name, spec, code, message] of cases) {
      const got = check(spec);
      if (code === null) expect(got, name).toBeNull();
      else {
        expect(got?.code, name).toBe(code);
        if (message !== undefined) expect(got?.message, name).toBe(message);
      }
    }
  });

  it("R-D4: an invalid spec in a dispatch is a rejection CommandAccepted, never a retained command", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("bad", argv(""));
    expect(accepts(out)).toEqual([expect.objectContaining({ issueUuid: "bad", accepted: false, rejection: expect.objectContaining({ code: Code.VALIDATION, message: "argv is empty" }) })]);
    const none = r.dispatch("nospec", null);
    expect(accepts(none)[0]!.rejection?.message).toBe("dispatch has no execution spec");
    expect(r.st.commands.size).toBe(0);
    expect(r.st.session.phase).toBe("established");
  });
});

describe("event acknowledgements", () => {
  it("R-O3: an ack for an unknown or retired command is ignored; one beyond the last assigned seq is SEQUENCE_VIOLATION and closes", () => {
    const r = new AgentRig();
    r.establish();
    const unknown = r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "nope", throughEventSeq: 99n } });
    expect(sends(unknown)).toEqual([]);
    expect(r.st.session.phase).toBe("established");
    r.run("c1");
    const last = r.st.outbox.commands.get("c1")!.nextSeq - 1;
    expect(last).toBe(1);
    expectClosed(r, r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: BigInt(last + 1) } }), Code.SEQUENCE_VIOLATION, "EventAck through 2 for c1 beyond last assigned 1");
    const u = new AgentRig();
    u.establish();
    u.run("c1");
    expectClosed(u, u.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 2n ** 60n } }), Code.SEQUENCE_VIOLATION);
  });

  it("R-O6: an ack through exactly the last seq releases the pinned events; a done command then becomes a tombstone", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    expect(r.st.outbox.commands.get("c1")!.pinned.map((p) => p.seq)).toEqual([1, 2]);
    r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 1n } });
    expect(r.st.outbox.commands.get("c1")!.pinned.map((p) => p.seq)).toEqual([2]);
    expect(r.st.commands.has("c1")).toBe(true);
    const out = r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 2n } });
    expect(r.st.commands.has("c1")).toBe(false);
    expect(r.st.outbox.commands.has("c1")).toBe(false);
    expect(r.st.tombstones.has("c1")).toBe(true);
    expect(r.st.metadataUsed).toBe(0);
    const recs = of(out, "persist").flatMap((p) => p.records);
    expect(recs).toContainEqual({ table: "command", key: "c1", value: null });
    expect(recs).toContainEqual({ table: "outbox", key: "c1", value: null });
    expect(recs).toContainEqual({ table: "tombstone", key: "c1", value: { hash: Buffer.from(sha("c1")).toString("hex"), order: 1 } });
  });
});

describe("launch and queue expiry", () => {
  it("R-D1: a queued command expires exactly at its queue expiry (1 ms before it is still queued) and is never launched", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    const expiry = T0 + 5_000;
    const out = r.dispatch("waits", argv("true"), { expiry });
    expect(r.cmd("waits").phase).toBe("queued");
    expect(of(out, "wake").at(-1)!.at).toBe(expiry); // earlier than the heartbeat
    r.now = expiry - 1;
    r.step({ type: "tick" });
    expect(r.cmd("waits").phase).toBe("queued");
    r.now = expiry;
    const exp = r.step({ type: "tick" });
    expect(r.cmd("waits").lifecycle).toBe(L.EXPIRED);
    expect(lifecycles(exp, "waits")).toEqual([expect.objectContaining({ state: L.EXPIRED, reason: "queue expiry passed before launch" })]);
    r.exit("busy", 0);
    expect(of(r.log, "spawn").map((s) => s.uuid)).toEqual(["busy"]);
  });

  it("R-D1: a dispatch whose expiry has already passed is accepted but never launched; the next tick expires it", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("late", argv("true"), { expiry: T0 });
    expect(accepts(out)[0]!.accepted).toBe(true);
    expect(r.cmd("late").phase).toBe("queued");
    expect(of(out, "spawn")).toEqual([]);
    r.step({ type: "tick" });
    expect(r.cmd("late").lifecycle).toBe(L.EXPIRED);
    expect(of(r.log, "spawn")).toEqual([]);
  });

  it("R-H1: with nothing queued the wake is the session deadline; a launching command's expiry does not count", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("c1", argv("true"), { expiry: T0 + 1_000 });
    expect(r.cmd("c1").phase).toBe("launching");
    expect(of(out, "wake").at(-1)!.at).toBe(T0 + 10_000);
  });

  it("R-D1: the launch is authorized durably before the spawn; running is bounded by maxRunning", () => {
    const r = new AgentRig({ maxRunning: 2, maxQueued: 4 });
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    r.dispatch("c2");
    r.dispatch("c3");
    expect(["c1", "c2", "c3"].map((u) => r.cmd(u).phase)).toEqual(["launching", "launching", "queued"]);
    expect(of(r.log, "spawn")).toEqual([]);
    const out = r.flush();
    expect(of(out, "spawn").map((s) => s.uuid)).toEqual(["c1", "c2"]);
    expect(of(out, "spawn")[0]).toMatchObject({ scriptPath: "" });
  });

  it("R-D1: spawn_failed and process_started are honoured only while launching", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const again = r.step({ type: "process_started", uuid: "c1", pid: 9 });
    expect(r.cmd("c1").pid).toBe(4242);
    expect(lifecycles(again)).toEqual([]);
    r.step({ type: "spawn_failed", uuid: "c1", reason: "late" });
    expect(r.cmd("c1").lifecycle).toBe(L.RUNNING);
    r.step({ type: "process_started", uuid: "ghost", pid: 1 });
    r.step({ type: "spawn_failed", uuid: "ghost", reason: "x" });
    expect(r.st.commands.size).toBe(1);
    const f = new AgentRig();
    f.establish();
    f.dispatch("c2");
    const fail = f.step({ type: "spawn_failed", uuid: "c2", reason: "ENOENT" });
    expect(lifecycles(fail, "c2")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "could not launch: ENOENT", error: expect.objectContaining({ code: Code.VALIDATION }) })]);
  });
});

describe("reconciliation at the agent", () => {
  it("R-D7 R-T2: matching tombstones join the snapshot while it fits the envelope budget; the rest are left out, never a crash", () => {
    const entry = (uuid: string, tombstoned: boolean) =>
      create(ReconcileCommandStateSchema, { issueUuid: uuid, lifecycle: tombstoned ? L.UNSPECIFIED : L.RUNNING, tombstoned, immutableRequestSha256: new Uint8Array(32).fill(7) });
    const retained = [entry("r1", false), entry("r2", false)];
    const tombs = ["t1", "t2", "t3", "t4"].map((u) => entry(u, true));
    const sizeWith = (n: number) => toBinary(ReconcileSnapshotSchema, create(ReconcileSnapshotSchema, { retainedCommands: [...retained, ...tombs.slice(0, n)] })).length;
    // A budget one byte above the size with exactly two tombstones admits two of four.
    const out = [...retained];
    expect(fitSnapshot(out, tombs, sizeWith(2) + 1)).toBe(2);
    expect(out.map((e) => e.issueUuid)).toEqual(["r1", "r2", "t1", "t2"]);
    expect(toBinary(ReconcileSnapshotSchema, create(ReconcileSnapshotSchema, { retainedCommands: out })).length).toBe(sizeWith(2));
    // At exactly that size, the second no longer fits (the budget is a strict upper bound).
    const out2 = [...retained];
    expect(fitSnapshot(out2, tombs, sizeWith(2))).toBe(3);
    // Everything fits in a roomy budget.
    const out3 = [...retained];
    expect(fitSnapshot(out3, tombs, MAX_ENVELOPE_BYTES)).toBe(0);
    expect(out3).toHaveLength(6);
    // Retained records that alone do not fit are a broken bound, not a peer's fault.
    expect(() => fitSnapshot([...retained], tombs, sizeWith(0))).toThrow(InvariantViolation);
  });

  it("R-D13: with a store incident the request is answered by STORE_INCIDENT (session kept), never by a snapshot", () => {
    const r = new AgentRig();
    r.register();
    r.welcome(1, "s");
    r.step({ type: "store_incident", detail: "journal" });
    const out = r.reconcile([]);
    expectRefused(r, out, Code.STORE_INCIDENT, "agent store incident, no complete snapshot possible: journal");
    expect(sends(out, "reconcileSnapshot")).toEqual([]);
    expect(r.st.reconciled).toBe(false);
  });

  it("R-D7: a request with more targets than retained commands plus tombstones is PAYLOAD_TOO_LARGE and closes; exactly that many is fine", () => {
    const limits = { ...defaultAgentConfig("x").limits, maxRetained: 1, maxTombstones: 1 };
    const t = (i: number) => ({ issueUuid: `t${i}`, immutableRequestSha256: sha(`t${i}`) });
    const ok = new AgentRig({ limits });
    ok.register();
    ok.welcome(1, "s");
    expect(sends(ok.reconcile([t(1), t(2)]), "reconcileSnapshot")).toHaveLength(1);
    const r = new AgentRig({ limits });
    r.register();
    r.welcome(1, "s");
    expectClosed(r, r.reconcile([t(1), t(2), t(3)]), Code.PAYLOAD_TOO_LARGE, "reconcile request with 3 targets");
  });

  it("R-D7: a target's last stored seq is a cumulative ack; an impossible one closes; more than this agent assigned is not an ack", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("x") });
    expect(r.st.outbox.commands.get("c1")!.nextSeq).toBe(3);
    r.drop();
    r.register();
    r.welcome(2, "s2");
    const out = r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 1n, immutableRequestSha256: sha("c1") }]);
    expect(r.st.outbox.commands.get("c1")!.ackedThrough).toBe(1);
    expect(of(out, "persist")[0]!.records.map((x) => [x.table, x.key, x.value === null])).toEqual([
      ["event", "c1/000000000001", true],
      ["outbox", "c1", false],
    ]);
    expect(eventsIn(out, "c1").map((e) => e.eventSeq)).toEqual([2n]); // resent from the first unacknowledged one
    r.drop();
    r.register();
    r.welcome(3, "s3");
    const div = r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 7n, immutableRequestSha256: sha("c1") }]);
    expect(r.st.outbox.commands.get("c1")!.ackedThrough).toBe(1);
    expect(of(div, "trace").filter((t) => t.event === "reconcile_diverged").map((t) => t.detail)).toEqual([{ uuid: "c1", serverStored: 7, assigned: 2 }]);
    expect(r.st.session.phase).toBe("established");
    // Exactly the last assigned seq is an ack of everything.
    r.drop();
    r.register();
    r.welcome(4, "s4");
    r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 2n, immutableRequestSha256: sha("c1") }]);
    expect(r.st.outbox.commands.get("c1")!.ackedThrough).toBe(2);
    r.drop();
    r.register();
    r.welcome(5, "s5");
    expectClosed(r, r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 2n ** 60n, immutableRequestSha256: sha("c1") }]), Code.SEQUENCE_VIOLATION, `server claims an impossible event_seq ${2n ** 60n}`);
  });

  it("R-D7 R-D10: the snapshot lists every retained command exactly, plus requested tombstones whose hash matches", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("done");
    r.exit("done", 0);
    r.ackAll("done");
    r.run("run");
    r.dispatch("queued", argv("true"), { rev: 1n });
    r.drop();
    r.register();
    r.welcome(2, "s2");
    const out = r.reconcile([
      { issueUuid: "done", immutableRequestSha256: sha("done") },
      { issueUuid: "other-hash", immutableRequestSha256: sha("x") },
      { issueUuid: "run", lastServerEventSeq: 1n, immutableRequestSha256: sha("WRONG") },
    ]);
    const snap = sends(out, "reconcileSnapshot")[0]!.env.payload.value as ReconcileSnapshot;
    expect(snap.retainedCommands.map((c) => ({ uuid: c.issueUuid, life: c.lifecycle, seq: c.lastClientEventSeq, rev: c.commandRevision, tomb: c.tombstoned, hash: Buffer.from(c.immutableRequestSha256).toString("hex") }))).toEqual([
      { uuid: "run", life: L.RUNNING, seq: 1n, rev: 1n, tomb: false, hash: Buffer.from(sha("run")).toString("hex") },
      { uuid: "queued", life: L.ACCEPTED, seq: 0n, rev: 1n, tomb: false, hash: Buffer.from(sha("queued")).toString("hex") },
      { uuid: "done", life: L.UNSPECIFIED, seq: 0n, rev: 0n, tomb: true, hash: Buffer.from(sha("done")).toString("hex") },
    ]);
    // A target with a different hash is no ack.
    expect(r.st.outbox.commands.get("run")!.ackedThrough).toBe(0);
    expect(r.st.pendingSnapshotTombstones).toEqual([]);
  });

  it("R-D7: the snapshot waits until everything persisted is durable, and only for the connection that asked", () => {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    r.drop();
    r.register();
    r.welcome(2, "s2");
    const req = r.reconcile([]);
    expect(sends(req, "reconcileSnapshot")).toEqual([]);
    expect(r.st.reconciled).toBe(false);
    r.drop(); // the session that asked is gone before the persist is durable
    const out = r.flush();
    expect(sends(out)).toEqual([]);
    expect(r.st.reconciled).toBe(false);
  });

  it("R-D11 R-D12: the result kills and tombstones running commands, discards only terminal ones, and is idempotent", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("run", argv("sleep", "9"), 77);
    r.dispatch("queued");
    const out = r.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["run", "queued", "missing"], discardLocalTerminalIssueUuids: [] } });
    expect(of(out, "signal")).toEqual([{ type: "signal", uuid: "run", signal: SignalKind.KILL, revision: 1 }]);
    expect(r.st.commands.size).toBe(0);
    expect([...r.st.tombstones.keys()]).toEqual(["run", "queued"]);

    const d = new AgentRig();
    d.establish();
    d.run("live");
    d.run("fin");
    d.exit("fin", 1);
    const disc = d.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: [], discardLocalTerminalIssueUuids: ["live", "fin", "missing"] } });
    expect(d.st.commands.has("live")).toBe(true);
    expect(d.st.commands.has("fin")).toBe(false);
    expect(d.st.tombstones.has("fin")).toBe(true);
    expect(of(disc, "signal")).toEqual([]);
    const again = d.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["fin"], discardLocalTerminalIssueUuids: ["fin"] } });
    expect(of(again, "persist")).toEqual([]);
    expect(d.st.tombstones.size).toBe(1);
  });

  it("R-D11: terminating a done command neither signals nor fails; it becomes a tombstone", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    const out = r.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] } });
    expect(of(out, "signal")).toEqual([]);
    expect(r.st.tombstones.has("c1")).toBe(true);
  });
});

describe("tombstone ledger", () => {
  it("R-D10: the ledger keeps at most maxTombstones, forgetting the oldest first, and its order survives a restart", () => {
    const limits = { ...defaultAgentConfig("x").limits, maxTombstones: 2 };
    const r = new AgentRig({ limits });
    r.establish();
    for (const u of ["t1", "t2", "t3"]) {
      r.run(u);
      r.exit(u, 0);
      const out = r.ackAll(u);
      if (u === "t3") expect(of(out, "persist").flatMap((p) => p.records)).toContainEqual({ table: "tombstone", key: "t1", value: null });
    }
    expect([...r.st.tombstones.keys()]).toEqual(["t2", "t3"]);
    expect(r.st.tombstoneSeq).toBe(3);
    // A forgotten UUID is new again.
    expect(accepts(r.dispatch("t1"))[0]!.accepted).toBe(true);
    const back = restoreAgent(r.cfg, r.disk.tables(), 1);
    expect([...back.tombstones.entries()]).toEqual([...r.st.tombstones.entries()]);
    expect(back.tombstoneSeq).toBe(3);
    // The restored order decides which goes next.
    expect([...r.disk.durable.get("tombstone")!.keys()].sort()).toEqual(["t2", "t3"]);
  });

  it("R-D10: restore orders the ledger by insertion order, not by key, and continues the counter", () => {
    const cfg = defaultAgentConfig("x");
    const tables = new Map<string, Map<string, unknown>>([
      [
        "tombstone",
        new Map<string, unknown>([
          ["b", { hash: "hb", order: 7 }],
          ["a", { hash: "ha", order: 9 }],
          ["c", { hash: "hc", order: 3 }],
        ]),
      ],
    ]);
    const st = restoreAgent(cfg, { get: (t) => tables.get(t) }, 1);
    expect([...st.tombstones.entries()]).toEqual([
      ["c", "hc"],
      ["b", "hb"],
      ["a", "ha"],
    ]);
    expect(st.tombstoneSeq).toBe(9);
    expect(restoreAgent(cfg, { get: () => undefined }, 1).tombstoneSeq).toBe(0);
  });
});

describe("restart", () => {
  it("R-F1 R-O2: a restart from durable storage restores commands, budgets, stdin, script chunks and the outbox exactly", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 1, maxQueued: 8, limits: { ...base, stdinPendingPerCommand: 1000 } });
    r.establish();
    r.run("run", argv("cat"));
    r.step({ type: "process_output", uuid: "run", stream: "stdout", data: new TextEncoder().encode("hello") });
    r.step({ type: "process_output", uuid: "run", stream: "stderr", data: new TextEncoder().encode("oops") });
    r.dispatch("in", { ...argv("cat"), stdinOpen: true });
    r.frame({ case: "stdinWrite", value: { $typeName: "rvbox.v1.StdinWrite", issueUuid: "in", writeSeq: 1n, data: new Uint8Array([1, 2]), appendNewline: false } });
    r.frame({ case: "stdinWrite", value: { $typeName: "rvbox.v1.StdinWrite", issueUuid: "in", writeSeq: 2n, data: new Uint8Array([3]), appendNewline: true } });
    const body = new Uint8Array(100).map((_, i) => i);
    r.dispatch("scr", { program: { case: "script", value: { sizeBytes: 100n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame({ case: "scriptChunk", value: { $typeName: "rvbox.v1.ScriptChunk", issueUuid: "scr", offset: 0n, data: body.subarray(0, 40), sha256: sha(body.subarray(0, 40)) } });
    r.frame({ case: "scriptChunk", value: { $typeName: "rvbox.v1.ScriptChunk", issueUuid: "scr", offset: 40n, data: body.subarray(40, 70), sha256: sha(body.subarray(40, 70)) } });
    const back = restoreAgent(r.cfg, r.disk.tables(), 3);
    const norm = (st: AgentState) => ({
      commands: [...st.commands.entries()].map(([k, c]) => [k, { ...c, stdin: { ...c.stdin, inFlight: false } }]),
      outbox: [...st.outbox.commands.entries()].map(([k, cb]) => [k, { ...cb, pinned: cb.pinned.map((p) => ({ ...p, sentOn: 0 })) }]),
      metadataUsed: st.metadataUsed,
      scriptBytes: st.scriptBytes,
      rawTotal: st.outbox.rawTotal,
      sessionPinnedBytes: st.outbox.sessionPinnedBytes,
      summarizing: st.outbox.summarizing,
      instanceId: st.instanceId,
    });
    expect(norm(back)).toEqual(norm(r.st));
    expect(back.commands.get("in")!.stdin.pending.map((p) => [p.seq, [...p.data]])).toEqual([
      [1, [1, 2]],
      [2, [3, 10]],
    ]);
    expect(back.commands.get("in")!.stdin.pendingBytes).toBe(4);
    expect(back.commands.get("scr")!.script!.chunks.map((c) => c.length)).toEqual([40, 30]);
    expect(back.metadataUsed).toBe(3 * base.metadataPerCommand);
    expect(back.scriptBytes).toBe(100);
  });

  it("R-O1: restore does not depend on the order in which storage returns rows", () => {
    const base = defaultAgentConfig("x").limits;
    const KiB = 1024;
    const r = new AgentRig({ maxRunning: 1, limits: { ...base, windowPerCommand: 96 * KiB, windowPerSession: 96 * KiB } });
    r.establish();
    r.run("run", argv("cat"));
    for (let i = 0; i < 3; i++) r.step({ type: "process_output", uuid: "run", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES).fill(i) });
    r.step({ type: "process_output", uuid: "run", stream: "stderr", data: enc("tail") });
    r.dispatch("in", { ...argv("cat"), stdinOpen: true });
    for (let i = 1; i <= 3; i++) r.frame(stdinWrite("in", BigInt(i), [i]));
    const body = new Uint8Array(90).map((_, i) => i);
    r.dispatch("scr", { program: { case: "script", value: { sizeBytes: 90n, sha256: sha(body), interpreter: "/bin/sh" } } });
    for (let o = 0; o < 90; o += 30) r.frame(chunk("scr", o, body.subarray(o, o + 30)));
    expect(r.st.outbox.commands.get("run")!.entries.length).toBeGreaterThan(1);
    expect(r.st.outbox.commands.get("run")!.pinned.length).toBeGreaterThan(1);
    const reversed = new Map([...r.disk.durable].map(([t, rows]) => [t, new Map([...rows].reverse())]));
    const a = restoreAgent(r.cfg, r.disk.tables(), 1);
    const b = restoreAgent(r.cfg, { get: (t) => reversed.get(t) }, 1);
    expect(new Set(b.commands.keys())).toEqual(new Set(a.commands.keys()));
    for (const uuid of ["run", "in", "scr"]) {
      expect(b.commands.get(uuid), uuid).toEqual(a.commands.get(uuid));
      expect(b.outbox.commands.get(uuid), uuid).toEqual(a.outbox.commands.get(uuid));
    }
    expect(b.commands.get("in")!.stdin.pending.map((p) => p.seq)).toEqual([1, 2, 3]);
    expect(b.commands.get("scr")!.script!.chunks).toEqual([body.subarray(0, 30), body.subarray(30, 60), body.subarray(60, 90)]);
    expect(b.outbox.commands.get("run")!.entries.map((e) => e.idx)).toEqual(a.outbox.commands.get("run")!.entries.map((e) => e.idx));
    expect(b.outbox.commands.get("run")!.pinned.map((p) => p.seq)).toEqual(a.outbox.commands.get("run")!.pinned.map((p) => p.seq));
    expect(a.outbox.commands.get("run")!.pinned.map((p) => p.seq)).toEqual([...a.outbox.commands.get("run")!.pinned.map((p) => p.seq)].sort((x, y) => x - y));
  });

  it("R-D2: after a restart a launched command is reported interrupted and its leftover process killed, never relaunched", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", argv("sleep", "100"), 555);
    r.autoDurable = false;
    r.dispatch("c2"); // launch authorization not durable: lost with the crash
    const back = new AgentRig();
    back.disk = r.disk;
    back.disk.pending = [];
    back.st = restoreAgent(r.cfg, back.disk.tables(), 9);
    const out = back.step({ type: "start" });
    expect(of(out, "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "c1", pid: 555 }]);
    expect(back.st.commands.get("c1")!.lifecycle).toBe(L.INTERRUPTED);
    expect(back.st.commands.has("c2")).toBe(false);
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    const snap = back.reconcile([]);
    // The unacknowledged RUNNING event is resent, then the new INTERRUPTED one.
    expect(lifecycles(snap, "c1").map((l) => [l.state, l.reason])).toEqual([
      [L.RUNNING, ""],
      [L.INTERRUPTED, "agent restarted while the command was running; outcome unknown"],
    ]);
    expect(of(back.log, "spawn")).toEqual([]);
    expect(back.st.instanceId).toBe(r.st.instanceId);
  });

  it("R-O8: a command interrupted by an agent restart gets an OutputIncomplete for both streams, with no byte count, right before INTERRUPTED", () => {
    // Found by the real chaos run (npm run chaos): after kill -9 of an agent, running
    // commands ended interrupted with no marker although their pipes were never drained.
    const r = new AgentRig();
    r.establish();
    r.run("c1", argv("sleep", "100"), 555);
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("partial") });
    const back = new AgentRig();
    back.disk = r.disk;
    back.disk.pending = [];
    back.st = restoreAgent(r.cfg, back.disk.tables(), 9);
    back.step({ type: "start" });
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    const evs = eventsIn(back.reconcile([]), "c1");
    const tail = evs.slice(-2);
    expect(tail.map((e) => e.event.case)).toEqual(["incomplete", "lifecycle"]);
    expect(tail[0]!.event.value).toMatchObject({ streams: [1, 2], reason: "agent restarted: capture pipes not drained to EOF" });
    expect((tail[1]!.event.value as { state: L }).state).toBe(L.INTERRUPTED);
    expect(Number(tail[1]!.eventSeq)).toBe(Number(tail[0]!.eventSeq) + 1);
  });

  it("R-S1 R-C4: a restart interruption ends the command as every other end does: pending stdin answered, its rows gone, the script file discarded", () => {
    // Issue 13 item 3: interruption at restart had its own copy of "finish"
    // that skipped both, so a durable stdin write was never answered and the
    // prepared script file stayed on disk.
    const r = new AgentRig();
    r.establish();
    const body = new TextEncoder().encode("cat\n");
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } }, stdinOpen: true });
    r.frame(chunk("s1", 0, body));
    expect(of(r.frame(commit("s1", body.length, sha(body))), "write_script")).toHaveLength(1);
    expect(of(r.step({ type: "script_prepared", uuid: "s1", path: "/tmp/rvbox/s1.sh" }), "spawn").map((x) => x.scriptPath)).toEqual(["/tmp/rvbox/s1.sh"]);
    r.step({ type: "process_started", uuid: "s1", pid: 777 });
    // Durable and handed to the process, but the crash comes before it is confirmed.
    expect(of(r.frame(stdinWrite("s1", 1n, [1, 2, 3])), "write_stdin")).toHaveLength(1);
    const back = new AgentRig();
    back.disk = r.disk;
    back.disk.pending = [];
    back.st = restoreAgent(r.cfg, back.disk.tables(), 9);
    expect(back.cmd("s1").stdin.pending.map((p) => p.seq)).toEqual([1]);
    const out = back.step({ type: "start" });
    expect(of(out, "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "s1", pid: 777 }]);
    expect(of(out, "discard_script")).toEqual([{ type: "discard_script", uuid: "s1", path: "/tmp/rvbox/s1.sh" }]);
    expect(back.cmd("s1")).toMatchObject({ phase: "done", lifecycle: L.INTERRUPTED, stdin: { pending: [], pendingBytes: 0 } });
    expect(agentRow(back.disk.durable, "stdin", stdinKey("s1", 1))).toBeUndefined();
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    const tail = eventsIn(back.reconcile([]), "s1").slice(-3);
    expect(tail.map((e) => e.event.case)).toEqual(["incomplete", "stdinAck", "lifecycle"]);
    expect(tail[1]!.event.value).toMatchObject({ writeSeq: 1n, closed: false, failure: "agent restarted before the write was confirmed" });
    expect((tail[2]!.event.value as { state: L }).state).toBe(L.INTERRUPTED);
  });

  it("R-O2: restored pinned events are only those above the acknowledged seq, and all are durable", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("a") });
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("b") });
    r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 2n } });
    // A stale pinned row an interrupted ack left behind is skipped on restore.
    r.disk.durable.get("event")!.set("c1/000000000001", { seq: 1, bytes: new Uint8Array([1]) });
    const back = restoreAgent(r.cfg, r.disk.tables(), 3);
    expect(back.outbox.commands.get("c1")!.pinned.map((p) => [p.seq, p.durable, p.sentOn])).toEqual([[3, true, 0]]);
    expect(back.outbox.sessionPinnedBytes).toBe(back.outbox.commands.get("c1")!.pinnedBytes);
  });
});

describe("agent invariants catch every corruption they check", () => {
  function healthy(): AgentRig {
    const r = new AgentRig({ maxRunning: 2 });
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.dispatch("c2", { program: { case: "script", value: { sizeBytes: 10n, sha256: new Uint8Array(32), interpreter: "/bin/sh" } } });
    agentInvariants(r.st);
    return r;
  }
  const cases: Array<[string, (r: AgentRig) => void, RegExp]> = [
    ["durable beyond the last persist", (r) => void (r.st.gate.durableThrough = r.st.gate.lastId + 1), /durable beyond last persist/],
    ["reconciled without a session", (r) => void ((r.st.session = { ...r.st.session, phase: "backoff", conn: 0, fence: null }), (r.st.reconciled = true)), /reconciled without a session/],
    ["tombstones over the bound", (r) => void ((r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, maxTombstones: 0 } }), r.st.tombstones.set("z", "h")), /tombstone ledger over its bound/],
    ["retained over the bound", (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, maxRetained: 1 } }), /retained commands over bound/],
    ["live and tombstoned", (r) => void r.st.tombstones.set("c1", "h"), /c1 both live and tombstoned/],
    ["done but not terminal", (r) => void (r.cmd("c1").phase = "done"), /c1 done but 4/],
    ["key mismatch", (r) => void (r.cmd("c1").uuid = "zz"), /command key mismatch/],
    ["command without outbox", (r) => void r.st.outbox.commands.delete("c2"), /c2 has no outbox/],
    ["outbox without command", (r) => void r.st.outbox.commands.set("ghost", { ...r.st.outbox.commands.get("c2")!, uuid: "ghost" }), /outbox ghost without command/],
    ["queued with a running lifecycle", (r) => void (r.cmd("c2").lifecycle = L.RUNNING), /c2 queued with lifecycle 4/],
    ["running with an accepted lifecycle", (r) => void (r.cmd("c1").lifecycle = L.ACCEPTED), /c1 running with lifecycle 3/],
    ["stdin pending out of order", (r) => void ((r.cmd("c1").stdin.next = 3), (r.cmd("c1").stdin.pending = [{ seq: 2, data: new Uint8Array(0), close: false }, { seq: 1, data: new Uint8Array(0), close: false }])), /c1 stdin pending order/],
    ["stdin pending at or beyond next", (r) => void (r.cmd("c1").stdin.pending = [{ seq: 1, data: new Uint8Array(0), close: false }]), /c1 stdin pending order/],
    ["stdin bytes drift", (r) => void (r.cmd("c1").stdin.pendingBytes = 1), /c1 stdin bytes drift/],
    ["stdin over budget", (r) => void ((r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, stdinPendingPerCommand: 0 } }), (r.cmd("c1").stdin.next = 2), (r.cmd("c1").stdin.pending = [{ seq: 1, data: new Uint8Array(1), close: false }]), (r.cmd("c1").stdin.pendingBytes = 1)), /c1 stdin over budget/],
    ["script received beyond size", (r) => void ((r.cmd("c2").script!.received = 11), (r.cmd("c2").script!.chunks = [new Uint8Array(11)])), /c2 script over size/],
    ["script chunks drift", (r) => void (r.cmd("c2").script!.received = 3), /c2 script chunks drift/],
    ["running over max", (r) => void (r.st.config = { ...r.st.config, maxRunning: 0 }), /running 1 over max 0/],
    ["metadata drift", (r) => void (r.st.metadataUsed += 1), /metadata budget drift/],
    ["metadata exceeded", (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, metadataBudget: 1 } }), /metadata budget exceeded/],
    ["script budget drift", (r) => void (r.st.scriptBytes = 9), /script budget drift\/exceeded/],
    ["script budget exceeded", (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, scriptTotal: 9 } }), /script budget drift\/exceeded/],
  ];
  for (const [name, corrupt, message] of cases) {
    it(`refuses: ${name}`, () => {
      const r = healthy();
      corrupt(r);
      expect(() => agentInvariants(r.st)).toThrow(InvariantViolation);
      expect(() => agentInvariants(r.st)).toThrow(message);
    });
  }

  it("accepts a done command with a terminal lifecycle and a prepared script whose chunks were dropped", () => {
    const r = healthy();
    r.exit("c1", 0);
    expect(r.cmd("c1").phase).toBe("done");
    r.cmd("c2").script!.path = "/scripts/c2";
    r.cmd("c2").script!.received = 10;
    agentInvariants(r.st);
  });
});

void MAX_CHUNK_BYTES;

// ------------------------------------------------------------------ commands

const stdinWrite = (uuid: string, seq: bigint, data: number[] | Uint8Array, appendNewline = false): Payload => ({
  case: "stdinWrite",
  value: { $typeName: "rvbox.v1.StdinWrite", issueUuid: uuid, writeSeq: seq, data: data instanceof Uint8Array ? data : new Uint8Array(data), appendNewline },
});
const closeStdin = (uuid: string, seq: bigint): Payload => ({ case: "closeStdin", value: { $typeName: "rvbox.v1.CloseStdin", issueUuid: uuid, writeSeq: seq } });
const signal = (uuid: string, rev: bigint, kind: SignalKind): Payload => ({ case: "signalCommand", value: { $typeName: "rvbox.v1.SignalCommand", issueUuid: uuid, commandRevision: rev, signal: kind } });
const chunk = (uuid: string, offset: number | bigint, data: Uint8Array, digest = sha(data)): Payload => ({
  case: "scriptChunk",
  value: { $typeName: "rvbox.v1.ScriptChunk", issueUuid: uuid, offset: BigInt(offset), data, sha256: digest },
});
const commit = (uuid: string, size: number, digest: Uint8Array): Payload => ({ case: "scriptCommit", value: { $typeName: "rvbox.v1.ScriptCommit", issueUuid: uuid, sizeBytes: BigInt(size), sha256: digest } });
const stdinAcks = (effects: AgentEffect[], uuid?: string) =>
  eventsIn(effects, uuid)
    .filter((e) => e.event.case === "stdinAck")
    .map((e) => {
      const v = e.event.value as { writeSeq: bigint; closed: boolean; failure: string };
      return [Number(v.writeSeq), v.closed, v.failure];
    });
const signalResults = (effects: AgentEffect[], uuid?: string) =>
  eventsIn(effects, uuid)
    .filter((e) => e.event.case === "signalResult")
    .map((e) => {
      const v = e.event.value as { signal: SignalKind; delivered: boolean; detail: string };
      return [Number(e.commandRevision), v.signal, v.delivered, v.detail];
    });

describe("stdin at the agent", () => {
  it("R-S1: stdin for an unknown command is NOT_FOUND without closing; for a tombstoned one it is silently dropped", () => {
    const r = new AgentRig();
    r.establish();
    expectRefused(r, r.frame(stdinWrite("nope", 1n, [1])), Code.NOT_FOUND, "unknown command nope");
    expectRefused(r, r.frame(closeStdin("nope", 1n)), Code.NOT_FOUND);
    r.run("old");
    r.exit("old", 0);
    r.ackAll("old");
    expect(sends(r.frame(stdinWrite("old", 1n, [1])))).toEqual([]);
    expect(sends(r.frame(closeStdin("old", 1n)))).toEqual([]);
    expect(r.st.session.phase).toBe("established");
  });

  it("R-S1: a write_seq beyond the next expected (or beyond 2^53) closes with SEQUENCE_VIOLATION; an earlier one is a duplicate", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [7]));
    const dup = r.frame(stdinWrite("c1", 1n, [8]));
    expect(of(dup, "write_stdin")).toEqual([]);
    expect(of(dup, "persist")).toEqual([]);
    expect(r.cmd("c1").stdin.next).toBe(2);
    expectClosed(r, r.frame(stdinWrite("c1", 3n, [9])), Code.SEQUENCE_VIOLATION, "stdin write_seq 3, expected 2");
    for (const [payload, name] of [
      [stdinWrite("c1", 2n ** 60n, [1]), "write"],
      [closeStdin("c1", 3n), "close"],
      [closeStdin("c1", 2n ** 60n), "close unsafe"],
    ] as const) {
      const x = new AgentRig();
      x.establish();
      x.run("c1", { ...argv("cat"), stdinOpen: true });
      x.frame(stdinWrite("c1", 1n, [7]));
      const out = x.frame(payload);
      expect(errorsIn(out).map((e) => e.error?.code), name).toEqual([Code.SEQUENCE_VIOLATION]);
      if (name === "close") expect(errorsIn(out)[0]!.error?.message).toBe("close_stdin write_seq 3, expected 2");
      expect(x.st.session.phase, name).toBe("backoff");
    }
  });

  it("R-S1: writes reach the process one at a time in order; the ack carries the executor's failure", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    const w1 = r.frame(stdinWrite("c1", 1n, [1, 2]));
    expect(of(w1, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 1, data: new Uint8Array([1, 2]) }]);
    const w2 = r.frame(stdinWrite("c1", 2n, [3], true));
    expect(of(w2, "write_stdin")).toEqual([]); // one write in flight at a time
    expect(r.cmd("c1").stdin.pendingBytes).toBe(4);
    const wrong = r.step({ type: "stdin_written", uuid: "c1", seq: 2 });
    expect(stdinAcks(wrong)).toEqual([]);
    const done1 = r.step({ type: "stdin_written", uuid: "c1", seq: 1, failure: "EPIPE" });
    expect(stdinAcks(done1, "c1")).toEqual([[1, false, "EPIPE"]]);
    expect(of(done1, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 2, data: new Uint8Array([3, 10]) }]);
    expect(of(done1, "persist").flatMap((p) => p.records)).toContainEqual({ table: "stdin", key: "c1/0000000000000001", value: null });
    const cl = r.frame(closeStdin("c1", 3n));
    expect(of(cl, "close_stdin")).toEqual([]);
    const done2 = r.step({ type: "stdin_written", uuid: "c1", seq: 2 });
    expect(stdinAcks(done2, "c1")).toEqual([[2, false, ""]]);
    expect(of(done2, "close_stdin")).toEqual([{ type: "close_stdin", uuid: "c1", seq: 3 }]);
    const done3 = r.step({ type: "stdin_written", uuid: "c1", seq: 3 });
    expect(stdinAcks(done3, "c1")).toEqual([[3, true, ""]]);
    expect(r.cmd("c1").stdin).toEqual({ next: 4, pending: [], pendingBytes: 0, inFlight: false, closed: true });
  });

  it("R-S1: writes before the launch wait; they reach the process once it has started", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    expect(of(r.frame(stdinWrite("c1", 1n, [5])), "write_stdin")).toEqual([]);
    expect(r.step({ type: "stdin_written", uuid: "c1", seq: 1 }).some((e) => e.type === "persist")).toBe(false); // not running: ignored
    const out = r.exit("busy", 0);
    expect(of(out, "spawn").map((s) => s.uuid)).toEqual(["c1"]);
    const started = r.step({ type: "process_started", uuid: "c1", pid: 5 });
    expect(of(started, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 1, data: new Uint8Array([5]) }]);
  });

  it("R-S1: without open stdin, or after it was closed, a write is acknowledged with a failure and consumes its seq", () => {
    const r = new AgentRig();
    r.establish();
    r.run("shut", argv("true"));
    const a = r.frame(stdinWrite("shut", 1n, [1]));
    expect(stdinAcks(a, "shut")).toEqual([[1, false, "stdin is not open for this command"]]);
    expect(r.cmd("shut").stdin.next).toBe(2);
    r.run("open", { ...argv("cat"), stdinOpen: true });
    r.frame(closeStdin("open", 1n));
    r.step({ type: "stdin_written", uuid: "open", seq: 1 });
    const b = r.frame(stdinWrite("open", 2n, [1]));
    expect(stdinAcks(b, "open")).toEqual([[2, false, "stdin already closed"]]);
    expect(of(b, "write_stdin")).toEqual([]);
  });

  it("R-S3: CloseStdin on a closed or never-open stdin is acknowledged as closed; on a done command it only consumes the seq", () => {
    const r = new AgentRig();
    r.establish();
    r.run("never", argv("true"));
    const a = r.frame(closeStdin("never", 1n));
    expect(stdinAcks(a, "never")).toEqual([[1, true, ""]]);
    expect(r.cmd("never").stdin.closed).toBe(true);
    const b = r.frame(closeStdin("never", 2n));
    expect(stdinAcks(b, "never")).toEqual([[2, true, ""]]);
    expect(of(b, "close_stdin")).toEqual([]);
    r.exit("never", 0);
    const c = r.frame(closeStdin("never", 3n));
    expect(stdinAcks(c)).toEqual([]);
    expect(r.cmd("never").stdin.next).toBe(4);
    const d = r.frame(stdinWrite("never", 4n, [1]));
    expect(stdinAcks(d)).toEqual([]);
    expect(r.cmd("never").stdin.next).toBe(5);
    expect(agentRow(r.disk.durable, "command", "never")!.stdin.next).toBe(5);
  });

  it("R-W2 R-S1: the pending stdin bound is inclusive; past it the write is CAPACITY without closing and its seq is not consumed", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 1, limits: { ...base, stdinPendingPerCommand: 4 } });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1, 2, 3], true)); // 3 + newline = exactly 4
    expect(r.cmd("c1").stdin.pendingBytes).toBe(4);
    const full = r.frame(stdinWrite("c1", 2n, [9]));
    expectRefused(r, full, Code.CAPACITY);
    expect(errorsIn(full)[0]!.error?.message).toBe("stdin buffer for c1 is full; resend later");
    expect(r.cmd("c1").stdin.next).toBe(2);
  });

  it("R-S1: a command that ends with writes still pending answers each of them as failed, then ends", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1]));
    r.frame(closeStdin("c1", 2n));
    const out = r.frame(signal("c1", 2n, SignalKind.CANCEL));
    const evs = eventsIn(out, "c1").map((e) => e.event.case);
    expect(evs).toEqual(["stdinAck", "stdinAck", "lifecycle"]);
    expect(stdinAcks(out, "c1")).toEqual([
      [1, false, "command ended before the write"],
      [2, true, "command ended before the write"],
    ]);
    const recs = of(out, "persist").flatMap((p) => p.records);
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000001", value: null });
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000002", value: null });
    expect(r.cmd("c1").stdin).toMatchObject({ pending: [], pendingBytes: 0, inFlight: false });
  });
});

describe("signals at the agent", () => {
  it("R-S4: a signal for an unknown command is NOT_FOUND; revision 0 or beyond 2^53 closes; an unknown kind is VALIDATION", () => {
    const r = new AgentRig();
    r.establish();
    expectRefused(r, r.frame(signal("nope", 2n, SignalKind.USER1)), Code.NOT_FOUND);
    r.run("c1");
    expectRefused(r, r.frame(signal("c1", 2n, SignalKind.UNSPECIFIED)), Code.VALIDATION);
    expectRefused(r, r.frame(signal("c1", 2n, 99 as SignalKind)), Code.VALIDATION, "unknown signal 99");
    expect(r.cmd("c1").lastSignalRevision).toBe(0);
    expectClosed(r, r.frame(signal("c1", 0n, SignalKind.USER1)), Code.SEQUENCE_VIOLATION, "signal without a usable revision");
    const u = new AgentRig();
    u.establish();
    u.run("c1");
    expectClosed(u, u.frame(signal("c1", 2n ** 60n, SignalKind.USER1)), Code.SEQUENCE_VIOLATION);
  });

  it("R-S4: a repeated or older revision is not applied again; signals to a done command are dropped", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    expect(of(r.frame(signal("c1", 3n, SignalKind.USER1)), "signal")).toHaveLength(1);
    const same = r.frame(signal("c1", 3n, SignalKind.USER2));
    const older = r.frame(signal("c1", 2n, SignalKind.USER2));
    expect([...of(same, "signal"), ...of(older, "signal")]).toEqual([]);
    expect([...signalResults(same), ...signalResults(older)]).toEqual([]);
    expect(r.cmd("c1").revision).toBe(3);
    r.exit("c1", 1);
    const late = r.frame(signal("c1", 4n, SignalKind.KILL));
    expect(of(late, "signal")).toEqual([]);
    expect(sends(late)).toEqual([]);
  });

  it("R-S4: every ending signal cancels a queued command with that revision; USER1/USER2 only report not running yet", () => {
    const kinds: Array<[SignalKind, string]> = [
      [SignalKind.CANCEL, "cancel"],
      [SignalKind.TERMINATE, "terminate"],
      [SignalKind.KILL, "kill"],
      [SignalKind.INTERRUPT, "interrupt"],
      [SignalKind.HANGUP, "hangup"],
      [SignalKind.QUIT, "quit"],
    ];
    for (const [kind, name] of kinds) {
      const r = new AgentRig({ maxRunning: 0 });
      r.establish();
      r.dispatch("q");
      const out = r.frame(signal("q", 5n, kind));
      const ev = eventsIn(out, "q").at(-1)!;
      expect(Number(ev.commandRevision), name).toBe(5);
      expect(ev.event.value, name).toMatchObject({ state: L.CANCELLED, reason: `${name} before launch` });
      expect(r.cmd("q").phase).toBe("done");
      expect(signalResults(out)).toEqual([]);
    }
    for (const kind of [SignalKind.USER1, SignalKind.USER2]) {
      const r = new AgentRig({ maxRunning: 0 });
      r.establish();
      r.dispatch("q");
      const out = r.frame(signal("q", 4n, kind));
      expect(signalResults(out, "q")).toEqual([[4, kind, false, "not running yet"]]);
      expect(r.cmd("q").phase).toBe("queued");
      expect(r.cmd("q").revision).toBe(4);
      expect(r.cmd("q").lastSignalRevision).toBe(4);
      expect(agentRow(r.disk.durable, "command", "q")!.revision).toBe(4);
    }
  });

  it("R-S4: while launching an ending signal is remembered and decides the launch: cancelled before launch, never spawned", () => {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    expect(r.cmd("c1").phase).toBe("launching");
    const u = r.frame(signal("c1", 2n, SignalKind.USER2));
    expect(signalResults(u)).toEqual([]); // not durable yet
    r.frame(signal("c1", 3n, SignalKind.TERMINATE));
    expect(r.cmd("c1").cancelRevision).toBe(3);
    r.autoDurable = true; // the cancellation's own persist is then durable too
    const out = r.flush();
    expect(of(out, "spawn")).toEqual([]);
    expect(signalResults(out, "c1")).toEqual([[2, SignalKind.USER2, false, "not running yet"]]);
    const last = eventsIn(out, "c1").at(-1)!;
    expect(Number(last.commandRevision)).toBe(3);
    expect(last.event.value).toMatchObject({ state: L.CANCELLED, reason: "cancelled before launch" });
  });

  it("R-S4: an ending signal after the spawn but before the process reported its start is delivered as CANCEL once it starts", () => {
    const r = new AgentRig();
    r.establish();
    const d = r.dispatch("c1");
    expect(of(d, "spawn")).toHaveLength(1);
    expect(r.cmd("c1").phase).toBe("launching");
    r.frame(signal("c1", 2n, SignalKind.INTERRUPT));
    const started = r.step({ type: "process_started", uuid: "c1", pid: 31 });
    expect(of(started, "signal")).toEqual([{ type: "signal", uuid: "c1", signal: SignalKind.CANCEL, revision: 2 }]);
    const out = r.exit("c1", 130);
    const last = lifecycles(out, "c1").at(-1)!;
    expect(last).toMatchObject({ state: L.CANCELLED, exitCode: 130, reason: "ended after an operator request" });
  });

  it("R-S4: a signal to a running process is delivered and reported; after an ending one a non-zero exit is cancelled and a zero exit still succeeded", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const u = r.frame(signal("c1", 2n, SignalKind.USER1));
    expect(of(u, "signal")).toEqual([{ type: "signal", uuid: "c1", signal: SignalKind.USER1, revision: 2 }]);
    expect(signalResults(u, "c1")).toEqual([[2, SignalKind.USER1, true, ""]]);
    expect(r.cmd("c1").cancelRevision).toBe(0);
    r.frame(signal("c1", 3n, SignalKind.TERMINATE));
    expect(r.cmd("c1").cancelRevision).toBe(3);
    const out = r.exit("c1", null, { signal: "SIGTERM" });
    const ev = eventsIn(out, "c1").at(-1)!;
    expect(Number(ev.commandRevision)).toBe(3);
    expect(ev.event.value).toMatchObject({ state: L.CANCELLED, signalName: "SIGTERM", reason: "ended after an operator request" });
    expect((ev.event.value as { exitCode?: number }).exitCode).toBeUndefined();

    const z = new AgentRig();
    z.establish();
    z.run("c1");
    z.frame(signal("c1", 2n, SignalKind.QUIT));
    const ok = z.exit("c1", 0);
    expect(lifecycles(ok, "c1").at(-1)).toMatchObject({ state: L.SUCCEEDED, exitCode: 0 });
  });
});

describe("process exits and output", () => {
  it("R-O8: an undrained pipe yields one incomplete event naming the streams before the terminal lifecycle", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.exit("c1", 0, { incompleteStreams: ["stderr", "stdout"] });
    const evs = eventsIn(out, "c1");
    expect(evs.map((e) => e.event.case)).toEqual(["incomplete", "lifecycle"]);
    expect(evs[0]!.event.value).toMatchObject({ streams: [2, 1], reason: "capture pipe not drained to EOF (a descendant may still hold it open)" });
    const none = new AgentRig();
    none.establish();
    none.run("c2");
    expect(eventsIn(none.exit("c2", 0), "c2").map((e) => e.event.case)).toEqual(["lifecycle"]);
  });

  it("R-O8: exit 0 succeeds; a timeout, a non-zero code or a signal fails with what is known", () => {
    const cases: Array<[number | null, string | null, boolean, Record<string, unknown>]> = [
      [0, null, false, { state: L.SUCCEEDED, exitCode: 0, reason: "", signalName: "" }],
      [0, null, true, { state: L.FAILED, exitCode: 0, reason: "timed out" }],
      [3, null, false, { state: L.FAILED, exitCode: 3, reason: "", signalName: "" }],
      [null, "SIGSEGV", false, { state: L.FAILED, signalName: "SIGSEGV", reason: "" }],
      [null, "SIGKILL", true, { state: L.FAILED, signalName: "SIGKILL", reason: "timed out" }],
    ];
    for (const [code, sig, timedOut, want] of cases) {
      const r = new AgentRig();
      r.establish();
      r.run("c1");
      const l = lifecycles(r.exit("c1", code, { signal: sig, timedOut }), "c1").at(-1)!;
      expect(l).toMatchObject(want);
      if (code === null) expect(l.exitCode).toBeUndefined();
    }
  });

  it("R-O8: an exit while still launching implies the start (pid 0); exits of unknown or finished commands are ignored", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    const out = r.exit("c1", 0);
    expect(lifecycles(out, "c1").map((l) => l.state)).toEqual([L.RUNNING, L.SUCCEEDED]);
    const again = r.exit("c1", 1);
    expect(eventsIn(again)).toEqual([]);
    expect(r.exit("ghost", 0).some((e) => e.type === "persist")).toBe(false);
    expect(r.cmd("c1").pid).toBe(0);
  });

  it("R-O1: output is taken only while running and is cut into chunks of at most 64 KiB with continuous offsets", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.dispatch("c0");
    r.dispatch("q");
    expect(r.step({ type: "process_output", uuid: "q", stream: "stdout", data: new Uint8Array(5) }).some((e) => e.type === "persist")).toBe(false);
    r.step({ type: "process_started", uuid: "c0", pid: 1 });
    const data = new Uint8Array(MAX_CHUNK_BYTES + 10).fill(65);
    const out = r.step({ type: "process_output", uuid: "c0", stream: "stderr", data });
    const chunks = eventsIn(out, "c0")
      .filter((e) => e.event.case === "output")
      .map((e) => {
        const v = e.event.value as { stream: number; streamOffset: bigint; originalSize: number };
        return [v.stream, Number(v.streamOffset), v.originalSize];
      });
    expect(chunks).toEqual([
      [2, 0, MAX_CHUNK_BYTES],
      [2, MAX_CHUNK_BYTES, 10],
    ]);
    r.exit("c0", 0);
    expect(r.step({ type: "process_output", uuid: "c0", stream: "stdout", data: new Uint8Array(5) }).some((e) => e.type === "persist")).toBe(false);
  });

  it("R-W10: reasons are cut to 1024 characters and signal names to 64", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    const out = r.step({ type: "spawn_failed", uuid: "c1", reason: "x".repeat(5000) });
    const l = lifecycles(out, "c1").at(-1)!;
    expect(l.reason).toHaveLength(1024);
    expect(l.reason.startsWith("could not launch: xxx")).toBe(true);
    expect((l.error as { message?: string }).message).toBe(l.reason);
    const s = new AgentRig();
    s.establish();
    s.run("c2");
    expect(lifecycles(s.exit("c2", null, { signal: "S".repeat(100) }), "c2").at(-1)!.signalName).toBe("S".repeat(64));
  });
});

describe("scripts at the agent", () => {
  const body = new Uint8Array(100).map((_, i) => (i * 13) % 251);
  const scriptDesc = (digest = sha(body), size = 100): SpecInit => ({ program: { case: "script", value: { sizeBytes: BigInt(size), sha256: digest, interpreter: "/bin/sh" } } });
  const progress = (effects: AgentEffect[]) =>
    eventsIn(effects)
      .filter((e) => e.event.case === "scriptUpload")
      .map((e) => {
        const v = e.event.value as { receivedBytes: bigint; complete: boolean };
        return [Number(v.receivedBytes), v.complete];
      });
  function withScript(over: Partial<AgentConfig> = {}, desc = scriptDesc()): AgentRig {
    const r = new AgentRig(over);
    r.establish();
    r.dispatch("s1", desc);
    expect(r.cmd("s1").phase).toBe("queued");
    return r;
  }

  it("R-C2: script frames for an argv command are VALIDATION, for an unknown one NOT_FOUND; neither closes", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    expectRefused(r, r.frame(chunk("c1", 0, body)), Code.VALIDATION);
    expect(errorsIn(r.frame(commit("c1", 100, sha(body))))[0]!.error).toMatchObject({ code: Code.VALIDATION, message: "c1 is not a script command" });
    expectRefused(r, r.frame(chunk("nope", 0, body)), Code.NOT_FOUND);
    expectRefused(r, r.frame(commit("nope", 100, sha(body))), Code.NOT_FOUND);
  });

  it("R-C3: chunks append in order with a durable cumulative progress event each; an empty chunk changes nothing", () => {
    const r = withScript();
    const a = r.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(progress(a)).toEqual([[40, false]]);
    expect(of(a, "persist").flatMap((p) => p.records).filter((x) => x.table === "chunk").map((x) => x.key)).toEqual(["s1/0000000000000000"]);
    const e = r.frame(chunk("s1", 40, new Uint8Array(0)));
    expect(progress(e)).toEqual([]);
    const b = r.frame(chunk("s1", 40, body.subarray(40, 100)));
    expect(progress(b)).toEqual([[100, false]]);
    expect(r.cmd("s1").script!.received).toBe(100);
  });

  it("R-C3: a resent chunk with the same bytes is ignored; different bytes, or one reaching past what was received, reject", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(sends(r.frame(chunk("s1", 0, body.subarray(0, 40))))).toEqual([]);
    expect(sends(r.frame(chunk("s1", 10, body.subarray(10, 30))))).toEqual([]);
    expect(r.cmd("s1").script!.received).toBe(40);
    const diff = new Uint8Array(body.subarray(10, 30));
    diff[3] = diff[3]! ^ 1;
    const out = r.frame(chunk("s1", 10, diff));
    expect(lifecycles(out, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script chunk at 10 differs from the bytes already received", error: expect.objectContaining({ code: Code.VALIDATION }) })]);
    const o = withScript();
    o.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(lifecycles(o.frame(chunk("s1", 30, body.subarray(30, 50))), "s1")[0]!.state).toBe(L.REJECTED);
  });

  it("R-C3: a chunk after a gap is SEQUENCE_VIOLATION without closing; an impossible offset closes", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 40)));
    const out = r.frame(chunk("s1", 41, body.subarray(41, 50)));
    expectRefused(r, out, Code.SEQUENCE_VIOLATION);
    expect(errorsIn(out)[0]!.error?.message).toBe("script chunk at 41, expected 40");
    const u = withScript();
    expectClosed(u, u.frame(chunk("s1", 2n ** 60n, body.subarray(0, 10))), Code.SEQUENCE_VIOLATION, "script chunk offset out of range");
  });

  it("R-T2 R-C3: a chunk over 64 KiB is PAYLOAD_TOO_LARGE and closes; exactly 64 KiB is accepted", () => {
    const big = new Uint8Array(MAX_CHUNK_BYTES + 1).fill(1);
    const r = withScript({}, scriptDesc(sha(big), big.length));
    expectClosed(r, r.frame(chunk("s1", 0, big)), Code.PAYLOAD_TOO_LARGE, `script chunk of ${MAX_CHUNK_BYTES + 1} bytes`);
    const ok = withScript({}, scriptDesc(sha(big), big.length));
    expect(progress(ok.frame(chunk("s1", 0, big.subarray(0, MAX_CHUNK_BYTES))))).toEqual([[MAX_CHUNK_BYTES, false]]);
  });

  it("R-C4: a chunk whose digest does not match, or bytes past the declared size, reject the command before any launch", () => {
    const r = withScript();
    const out = r.frame(chunk("s1", 0, body.subarray(0, 40), sha("something else")));
    expect(lifecycles(out, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script chunk at 0: SHA-256 mismatch" })]);
    const long = withScript({}, scriptDesc(sha(body), 50));
    long.frame(chunk("s1", 0, body.subarray(0, 40)));
    const past = long.frame(chunk("s1", 40, body.subarray(40, 51)));
    expect(lifecycles(past, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script longer than its declared 50 bytes" })]);
    // exactly the declared size is fine
    const exact = withScript({}, scriptDesc(sha(body.subarray(0, 50)), 50));
    exact.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(progress(exact.frame(chunk("s1", 40, body.subarray(40, 50))))).toEqual([[50, false]]);
    expect(of(r.log, "spawn")).toEqual([]);
  });

  it("R-C3: a commit before every byte arrived is SEQUENCE_VIOLATION (no close); a wrong size or digest rejects", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 40)));
    const early = r.frame(commit("s1", 100, sha(body)));
    expectRefused(r, early, Code.SEQUENCE_VIOLATION);
    expect(errorsIn(early)[0]!.error?.message).toBe("script commit at 40 of 100 bytes");
    const size = r.frame(commit("s1", 99, sha(body)));
    expect(lifecycles(size, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script commit size 99 != declared 100" })]);

    const d = withScript();
    d.frame(chunk("s1", 0, body));
    expect(lifecycles(d.frame(commit("s1", 100, sha("x"))), "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script SHA-256 mismatch" })]);

    // Every chunk matches its own digest but the whole does not match the descriptor.
    const w = withScript({}, scriptDesc(sha("another script")));
    w.frame(chunk("s1", 0, body));
    expect(lifecycles(w.frame(commit("s1", 100, sha("another script"))), "s1")[0]).toMatchObject({ state: L.REJECTED, reason: "script SHA-256 mismatch" });
  });

  it("R-C2: a committed script is written out, prepared, then launched from its path; its journaled chunks are deleted", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 60)));
    r.frame(chunk("s1", 60, body.subarray(60)));
    const out = r.frame(commit("s1", 100, sha(body)));
    expect(progress(out)).toEqual([[100, true]]);
    expect(r.cmd("s1").script!.committed).toBe(true);
    expect(r.cmd("s1").phase).toBe("preparing");
    expect(of(out, "write_script")).toEqual([{ type: "write_script", uuid: "s1", data: body, sha256: sha(body) }]);
    // Later frames for a committed script change nothing.
    expect(sends(r.frame(chunk("s1", 100, new Uint8Array([1]))))).toEqual([]);
    expect(sends(r.frame(commit("s1", 100, sha(body))))).toEqual([]);
    expect(r.step({ type: "script_failed", uuid: "other", reason: "x" }).some((e) => e.type === "persist")).toBe(false);
    const prep = r.step({ type: "script_prepared", uuid: "s1", path: "/run/s1.sh" });
    expect(of(prep, "persist").flatMap((p) => p.records).filter((x) => x.table === "chunk")).toEqual([
      { table: "chunk", key: "s1/0000000000000000", value: null },
      { table: "chunk", key: "s1/0000000000000060", value: null },
    ]);
    expect(of(prep, "spawn")).toEqual([expect.objectContaining({ uuid: "s1", scriptPath: "/run/s1.sh" })]);
    expect(r.cmd("s1").script).toMatchObject({ path: "/run/s1.sh", chunks: [] });
    // A second report is ignored (not preparing any more).
    expect(r.step({ type: "script_prepared", uuid: "s1", path: "/elsewhere" }).some((e) => e.type === "spawn")).toBe(false);
    r.step({ type: "process_started", uuid: "s1", pid: 8 });
    const fin = r.exit("s1", 0);
    expect(of(fin, "discard_script")).toEqual([{ type: "discard_script", uuid: "s1", path: "/run/s1.sh" }]);
  });

  it("R-C4: a preparation failure rejects; a command cancelled during upload deletes its journaled chunks", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body));
    r.frame(commit("s1", 100, sha(body)));
    const out = r.step({ type: "script_failed", uuid: "s1", reason: "EACCES" });
    expect(lifecycles(out, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "could not prepare script: EACCES", error: expect.objectContaining({ code: Code.VALIDATION }) })]);
    expect(r.st.scriptBytes).toBe(100); // released only when retired

    const c = withScript();
    c.frame(chunk("s1", 0, body.subarray(0, 30)));
    const cancel = c.frame(signal("s1", 2n, SignalKind.CANCEL));
    expect(of(cancel, "persist").flatMap((p) => p.records)).toContainEqual({ table: "chunk", key: "s1/0000000000000000", value: null });
    expect(c.cmd("s1").script!.chunks).toEqual([]);
    expect(of(cancel, "discard_script")).toEqual([]);
    expect(sends(c.frame(chunk("s1", 30, body.subarray(30))))).toEqual([]); // done: ignored
    c.ackAll("s1");
    expect(c.st.scriptBytes).toBe(0);
  });

  it("R-C2: preparing a script occupies a running slot, and a terminated prepared script's file is discarded", () => {
    const r = withScript({ maxRunning: 1 });
    r.frame(chunk("s1", 0, body));
    r.frame(commit("s1", 100, sha(body)));
    r.dispatch("c2");
    expect(r.cmd("c2").phase).toBe("queued");
    r.step({ type: "script_prepared", uuid: "s1", path: "/p/s1" });
    expect(r.cmd("s1").phase).toBe("launching");
    const out = r.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["s1"], discardLocalTerminalIssueUuids: [] } });
    expect(of(out, "discard_script")).toEqual([{ type: "discard_script", uuid: "s1", path: "/p/s1" }]);
    expect(of(out, "signal")).toEqual([]); // launching, no pid yet
    expect(of(out, "spawn").map((s) => s.uuid)).toEqual(["c2"]);
  });

  it("R-D1: a preparing script's queue expiry still counts as a deadline and expires it", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("s1", scriptDesc(), { expiry: T0 + 3_000 });
    r.frame(chunk("s1", 0, body));
    const out = r.frame(commit("s1", 100, sha(body)));
    expect(r.cmd("s1").phase).toBe("preparing");
    expect(of(out, "wake").at(-1)!.at).toBe(T0 + 3_000);
    r.now = T0 + 3_000;
    r.step({ type: "tick" });
    expect(r.cmd("s1").lifecycle).toBe(L.EXPIRED);
    expect(r.step({ type: "script_prepared", uuid: "s1", path: "/p" }).some((e) => e.type === "spawn")).toBe(false);
  });
});

describe("more agent edges", () => {
  it("R-W6 R-O7: a restart restores unsent output entries, truncation markers, raw accounting and the summarizing state", () => {
    const base = defaultAgentConfig("x").limits;
    const KiB = 1024;
    const limits = { ...base, windowPerCommand: 96 * KiB, windowPerSession: 96 * KiB, rawHigh: 100 * KiB, rawLow: 50 * KiB };
    const r = new AgentRig({ limits });
    r.establish();
    r.run("c1");
    for (let i = 0; i < 3; i++) r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES).fill(65 + i) });
    r.step({ type: "process_output", uuid: "c1", stream: "stderr", data: new Uint8Array(10) });
    const cb = r.st.outbox.commands.get("c1")!;
    expect(cb.entries.map((e) => e.kind)).toEqual(["output", "output", "truncation"]);
    expect(r.st.outbox.summarizing).toBe(true);
    const back = restoreAgent(r.cfg, r.disk.tables(), 3);
    expect(back.outbox.commands.get("c1")!.entries).toEqual(cb.entries);
    expect(back.outbox.commands.get("c1")!.rawBytes).toBe(cb.rawBytes);
    expect(back.outbox.rawTotal).toBe(2 * MAX_CHUNK_BYTES);
    expect(back.outbox.summarizing).toBe(true);
    // Below the high watermark a restored outbox is not summarizing.
    const low = new AgentRig({ limits: { ...limits, rawHigh: 2 * MAX_CHUNK_BYTES, rawLow: 0 } });
    low.establish();
    low.run("c1");
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    expect(low.st.outbox.rawTotal).toBe(2 * MAX_CHUNK_BYTES);
    expect(restoreAgent(low.cfg, low.disk.tables(), 3).outbox.summarizing).toBe(false);
  });

  it("R-D1: before start nothing is admitted or launched; a command queued before a restart launches after it (it was never started)", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("waiting");
    expect(r.cmd("waiting").phase).toBe("queued");
    const back = new AgentRig({ maxRunning: 2 }); // a slot is free even before "busy" is settled
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 4);
    const early = back.step({ type: "tick" });
    expect(early.filter((e) => e.type === "persist")).toEqual([]);
    expect(back.st.commands.get("waiting")!.phase).toBe("queued");
    const started = back.step({ type: "start" });
    expect(of(started, "kill_orphan").map((k) => k.uuid)).toEqual(["busy"]);
    expect(back.st.commands.get("waiting")!.phase).toBe("launching");
    expect(of(started, "spawn").map((s) => s.uuid)).toEqual(["waiting"]);
    expect(of(started, "persist").flatMap((p) => p.records).some((x) => x.table === "meta")).toBe(false); // the instance id is kept, not rewritten
    // The interrupted command is done like any other: once acknowledged it becomes a tombstone.
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    back.reconcile([]);
    back.ackAll("busy");
    expect(back.st.tombstones.has("busy")).toBe(true);
  });

  it("R-H1: the wake never lies in the past, and a queued command without expiry adds no deadline", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    const q = r.dispatch("q");
    expect(of(q, "wake").at(-1)!.at).toBe(T0 + 10_000);
    r.now = T0 + 100;
    const late = r.dispatch("late", argv("true"), { expiry: T0 + 50 });
    expect(of(late, "wake").at(-1)!.at).toBe(T0 + 100);
  });

  it("R-O2: an event already sent on this session is not sent again until a new session asks", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: enc("x") });
    expect(eventsIn(out, "c1").map((e) => e.eventSeq)).toEqual([2n]);
    expect(eventsIn(r.step({ type: "tick" }))).toEqual([]);
    expect(eventsIn(r.step({ type: "activity", conn: r.st.session.conn }))).toEqual([]);
  });

  it("R-S4: a signal revision below the command's revision is applied but never lowers the revision", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1", argv("true"), { rev: 5n });
    r.step({ type: "process_started", uuid: "c1", pid: 3 });
    const out = r.frame(signal("c1", 2n, SignalKind.USER1));
    expect(signalResults(out, "c1")).toEqual([[2, SignalKind.USER1, true, ""]]);
    expect(r.cmd("c1").revision).toBe(5);
    expect(r.cmd("c1").lastSignalRevision).toBe(2);
    expect(accepts(r.dispatch("c1", argv("true"), { rev: 5n }))[0]!.commandRevision).toBe(5n);
  });

  it("R-D11: a command terminated by the reconcile result drops its pending stdin rows, chunks, events and record", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1]));
    r.frame(stdinWrite("c1", 2n, [2]));
    const out = r.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] } });
    const recs = of(out, "persist").flatMap((p) => p.records);
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000001", value: null });
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000002", value: null });
    expect(recs).toContainEqual({ table: "command", key: "c1", value: null });
    expect(r.disk.durable.get("stdin")?.size ?? 0).toBe(0);
    expect(r.disk.durable.get("command")?.has("c1")).toBe(false);
    expect(r.st.metadataUsed).toBe(defaultAgentConfig("x").limits.metadataPerCommand);
  });
});

const enc = (s: string) => new TextEncoder().encode(s);

describe("traces other tools read", () => {
  it("R-W10: the agent traces established, protocol_failure and session_lost with the details the daemon log and the simulator use", () => {
    const r = new AgentRig();
    r.register();
    const est = r.welcome(3, "s3");
    expect(of(est, "trace").filter((t) => t.event === "established").map((t) => t.detail)).toEqual([{ conn: 1, generation: 3 }]);
    const bad = r.frame({ case: "clientCapacity", value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 0, maxQueuedCommands: 0 } });
    expect(of(bad, "trace").filter((t) => t.event === "protocol_failure").map((t) => t.detail)).toEqual([{ code: "PROTOCOL_ERROR", message: "unexpected clientCapacity from server" }]);
    expect(of(bad, "trace").filter((t) => t.event === "session_lost").map((t) => t.detail)).toEqual([{ conn: 1, reason: "PROTOCOL_ERROR: unexpected clientCapacity from server" }]);
    expect(of(bad, "close")).toEqual([{ type: "close", conn: 1, reason: "PROTOCOL_ERROR: unexpected clientCapacity from server" }]);
  });
});

describe("agent edges found by the mutation run", () => {
  it("R-O1: restore ignores rows whose command or outbox is gone, and an empty ledger starts the counter at 0", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const durable = structuredClone(r.disk.durable);
    durable.set("tombstone", new Map());
    durable.set("chunk", new Map<string, unknown>([["ghost/0000000000000000", { data: new Uint8Array([1]) }], ["c1/0000000000000000", { data: new Uint8Array([2]) }]]));
    durable.set("stdin", new Map<string, unknown>([["ghost/0000000000000001", { seq: 1, data: new Uint8Array([1]), close: false }]]));
    durable.get("entry")?.set("ghost/000000000001", { idx: 1, kind: "meta", event: {}, revision: 1, time: 0 });
    durable.get("event")!.set("ghost/000000000001", { seq: 1, bytes: new Uint8Array([1]) });
    const back = restoreAgent(r.cfg, { get: (t) => durable.get(t) }, 1);
    expect(back.tombstoneSeq).toBe(0);
    expect([...back.commands.keys()]).toEqual(["c1"]);
    expect(back.commands.get("c1")!.script).toBeNull();
    expect([...back.outbox.commands.keys()]).toEqual(["c1"]);
    agentInvariants(back);
  });

  it("R-O2: a stored event at exactly the acknowledged seq is not restored as pinned", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: enc("a") });
    r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 1n } });
    r.disk.durable.get("event")!.set("c1/000000000001", { seq: 1, bytes: new Uint8Array([9]) });
    const back = restoreAgent(r.cfg, r.disk.tables(), 2);
    expect(back.outbox.commands.get("c1")!.pinned.map((p) => p.seq)).toEqual([2]);
  });

  it("R-S1: stdin that waited across a restart reaches the process once the command launches", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [7, 8]));
    r.frame(closeStdin("c1", 2n));
    const back = new AgentRig({ maxRunning: 1 });
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 5);
    expect(back.st.commands.get("c1")!.stdin).toEqual({ next: 3, pending: [{ seq: 1, data: new Uint8Array([7, 8]), close: false }, { seq: 2, data: new Uint8Array(0), close: true }], pendingBytes: 2, inFlight: false, closed: true });
    const started = back.step({ type: "start" });
    expect(of(started, "spawn").map((x) => x.uuid)).toEqual(["c1"]);
    const run = back.step({ type: "process_started", uuid: "c1", pid: 9 });
    expect(of(run, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 1, data: new Uint8Array([7, 8]) }]);
    expect(of(back.step({ type: "stdin_written", uuid: "c1", seq: 1 }), "close_stdin")).toEqual([{ type: "close_stdin", uuid: "c1", seq: 2 }]);
  });

  it("R-O1: the command record carries neither stdin data nor script chunks: those have their own rows", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1, 2, 3]));
    const body = new Uint8Array(10).fill(4);
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 10n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body.subarray(0, 5)));
    expect(agentRow(r.disk.durable, "command", "c1")!.stdin).toEqual({ next: 2, pending: [], pendingBytes: 0, inFlight: false, closed: false });
    expect(agentRow(r.disk.durable, "command", "s1")!.script).toEqual({ size: 10, sha256: Buffer.from(sha(body)).toString("hex"), received: 5, chunks: [], committed: false, path: "" });
    expect(agentRow(r.disk.durable, "stdin", stdinKey("c1", 1))).toEqual({ seq: 1, data: new Uint8Array([1, 2, 3]), close: false });
  });

  it("R-O8: only a lifecycle with an error code carries an error; a clean exit has none", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const ok = lifecycles(r.exit("c1", 0), "c1").at(-1)!;
    expect(ok.error).toBeUndefined();
    const f = new AgentRig();
    f.establish();
    f.dispatch("c2");
    const bad = lifecycles(f.step({ type: "spawn_failed", uuid: "c2", reason: "" }), "c2").at(-1)!;
    expect(bad.error).toMatchObject({ code: Code.VALIDATION, message: "could not launch: ", issueUuid: "c2" });
  });

  it("R-T4: the welcome's selected version is recorded", () => {
    const r = new AgentRig();
    r.register();
    r.welcome(1, "s", { major: 1, minor: 0 });
    expect(r.st.session.selected).toEqual({ major: 1, minor: 0 });
  });

  it("R-W10: server errors without an error body are handled as code UNSPECIFIED with an empty message", () => {
    const reg = new AgentRig();
    reg.register();
    const a = reg.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", closeSession: true } }, null);
    expect(of(a, "close")).toEqual([{ type: "close", conn: 1, reason: "registration refused: UNSPECIFIED " }]);
    const est = new AgentRig();
    est.establish();
    const b = est.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", closeSession: false } });
    expect(of(b, "trace").filter((t) => t.event === "server_error").map((t) => t.detail)).toEqual([{ code: "UNSPECIFIED", message: "" }]);
    const c = est.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", closeSession: true } });
    expect(of(c, "close")).toEqual([{ type: "close", conn: 1, reason: "server error: UNSPECIFIED " }]);
  });

  it("R-H6: while connecting there is no deadline and no wake, unless a queued command expires", () => {
    const r = new AgentRig();
    expect(of(r.step({ type: "start" }), "wake")).toEqual([]);
    const q = new AgentRig({ maxRunning: 0 });
    q.establish();
    q.dispatch("c1", argv("true"), { expiry: T0 + 90_000 });
    const back = new AgentRig({ maxRunning: 0 });
    back.disk = q.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 3);
    expect(of(back.step({ type: "start" }), "wake").at(-1)!.at).toBe(T0 + 90_000);
  });

  it("R-H1: a queued command's expiry later than the heartbeat does not push the wake back", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    expect(of(r.dispatch("c1", argv("true"), { expiry: T0 + 90_000 }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    expect(of(r.dispatch("c2", argv("true"), { expiry: T0 + 5_000 }), "wake").at(-1)!.at).toBe(T0 + 5_000);
    expect(of(r.dispatch("c3", argv("true"), { expiry: T0 + 7_000 }), "wake").at(-1)!.at).toBe(T0 + 5_000);
  });

  it("R-D11: deferred event and stdin work of a command the reconcile result removed is dropped quietly", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.autoDurable = false;
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: enc("pending") });
    r.frame(stdinWrite("c1", 1n, [1]));
    r.frame({ case: "reconcileResult", value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] } });
    const out = r.flush();
    expect(eventsIn(out)).toEqual([]);
    expect(of(out, "write_stdin")).toEqual([]);
    expect(r.st.commands.size).toBe(0);
  });

  it("R-C2: a script that starts preparing takes the slot in that same step: the next queued command waits", () => {
    const body = new Uint8Array(20).fill(1);
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 20n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body));
    r.frame(commit("s1", 20, sha(body)));
    r.dispatch("c2");
    expect([r.cmd("s1").phase, r.cmd("c2").phase]).toEqual(["queued", "queued"]);
    const out = r.exit("busy", 0);
    expect([r.cmd("s1").phase, r.cmd("c2").phase]).toEqual(["preparing", "queued"]);
    expect(of(out, "spawn")).toEqual([]);
  });

  it("R-C4 R-O1: executor reports for commands in another phase, or unknown, change nothing", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    expect(r.step({ type: "script_failed", uuid: "c1", reason: "x" }).some((e) => e.type === "persist")).toBe(false);
    expect(r.cmd("c1").lifecycle).toBe(L.RUNNING);
    expect(r.step({ type: "process_output", uuid: "ghost", stream: "stdout", data: enc("x") }).some((e) => e.type === "persist")).toBe(false);
    expect(r.step({ type: "stdin_written", uuid: "ghost", seq: 1 }).some((e) => e.type === "persist")).toBe(false);
  });

  it("R-D1: a queue expiry only ends commands that have not launched", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1", argv("true"), { expiry: T0 + 1_000 });
    r.step({ type: "process_started", uuid: "c1", pid: 2 });
    r.now = T0 + 2_000;
    r.step({ type: "activity", conn: r.st.session.conn });
    r.step({ type: "tick" });
    expect(r.cmd("c1").lifecycle).toBe(L.RUNNING);
  });

  it("R-S1 R-S3: writes and closes for a finished command with open stdin only consume their seq", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.exit("c1", 0);
    const w = r.frame(stdinWrite("c1", 1n, [5]));
    const c = r.frame(closeStdin("c1", 2n));
    expect(r.cmd("c1").stdin).toEqual({ next: 3, pending: [], pendingBytes: 0, inFlight: false, closed: false });
    expect([...of(w, "persist"), ...of(c, "persist")].flatMap((p) => p.records).filter((x) => x.table === "stdin")).toEqual([]);
  });

  it("R-S4: a signal to a finished command leaves its revision alone; USER2 while launching does not stop the launch", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    r.frame(signal("c1", 7n, SignalKind.KILL));
    expect([r.cmd("c1").revision, r.cmd("c1").lastSignalRevision]).toEqual([1, 0]);
    const l = new AgentRig();
    l.establish();
    l.autoDurable = false;
    l.dispatch("c2");
    l.frame(signal("c2", 2n, SignalKind.USER2));
    expect(l.cmd("c2").cancelRevision).toBe(0);
    l.autoDurable = true;
    expect(of(l.flush(), "spawn").map((x) => x.uuid)).toEqual(["c2"]);
  });

  it("R-C3: script frames for a finished command change nothing and are not even answered", () => {
    const body = new Uint8Array(20).fill(3);
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 20n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body.subarray(0, 10)));
    r.frame(signal("s1", 2n, SignalKind.CANCEL));
    // The commit first (before the last chunk), then the chunk, then the commit again.
    const early = r.frame(commit("s1", 20, sha(body)));
    const a = r.frame(chunk("s1", 10, body.subarray(10)));
    const b = r.frame(commit("s1", 20, sha(body)));
    expect(sends(early)).toEqual([]);
    expect(sends(a)).toEqual([]);
    expect(sends(b)).toEqual([]);
    expect([...early, ...a, ...b].some((e) => e.type === "persist")).toBe(false);
    expect(r.cmd("s1").script).toMatchObject({ received: 10, committed: false });
  });

  it("R-C4: a commit with the wrong size is rejected even when every byte has arrived", () => {
    const body = new Uint8Array(20).fill(3);
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 20n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body));
    const out = r.frame(commit("s1", 21, sha(body)));
    expect(lifecycles(out, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script commit size 21 != declared 20" })]);
    expect(r.cmd("s1").script!.committed).toBe(false);
  });

  it("R-D10: retiring an argv command touches no script chunk rows", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    const out = r.ackAll("c1");
    expect([...new Set(of(out, "persist").flatMap((p) => p.records).map((x) => x.table))].sort()).toEqual(["command", "event", "outbox", "tombstone"]);
  });
});

describe("agent invariants: phases and stdin order", () => {
  function rig(): AgentRig {
    const r = new AgentRig({ maxRunning: 2 });
    r.establish();
    return r;
  }
  it("refuses a launching or preparing command whose lifecycle is not accepted", () => {
    const a = rig();
    a.autoDurable = false;
    a.dispatch("c1");
    expect(a.cmd("c1").phase).toBe("launching");
    a.cmd("c1").lifecycle = L.RUNNING;
    expect(() => agentInvariants(a.st)).toThrow(/c1 launching with lifecycle 4/);
    const p = rig();
    const body = new Uint8Array(4);
    p.dispatch("s1", { program: { case: "script", value: { sizeBytes: 4n, sha256: sha(body), interpreter: "/bin/sh" } } });
    p.frame(chunk("s1", 0, body));
    p.frame(commit("s1", 4, sha(body)));
    expect(p.cmd("s1").phase).toBe("preparing");
    p.cmd("s1").lifecycle = L.RUNNING;
    expect(() => agentInvariants(p.st)).toThrow(/s1 preparing with lifecycle 4/);
  });

  it("counts launching and preparing commands as running against maxRunning", () => {
    const a = rig();
    a.autoDurable = false;
    a.dispatch("c1");
    a.st.config = { ...a.st.config, maxRunning: 0 };
    expect(() => agentInvariants(a.st)).toThrow(/running 1 over max 0/);
    const p = rig();
    const body = new Uint8Array(4);
    p.dispatch("s1", { program: { case: "script", value: { sizeBytes: 4n, sha256: sha(body), interpreter: "/bin/sh" } } });
    p.frame(chunk("s1", 0, body));
    p.frame(commit("s1", 4, sha(body)));
    p.st.config = { ...p.st.config, maxRunning: 0 };
    expect(() => agentInvariants(p.st)).toThrow(/running 1 over max 0/);
  });

  it("refuses two pending stdin items with the same seq", () => {
    const r = rig();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.cmd("c1").stdin = { next: 3, pending: [{ seq: 1, data: new Uint8Array(0), close: false }, { seq: 1, data: new Uint8Array(0), close: false }], pendingBytes: 0, inFlight: false, closed: false };
    expect(() => agentInvariants(r.st)).toThrow(/c1 stdin pending order/);
  });
});

describe("agent edges, second pass", () => {
  it("R-W2: finished (unacknowledged) commands count neither as running nor as queued", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.exit("c1", 0);
    expect(sends(out, "clientCapacity").map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ runningCommands: 0, queuedCommands: 0 })]);
    expect(r.st.commands.has("c1")).toBe(true);
  });

  it("R-S3: a duplicate CloseStdin changes nothing; a CloseStdin with nothing in flight reaches the process once durable", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.autoDurable = false;
    const cl = r.frame(closeStdin("c1", 1n));
    expect(of(cl, "close_stdin")).toEqual([]);
    expect(of(r.flush(), "close_stdin")).toEqual([{ type: "close_stdin", uuid: "c1", seq: 1 }]);
    r.autoDurable = true;
    const dup = r.frame(closeStdin("c1", 1n));
    expect(dup.some((e) => e.type === "persist" || e.type === "close_stdin")).toBe(false);
    expect(r.cmd("c1").stdin.next).toBe(2);
  });


  it("R-D2: a launch authorized before a crash is reported interrupted and its possible process killed by the shell's own record (pid 0)", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    expect(r.cmd("c1").phase).toBe("launching");
    const back = new AgentRig();
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 4);
    const out = back.step({ type: "start" });
    expect(of(out, "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "c1", pid: 0 }]);
    expect(back.st.commands.get("c1")).toMatchObject({ phase: "done", lifecycle: L.INTERRUPTED });
    expect(of(out, "spawn")).toEqual([]);
  });

  it("R-H1: after 10 s of silence the agent asks its runner for a ping on the current connection", () => {
    const r = new AgentRig();
    r.establish();
    r.now = T0 + 10_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: 1 }]);
  });
});

describe("what a server can grow at the agent, at n and n + 1", () => {
  it("R-S1 R-W10: a command holds at most STDIN_WRITES_IN_FLIGHT pending writes, empty ones included; one more is CAPACITY without closing, and a close still fits", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true }); // queued behind "busy": nothing is written yet
    for (let i = 1; i <= STDIN_WRITES_IN_FLIGHT; i++) r.frame(stdinWrite("c1", BigInt(i), []));
    expect(r.cmd("c1").stdin.pending).toHaveLength(STDIN_WRITES_IN_FLIGHT);
    expect(r.cmd("c1").stdin.pendingBytes).toBe(0);
    const over = r.frame(stdinWrite("c1", BigInt(STDIN_WRITES_IN_FLIGHT + 1), []));
    expectRefused(r, over, Code.CAPACITY, "stdin buffer for c1 is full; resend later");
    expect(r.cmd("c1").stdin.next).toBe(STDIN_WRITES_IN_FLIGHT + 1);
    r.frame(closeStdin("c1", BigInt(STDIN_WRITES_IN_FLIGHT + 1)));
    expect(r.cmd("c1").stdin.pending).toHaveLength(STDIN_WRITES_IN_FLIGHT + 1);
    r.cmd("c1").stdin.pending.push({ seq: STDIN_WRITES_IN_FLIGHT + 2, data: new Uint8Array(0), close: false });
    r.cmd("c1").stdin.next++;
    expect(() => agentInvariants(r.st)).toThrow(/c1 stdin writes over their bound/);
  });

  it("R-D7 R-W10: a request naming one tombstoned UUID twice gets it once in the snapshot", () => {
    const r = new AgentRig();
    r.establish();
    r.st.tombstones.set("gone", toHex(sha("gone")));
    r.drop();
    r.register();
    r.welcome(2, "sess-2");
    const out = r.reconcile([{ issueUuid: "gone", immutableRequestSha256: sha("gone") }, { issueUuid: "gone", immutableRequestSha256: sha("gone") }]);
    const snap = sends(out, "reconcileSnapshot")[0]!.env.payload.value as ReconcileSnapshot;
    expect(snap.retainedCommands.map((c) => [c.issueUuid, c.tombstoned])).toEqual([["gone", true]]);
  });

  it("R-D7 R-W10: tombstone hits that would push the snapshot past the envelope bound are left out; the snapshot still leaves, bounded", () => {
    const r = new AgentRig({ maxRunning: 1, maxQueued: 200 });
    r.establish();
    const long = (p: string, i: number) => `${p}-${String(i).padStart(6, "0")}`.padEnd(128, "x");
    for (let i = 0; i < 150; i++) r.dispatch(long("kept", i));
    expect(r.st.commands.size).toBe(150);
    // As if 6,100 earlier commands had ended and been discarded.
    const gone = Array.from({ length: 6_100 }, (_, i) => long("gone", i));
    for (const u of gone) r.st.tombstones.set(u, toHex(sha(u)));
    r.drop();
    r.register();
    r.welcome(2, "sess-2");
    const out = r.reconcile(gone.map((u) => ({ issueUuid: u, immutableRequestSha256: sha(u) })));
    const sent = sends(out, "reconcileSnapshot");
    expect(sent).toHaveLength(1);
    const snap = sent[0]!.env.payload.value as ReconcileSnapshot;
    const bytes = of(out, "send").find((s) => s.kind === "reconcileSnapshot")!.data.length;
    expect(bytes).toBeLessThanOrEqual(MAX_ENVELOPE_BYTES - AGENT_SNAPSHOT_SLACK_BYTES + 64);
    const tomb = snap.retainedCommands.filter((c) => c.tombstoned);
    expect(snap.retainedCommands.filter((c) => !c.tombstoned)).toHaveLength(150);
    expect(tomb.length).toBeGreaterThan(5_000);
    expect(tomb.length).toBeLessThan(gone.length);
    expect(tomb.map((c) => c.issueUuid)).toEqual(gone.slice(0, tomb.length)); // in request order, the rest left out
    expect(of(out, "trace").find((t) => t.event === "snapshot_tombstones_left_out")?.detail).toEqual({ left: gone.length - tomb.length });
  });

  it("R-D7: the invariant catches more pending snapshot tombstones than the ledger holds", () => {
    const r = new AgentRig({ limits: { ...defaultAgentConfig("x").limits, maxTombstones: 1 } });
    r.establish();
    r.st.pendingSnapshotTombstones = [{ uuid: "a", hash: "00" }, { uuid: "b", hash: "00" }];
    expect(() => agentInvariants(r.st)).toThrow(/snapshot tombstone hits over the ledger's bound/);
  });
});
