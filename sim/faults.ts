// Fault injection and the heal. Each fault kind is one small function; the
// heal ends every fault, restarts what is down, retires clones and
// impostors, repairs stores, and starts the operators' cleanup.

import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AgentEnvelopeSchema, ClientHelloSchema } from "../protos/gen/rvbox/v1/agent_pb.js";
import { CommandEventSchema, ProtocolRangeSchema, ProtocolVersionSchema } from "../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../core/dispatch/lifecycle.js";
import type { AgentHost } from "./hosts.js";
import { SimDisk } from "./disk.js";
import type { Action } from "./schedule.js";
import type { World } from "./world.js";

type FaultAction = Extract<Action, { k: "fault" }>;

function normalHost(w: World, client: number): AgentHost | undefined {
  return w.hosts.find((h) => h.kind === "agent" && h.client === client);
}

export function applyFault(w: World, a: FaultAction): void {
  const r = w.rFault;
  const host = a.target >= 0 ? normalHost(w, a.target) : undefined;
  switch (a.f) {
    case "link_break": {
      if (!host) return;
      const links = w.net.linksOf(host);
      if (links.length === 0) return;
      w.noteFault(a.f);
      for (const l of links) w.net.breakLink(l);
      w.timeline?.add(w.q.now, host.label, `FAULT link break (${links.length} links)`);
      return;
    }
    case "half_open": {
      if (!host) return;
      const l = w.liveLink(host);
      if (!l) return;
      w.noteFault(a.f);
      const dirs = (a.variant % 3 === 0 ? ["a2s", "s2a"] : a.variant % 3 === 1 ? ["a2s"] : ["s2a"]) as Array<"a2s" | "s2a">;
      w.net.halfOpen(l, dirs);
      w.timeline?.add(w.q.now, host.label, `FAULT half-open link ${l.id} (${dirs.join("+")} silently dropped)`);
      return;
    }
    case "partition": {
      if (!host) return;
      w.noteFault(a.f);
      partition(w, host, a.dur);
      return;
    }
    case "storm": {
      w.noteFault(a.f);
      w.timeline?.add(w.q.now, "world", "FAULT reconnect storm: every link breaks");
      for (const h of w.hosts) for (const l of w.net.linksOf(h)) w.net.breakLink(l);
      if (a.variant % 2 === 1) w.crashServer(r.range(100, 5_000), "storm: server restart");
      return;
    }
    case "server_crash":
      if (!w.server.up) return;
      w.noteFault(a.f);
      w.crashServer(a.dur, "fault: server crash");
      return;
    case "agent_crash":
      if (!host || !host.up) return;
      w.noteFault(a.f);
      w.crashAgent(host, a.dur, "fault: agent crash");
      return;
    case "disk_slow": {
      const d = a.target < 0 ? w.server : host;
      if (!d) return;
      w.noteFault(a.f);
      const factor = [10, 50, 200][a.variant % 3]!;
      d.fsyncFactor = factor;
      w.q.after(a.dur, () => (d.fsyncFactor = 1));
      return;
    }
    case "disk_corrupt":
      if (!host || !host.up) return;
      w.noteFault(a.f);
      w.crashAgent(host, a.dur, "fault: crash with detected store corruption", "checksum mismatch in the command journal");
      return;
    case "disk_full": {
      const d = a.target < 0 ? w.server : host;
      if (!d || !d.up) return;
      w.noteFault(a.f);
      d.disk.spaceLeft = a.variant % 5;
      // The operator frees space when the node comes back (or after a while).
      w.q.after(a.dur, () => (d.disk.spaceLeft = Infinity));
      return;
    }
    case "clock_skew":
      return;
    case "clone": {
      if (!host || !host.up) return;
      w.noteFault(a.f);
      w.identityFaults = true;
      const clone = w.newHost(`${host.name}~clone${w.lineageSeq + 1}`, host.client, "clone", host.disk.cloneDurable(), host.clockOffset + r.range(-1000, 1000));
      for (const [k, v] of host.fs) clone.fs.set(k, v);
      w.hosts.push(clone);
      w.timeline?.add(w.q.now, clone.label, `FAULT clone of ${host.name} starts (same instance id, copied disk)`);
      w.startAgent(clone);
      w.q.after(a.dur, () => retire(w, clone));
      return;
    }
    case "impostor": {
      if (a.target < 0 || a.target >= w.swarm.agents) return;
      w.noteFault(a.f);
      w.identityFaults = true;
      const imp = w.newHost(`agent-${a.target}~imp${w.lineageSeq + 1}`, a.target, "impostor", newDisk(w), r.range(-1000, 1000));
      w.hosts.push(imp);
      w.timeline?.add(w.q.now, imp.label, `FAULT impostor claims agent-${a.target} (new instance id)`);
      w.startAgent(imp);
      w.q.after(a.dur, () => retire(w, imp));
      return;
    }
    case "garbage":
      garbage(w, a.variant);
      return;
    case "stale_inject": {
      if (!host) return;
      const inject = (): boolean => {
        const l = w.liveLink(host);
        const gen = host.state?.session.fence?.generation ?? 0;
        if (!l || gen === 0) return false;
        const old = w.oracles.oldFrame(host, gen, a.variant);
        if (!old) return false;
        w.noteFault(a.f);
        w.timeline?.add(w.q.now, host.label, `FAULT stale frame (generation ${old.gen}, ${old.kind}) injected into link ${l.id}`);
        w.net.send(l, "agent", old.data);
        return true;
      };
      if (inject()) return;
      // No older generation yet: force a reconnect, inject once the new session is up.
      for (const l of w.net.linksOf(host)) w.net.breakLink(l);
      w.q.after(15_000 + r.range(0, 15_000), () => w.phase === "faults" && inject());
      return;
    }
    case "ingress_full": {
      if (a.target < 0) {
        const links = w.net.liveLinks().filter((l) => !l.rogue && l.serverSide === "open");
        if (links.length === 0 || !w.server.up) return;
        w.noteFault(a.f);
        const l = links[a.variant % links.length]!;
        w.serverInput({ type: "ingress_full", conn: l.id });
      } else {
        if (!host || !host.up) return;
        const conn = host.state?.session.conn ?? 0;
        if (!conn) return;
        w.noteFault(a.f);
        host.deliver(host.inc, { type: "ingress_full", conn });
      }
      return;
    }
  }
}

function newDisk(w: World): SimDisk {
  void w;
  return new SimDisk();
}

function partition(w: World, host: AgentHost, dur: number): void {
  host.partitions++;
  host.partitioned = true;
  for (const l of w.net.linksOf(host)) w.net.stall(l);
  w.timeline?.add(w.q.now, host.label, `FAULT partitioned from the server for ${dur} ms`);
  w.q.after(dur, () => unpartition(w, host));
}

function unpartition(w: World, host: AgentHost): void {
  if (host.partitions === 0) return;
  host.partitions--;
  if (host.partitions > 0) return;
  host.partitioned = false;
  for (const l of w.net.linksOf(host)) w.net.unstall(l);
  w.timeline?.add(w.q.now, host.label, "partition healed");
}

function retire(w: World, h: AgentHost): void {
  if (h.retired) return;
  h.retired = true;
  w.timeline?.add(w.q.now, h.label, `${h.kind} retired`);
  w.crashAgent(h, Infinity, `${h.kind} retired`);
}

function hello(clientId: string, instanceId: string, major = 1): Uint8Array {
  const range = create(ProtocolRangeSchema, {
    min: create(ProtocolVersionSchema, { major, minor: 0 }),
    max: create(ProtocolVersionSchema, { major, minor: 3 }),
  });
  return toBinary(
    AgentEnvelopeSchema,
    create(AgentEnvelopeSchema, {
      payload: {
        case: "clientHello",
        value: create(ClientHelloSchema, {
          clientId,
          clientInstanceId: instanceId,
          supportedProtocol: range,
          daemonVersion: "rogue/0",
          sentAt: timestampFromMs(0),
        }),
      },
    }),
  );
}

/** A rogue connection sends one malformed, oversized, stale or conflicting frame. */
function garbage(w: World, variant: number): void {
  const r = w.rFault;
  const link = w.net.openRogue();
  if (!link) return;
  const live = w.hosts.filter((h) => h.kind === "agent");
  const victim = live[variant % Math.max(1, live.length)];
  let data: Uint8Array;
  let binary = true;
  let what: string;
  switch (variant % 9) {
    case 0:
      data = r.bytes(r.range(1, 300));
      what = "random bytes";
      break;
    case 1:
      data = r.bytes(1024 * 1024 + r.range(1, 1000));
      what = "oversized frame";
      break;
    case 2:
      data = hello(victim?.config.clientId ?? "agent-0", `rogue-${r.hex128()}`);
      binary = false;
      what = "text frame";
      break;
    case 3:
      data = hello(victim?.config.clientId ?? "agent-0", `rogue-${r.hex128()}`, 2);
      what = "hello with incompatible major";
      break;
    case 4:
      data = hello(r.chance(0.5) ? "" : "bad id \u00ff", `rogue-${r.hex128()}`);
      what = "hello with invalid client id";
      break;
    case 5:
      data = new Uint8Array([0x0a, 0x01, 0x41, 0x98, 0x06, 0x01]); // session_id "A" + unknown field 99
      what = "envelope without a recognized payload";
      break;
    case 6: {
      const ev = create(CommandEventSchema, { issueUuid: "no-such-command", eventSeq: 1n, commandRevision: 1n });
      data = toBinary(
        AgentEnvelopeSchema,
        create(AgentEnvelopeSchema, { sessionId: r.hex128(), sessionGeneration: BigInt(r.range(1, 50)), payload: { case: "commandEvent", value: ev } }),
      );
      what = "command event with a forged fence";
      break;
    }
    case 7: {
      const old = victim ? w.oracles.oldFrame(victim, Number.MAX_SAFE_INTEGER, variant) : null;
      if (!old) return;
      data = old.data;
      what = `replayed frame of ${victim!.name} (generation ${old.gen}, ${old.kind})`;
      if (old.kind === "clientHello") w.identityFaults = true;
      break;
    }
    default:
      data = hello(victim?.config.clientId ?? "agent-0", `rogue-${r.hex128()}`);
      what = "hello claiming a live client id";
      break;
  }
  w.noteFault("garbage");
  w.timeline?.add(w.q.now, `rogue-${link.id}`, `FAULT ${what} (${data.length} bytes)`);
  w.oracles.rogueFrame(link.id, what);
  w.net.send(link, "agent", data, binary);
}

/** End of the fault phase: everything heals; operators clean up. */
export function heal(w: World): void {
  w.phase = "heal";
  w.timeline?.add(w.q.now, "world", "HEAL: faults end, links up, nodes restart, operators clean up");
  w.server.fsyncFactor = 1;
  w.server.disk.spaceLeft = Infinity;
  if (!w.server.up) w.startServer();
  for (const h of [...w.hosts]) {
    h.fsyncFactor = 1;
    h.disk.spaceLeft = Infinity;
    if (h.kind !== "agent") {
      retire(w, h);
      continue;
    }
    while (h.partitions > 0) unpartition(w, h);
    const wasCorrupt = h.disk.corruption !== null;
    h.disk.corruption = null;
    if (!h.up) w.startAgent(h);
    else if (wasCorrupt || h.state?.storeIncident !== null) h.deliver(h.inc, { type: "store_repaired" });
  }
  const readmit = (): void => {
    if (w.phase !== "heal") return;
    w.ops.readmitReplaced();
    w.q.after(60_000, readmit);
  };
  w.q.after(1_000, readmit);
  w.q.after(60_000, () => w.ops.cleanup("close_stdin"));
  const cancelLoop = (): void => {
    if (w.phase !== "heal") return;
    w.ops.cleanup("cancel");
    w.q.after(5 * 60_000, cancelLoop);
  };
  w.q.after(5 * 60_000, cancelLoop);
  w.q.after(10 * 60_000, () => w.ops.ackIncidents());
  const probe = (): void => {
    if (w.phase !== "heal") return;
    if (quiescent(w)) {
      w.phase = "done";
      return;
    }
    w.q.after(5_000, probe);
  };
  w.q.after(5_000, probe);
  w.q.schedule(w.endAt, () => {
    if (w.phase === "heal") w.phase = "done";
  });
}

export function quiescent(w: World): { ok: true } | null {
  const st = w.server.state;
  if (!st || !w.ops.idle) return null;
  // Settled means settled on disk: the committed (durable) view is terminal and
  // every received event is stored. In-memory state runs ahead by up to one
  // group commit, and on a slow disk that can be many seconds (seed 6021).
  for (const c of st.commands.values()) if (!isTerminal(c.committed.state) || c.committed.storedThrough < c.ingest.receivedThrough) return null;
  for (const s of w.ops.submitted.values()) if (s.acked && !st.commands.has(s.uuid) && !st.pruned.has(s.uuid)) return null;
  // A job has ended on disk too (its last child ended, was refused or cancelled).
  for (const j of st.jobs.values()) if (j.committed.endedAt === 0) return null;
  for (const h of w.hosts) {
    if (h.kind !== "agent") continue;
    if (!h.up || !h.state || h.state.commands.size > 0) return null;
  }
  return { ok: true };
}
