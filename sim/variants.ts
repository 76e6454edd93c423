// Deliberately broken cores, built without touching core/: each wraps a real
// step function and breaks one rule. The simulator's oracles must catch each
// within a bounded number of seeds (test/sim/mutants.test.ts).

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AgentEnvelopeSchema, CommandDispatchSchema, EventAckSchema } from "../protos/gen/rvbox/v1/agent_pb.js";
import { ArgvProgramSchema, CommandEventSchema, ExecutionSpecSchema } from "../protos/gen/rvbox/v1/common_pb.js";
import type { AgentEffect } from "../core/agent/agent-types.js";
import type { ServerEffect } from "../core/server/server-types.js";
import { encodeBehaviour, PROGRAM } from "./behaviour.js";
import type { Variant } from "./world.js";

/** (a) The server reports every persist durable at once: acks leave before the disk has the event. */
const ackBeforePersist: Variant = {
  name: "ack-before-persist",
  description: "server feeds itself `durable` for every persist immediately (acks before fsync)",
  swarm: { force: { server_crash: 3, disk_slow: 3 } },
  wrapServer: (step) => (st, input, now, env, wall) => {
    const res = step(st, input, now, env, wall);
    const effects: ServerEffect[] = [];
    let queue = res.effects;
    for (let guard = 0; guard < 100 && queue.length > 0; guard++) {
      const next: ServerEffect[] = [];
      for (const e of queue) {
        effects.push(e);
        if (e.type === "persist") next.push(...step(res.state, { type: "durable", through: e.id }, now, env, wall).effects);
      }
      queue = next;
    }
    return { state: res.state, effects };
  },
};

/** (a2) The server acknowledges each event the moment it arrives, before persisting it. */
const earlyEventAck: Variant = {
  name: "early-event-ack",
  description: "server sends an EventAck for every CommandEvent as soon as it is received (before its persist)",
  swarm: {},
  wrapServer: (step) => (st, input, now, env, wall) => {
    const res = step(st, input, now, env, wall);
    if (input.type !== "frame") return res;
    const conn = res.state.conns.get(input.conn);
    if (!conn || conn.phase !== "ready") return res;
    let e;
    try {
      e = fromBinary(AgentEnvelopeSchema, input.data);
    } catch {
      return res;
    }
    if (e.payload.case !== "commandEvent") return res;
    const ack = create(AgentEnvelopeSchema, {
      sessionId: conn.sessionId,
      sessionGeneration: BigInt(conn.generation),
      payload: { case: "eventAck", value: create(EventAckSchema, { issueUuid: e.payload.value.issueUuid, throughEventSeq: e.payload.value.eventSeq }) },
    });
    return {
      state: res.state,
      effects: [...res.effects, { type: "send", conn: input.conn, lane: "data", data: toBinary(AgentEnvelopeSchema, ack), kind: "eventAck" }],
    };
  },
};

/** (b) The agent resends a pinned event with other bytes (a new timestamp) under the same seq. */
const reusedSeqOtherBytes: Variant = {
  name: "reused-seq-other-bytes",
  description: "agent mutates a resent CommandEvent (same uuid and event_seq, different time)",
  swarm: { force: { link_break: 6, storm: 2, server_crash: 2 } },
  wrapAgent: (step) => {
    const sent = new Set<string>();
    return (st, input, now, env, wall) => {
      const res = step(st, input, now, env, wall);
      const effects = res.effects.map((e): AgentEffect => {
        if (e.type !== "send" || e.kind !== "commandEvent") return e;
        const envl = fromBinary(AgentEnvelopeSchema, e.data);
        if (envl.payload.case !== "commandEvent") return e;
        const ev = envl.payload.value;
        const key = `${ev.issueUuid}/${ev.eventSeq}`;
        if (!sent.has(key)) {
          sent.add(key);
          return e;
        }
        const changed = fromBinary(CommandEventSchema, toBinary(CommandEventSchema, ev));
        if (changed.time) changed.time.nanos = (changed.time.nanos + 1_000_000) % 1_000_000_000;
        envl.payload = { case: "commandEvent", value: changed };
        return { ...e, data: toBinary(AgentEnvelopeSchema, envl) };
      });
      return { state: res.state, effects };
    };
  },
};

/** (c) The server dispatches on a session before its ReconcileResult. */
const dispatchBeforeReconcile: Variant = {
  name: "dispatch-before-reconcile",
  description: "server sends a CommandDispatch right after its ReconcileRequest",
  swarm: {},
  wrapServer: (step) => {
    let n = 0;
    return (st, input, now, env, wall) => {
      const res = step(st, input, now, env, wall);
      const extra: ServerEffect[] = [];
      for (const e of res.effects) {
        if (e.type !== "send" || e.kind !== "reconcileRequest") continue;
        const conn = res.state.conns.get(e.conn);
        if (!conn) continue;
        const spec = create(ExecutionSpecSchema, {
          program: {
            case: "argv",
            value: create(ArgvProgramSchema, { argv: [PROGRAM, encodeBehaviour({ s: 1, out: 10, err: 0, chunk: 10, rate: 10, code: 0, delay: 0 })] }),
          },
        });
        const d = create(CommandDispatchSchema, {
          issueUuid: `early-${++n}`,
          commandRevision: 1n,
          targetSessionGeneration: BigInt(conn.generation),
          spec,
          immutableRequestSha256: new Uint8Array(32).fill(n & 255),
        });
        const data = toBinary(
          AgentEnvelopeSchema,
          create(AgentEnvelopeSchema, {
            sessionId: conn.sessionId,
            sessionGeneration: BigInt(conn.generation),
            payload: { case: "commandDispatch", value: d },
          }),
        );
        extra.push({ type: "send", conn: e.conn, lane: "data", data, kind: "commandDispatch" });
      }
      return { state: res.state, effects: [...res.effects, ...extra] };
    };
  },
};

/** (d) The agent forgets launch authorizations across a restart: launching -> queued. */
const relaunchAfterRestart: Variant = {
  name: "relaunch-after-restart",
  description: "agent treats a restored `launching` command as still queued (launches it again)",
  swarm: { force: { agent_crash: 8 } },
  wrapAgent: (step) => (st, input, now, env, wall) => {
    if (input.type === "start") {
      for (const c of st.commands.values())
        if (c.phase === "launching" || c.phase === "running") {
          // Deliberately broken (this variant forgets the launch): a bare phase write, not setPhase.
          c.phase = "queued";
          c.lifecycle = 3;
          c.pid = 0;
        }
    }
    return step(st, input, now, env, wall);
  },
};

/** (d2) The agent leaves a restored `preparing` command as it is (the core before 2026-12-05). */
const preparingAfterRestart: Variant = {
  name: "preparing-after-restart",
  description: "agent keeps a command restored `preparing` as it is at start (no one writes its script again)",
  swarm: {},
  wrapAgent: (step) => (st, input, now, env, wall) => {
    if (input.type !== "start") return step(st, input, now, env, wall);
    const preparing = [...st.commands.values()].filter((c) => c.phase === "preparing").map((c) => c.uuid);
    const res = step(st, input, now, env, wall);
    // Deliberately broken: the write of its file, which the real core starts again at once, is dropped.
    return { state: res.state, effects: res.effects.filter((e) => !(e.type === "write_script" && preparing.includes(e.uuid))) };
  },
};

/** (e) The server ignores fencing: a stale envelope is re-stamped with the current fence. */
const ignoreFencing: Variant = {
  name: "ignore-fencing",
  description: "server accepts envelopes of an old generation (re-stamps them with the current fence)",
  swarm: { force: { stale_inject: 10, link_break: 3 } },
  wrapServer: (step) => (st, input, now, env, wall) => {
    if (input.type === "frame") {
      const conn = st.conns.get(input.conn);
      if (conn && conn.phase !== "hello" && conn.phase !== "welcoming") {
        try {
          const e = fromBinary(AgentEnvelopeSchema, input.data);
          if (e.payload.case && e.payload.case !== "clientHello" && (e.sessionId !== conn.sessionId || e.sessionGeneration !== BigInt(conn.generation))) {
            e.sessionId = conn.sessionId;
            e.sessionGeneration = BigInt(conn.generation);
            return step(st, { ...input, data: toBinary(AgentEnvelopeSchema, e) }, now, env, wall);
          }
        } catch {
          /* garbage stays garbage */
        }
      }
    }
    return step(st, input, now, env, wall);
  },
};

/** (f) The agent writes each stdin chunk to the process twice (no dedup). */
const stdinTwice: Variant = {
  name: "stdin-twice",
  description: "agent emits every write_stdin effect twice",
  swarm: {},
  wrapAgent: (step) => (st, input, now, env, wall) => {
    const res = step(st, input, now, env, wall);
    const effects: AgentEffect[] = [];
    for (const e of res.effects) {
      effects.push(e);
      if (e.type === "write_stdin") effects.push(e);
    }
    return { state: res.state, effects };
  },
};

/** (g) The agent loses the last byte of every 50th output chunk it captures. */
const loseOutputByte: Variant = {
  name: "lose-output-byte",
  description: "agent drops the last byte of every 50th process_output before spooling it",
  swarm: {},
  wrapAgent: (step) => {
    let n = 0;
    return (st, input, now, env, wall) => {
      if (input.type === "process_output" && input.data.length > 1 && ++n % 50 === 0) {
        return step(st, { ...input, data: input.data.subarray(0, input.data.length - 1) }, now, env, wall);
      }
      return step(st, input, now, env, wall);
    };
  },
};

/** (h) The server runs on one clock: its timestamps come from the deadline clock (the daemons before the two clocks). */
const oneClock: Variant = {
  name: "one-clock",
  description: "server is stepped with wall = now, so server_time and other timestamps ignore wall-clock steps",
  swarm: { force: { clock_skew: 3, link_break: 6, storm: 2 } },
  wrapServer: (step) => (st, input, now, env) => step(st, input, now, env, now),
};

/**
 * (j) A job ignores its max-concurrency: the moment a job is submitted, every
 * child's command is created at once (the job's own bookkeeping adopts them
 * later as retries of the same requests, so its invariants still hold).
 */
const jobAllAtOnce: Variant = {
  name: "job-all-at-once",
  description: "server creates every child command of a job at submit, ignoring max-concurrency",
  swarm: {},
  wrapServer: (step) => (st, input, now, env, wall) => {
    const res = step(st, input, now, env, wall);
    if (input.type !== "control" || input.request.op !== "submit_job") return res;
    const r = input.request;
    const job = res.state.jobs.get(r.jobId);
    if (!job) return res;
    const effects = [...res.effects];
    for (const ch of job.children) {
      if (ch.phase !== "pending") continue;
      const request = { op: "submit" as const, requestId: `mutant-${ch.uuid}`, uuid: ch.uuid, clientId: ch.clientId, spec: job.spec, allowUnknownClient: true };
      effects.push(...step(res.state, { type: "control", request }, now, env, wall).effects);
    }
    return { state: res.state, effects };
  },
};

export const VARIANTS: Variant[] = [
  jobAllAtOnce,
  loseOutputByte,
  stdinTwice,
  ackBeforePersist,
  earlyEventAck,
  reusedSeqOtherBytes,
  dispatchBeforeReconcile,
  relaunchAfterRestart,
  preparingAfterRestart,
  ignoreFencing,
  oneClock,
];
