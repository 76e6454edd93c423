// Restart: the agent rebuilt from its durable rows (store.ts), and `start`,
// the first input after a restore, which generates the instance id once
// (R-F1), interrupts every command a crash left launching or running (its
// outcome is unknown: it is never launched again, R-C4, R-O8), and begins
// connecting.

import { rngFromSeed, nextHex128 } from "../rng.js";
import { newGate } from "../step-context.js";
import { newAgentSession, sessionConnect, type SessionAction } from "../session/agent-session.js";
import { newOutbox, type CommandOutbox } from "../window/outbox.js";
import type { AgentConfig, AgentDeferred, AgentState } from "./agent-types.js";
import { finishInterrupted } from "./finish.js";
import type { AgentCtx } from "./io.js";
import { setPhase } from "./phase.js";
import { agentRows, agentRowsByKey, commandFromRow, commandRecord, instanceIdRecord, keyUuid, META_INSTANCE_ID, type AgentTables } from "./store.js";

export type { AgentTables };

/**
 * Rebuild the agent from what was durably stored (R-F1: the instance id is
 * generated once and then always read back). `seed` feeds the PRNG (backoff
 * jitter, first instance id); it is not protocol state. The rows and their
 * keys are defined in store.ts; each table's rows come in the order they were
 * first written (the store's contract: kv-store's LOAD_ALL).
 */
export function restoreAgent(config: AgentConfig, tables: AgentTables, seed: number): AgentState {
  const rng = rngFromSeed(seed);
  const storedInstance = tables.get("meta")?.get(META_INSTANCE_ID);
  const st: AgentState = {
    config,
    instanceId: typeof storedInstance === "string" ? storedInstance : "",
    rng,
    session: newAgentSession(),
    reconciled: false,
    storeIncident: null,
    commands: new Map(),
    tombstones: new Map(),
    outbox: newOutbox(config.limits),
    gate: newGate<AgentDeferred>(),
    metadataUsed: 0,
    scriptBytes: 0,
    lastCapacity: "",
    started: false,
    pendingSnapshotTombstones: [],
    tombstoneSeq: 0,
    replaced: null,
  };
  const tombs = agentRows(tables, "tombstone");
  tombs.sort((a, b) => a[1].order - b[1].order);
  for (const [uuid, t] of tombs) st.tombstones.set(uuid, t.hash);
  st.tombstoneSeq = tombs.length > 0 ? tombs[tombs.length - 1]![1].order : 0;
  for (const [uuid, row] of agentRows(tables, "command")) {
    const c = commandFromRow(row);
    st.commands.set(uuid, c);
    st.metadataUsed += config.limits.metadataPerCommand;
    if (c.script) st.scriptBytes += c.script.size;
  }
  for (const [k, ch] of agentRowsByKey(tables, "chunk")) {
    const c = st.commands.get(keyUuid(k));
    if (c?.script) c.script.chunks.push(ch.data);
  }
  for (const [k, item] of agentRowsByKey(tables, "stdin")) {
    const c = st.commands.get(keyUuid(k));
    if (c) {
      c.stdin.pending.push({ seq: item.seq, data: item.data, close: item.close });
      c.stdin.pendingBytes += item.data.length;
    }
  }
  for (const [uuid, h] of agentRows(tables, "outbox")) {
    const cb: CommandOutbox = {
      uuid,
      entries: [],
      nextIdx: h.nextIdx,
      pinned: [],
      pinnedBytes: 0,
      nextSeq: h.nextSeq,
      ackedThrough: h.ackedThrough,
      rawBytes: 0,
      streamNext: { ...h.streamNext },
      closed: h.closed,
    };
    st.outbox.commands.set(uuid, cb);
  }
  for (const [k, e] of agentRowsByKey(tables, "entry")) {
    const cb = st.outbox.commands.get(keyUuid(k));
    if (!cb) continue;
    cb.entries.push(e.kind === "truncation" ? { ...e, ranges: e.ranges.map((r) => ({ ...r })) } : { ...e });
    if (e.kind === "output") {
      cb.rawBytes += e.data.length;
      st.outbox.rawTotal += e.data.length;
    }
  }
  for (const [k, p] of agentRowsByKey(tables, "event")) {
    const cb = st.outbox.commands.get(keyUuid(k));
    if (!cb) continue;
    if (p.seq <= cb.ackedThrough) continue;
    cb.pinned.push({ seq: p.seq, bytes: p.bytes, sentOn: 0, durable: true });
    cb.pinnedBytes += p.bytes.length;
    st.outbox.sessionPinnedBytes += p.bytes.length;
  }
  if (st.outbox.rawTotal > st.outbox.limits.rawHigh) st.outbox.summarizing = true;
  return st;
}

/** A fresh agent with empty storage. */
export function newAgent(config: AgentConfig, seed: number): AgentState {
  return restoreAgent(config, { get: () => undefined }, seed);
}

export function start(st: AgentState, ctx: AgentCtx, acts: SessionAction[]): void {
  if (st.started) return;
  st.started = true;
  if (st.instanceId === "") {
    st.instanceId = nextHex128(st.rng);
    ctx.persist(instanceIdRecord(st.instanceId));
  }
  // Anything that was launched before a crash has an uncertain outcome.
  for (const c of st.commands.values()) {
    if (c.phase === "launching" || c.phase === "running") {
      // The spawn may have happened even when its pid never became durable:
      // pid 0 asks the shell to use its own spawn-time record of the child.
      ctx.emit({ type: "kill_orphan", uuid: c.uuid, pid: c.pid });
      finishInterrupted(st, ctx, c, "agent restarted while the command was running; outcome unknown");
    } else if (c.phase === "preparing") {
      // Its script file was being written when the agent stopped: that write died
      // with the process and no script_prepared will come, so the command would
      // hold its run slot until its queue expiry. Nothing was launched and its
      // chunks are still journaled (they go in the batch that records the
      // prepared file), so it queues again and is prepared anew for a slot.
      setPhase(c, "queued");
      ctx.persist(commandRecord(c));
    }
  }
  sessionConnect(st.session, ctx.now, acts);
}
