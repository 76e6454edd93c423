import fc from "fast-check";
import { rowOf } from "../../core/server/store.js";
import { runs } from "../support/runs.js";
import { describe, expect, it } from "vitest";
import { Harness } from "../support/harness.js";
import { classify, type AgentView, type ServerView } from "../../core/reconcile/classify.js";
import { isTerminal } from "../../core/dispatch/lifecycle.js";
import { Code } from "../../core/errors.js";
import { CommandLifecycle as L, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";

const ALL = [L.QUEUED, L.DISPATCHED, L.ACCEPTED, L.RUNNING, L.SUCCEEDED, L.FAILED, L.REJECTED, L.CANCELLED, L.INTERRUPTED, L.EXPIRED];

function reconnect(h: Harness, name = "a"): void {
  h.cutLink(name);
  h.reconnectNow(name);
}

describe("reconcile classification (property)", () => {
  const uuid = fc.constantFrom("u1", "u2", "u3", "u4", "u5", "u6");
  const hash = fc.constantFrom("h1", "h2");
  const server = fc.record({
    uuid,
    state: fc.constantFrom(...ALL),
    terminalSource: fc.constantFrom("agent", "server") as fc.Arbitrary<"agent" | "server">,
    hash,
    storedThrough: fc.nat(5),
  });
  const agent = fc.record({
    uuid,
    lifecycle: fc.constantFrom(L.ACCEPTED, L.RUNNING, L.SUCCEEDED, L.FAILED, L.CANCELLED, L.REJECTED),
    tombstoned: fc.boolean(),
    hash,
    lastEventSeq: fc.nat(5),
  });

  it("R-D9 R-D10 R-D11 R-D12: any snapshot yields the classification the spec demands", () => {
    fc.assert(
      fc.property(fc.uniqueArray(server, { selector: (s) => s.uuid }), fc.array(agent, { maxLength: 8 }), (servers, snapshot) => {
        const byId = new Map<string, ServerView>(servers.map((s) => [s.uuid, { ...s, terminalSource: isTerminal(s.state) ? s.terminalSource : "" }]));
        const requested = [...byId.values()].filter((s) => s.state === L.DISPATCHED || s.state === L.ACCEPTED || s.state === L.RUNNING || s.state === L.QUEUED);
        const res = classify(requested, (u) => byId.get(u), snapshot as AgentView[]);
        const v = new Map(res.verdicts.map((x) => [x.uuid, x]));
        const inSnap = new Map<string, AgentView>();
        for (const a of snapshot) if (!inSnap.has(a.uuid)) inSnap.set(a.uuid, a as AgentView);
        // Exactly one verdict per uuid involved.
        expect(res.verdicts.length).toBe(new Set([...requested.map((s) => s.uuid), ...inSnap.keys()]).size);
        for (const s of requested) {
          if (inSnap.has(s.uuid)) continue;
          // R-D9: absence rules.
          if (s.state === L.QUEUED || s.state === L.DISPATCHED) expect(v.get(s.uuid)!.action).toBe("requeue");
          else {
            expect(v.get(s.uuid)!.action).toBe("interrupt");
            expect(v.get(s.uuid)!.incident).toBeTruthy();
          }
        }
        for (const [u, a] of inSnap) {
          const s = byId.get(u);
          const x = v.get(u)!;
          // R-D10: a tombstone never leads to a replay or a local termination.
          if (a.tombstoned) expect(["none", "already_executed"]).toContain(x.action);
          // R-D11: unknown to the server -> terminated locally with an incident.
          else if (!s) expect(x).toMatchObject({ action: "terminate_local", incident: expect.any(String) });
          // R-D11: active at the agent but terminal at the server.
          else if (s.hash === a.hash && isTerminal(s.state) && !isTerminal(a.lifecycle)) expect(x.action).toBe("terminate_local");
          // R-D12: terminal on both sides and the server ended it from the agent's events -> discard.
          else if (s.hash === a.hash && isTerminal(s.state) && isTerminal(a.lifecycle)) expect(x.action).toBe("discard");
          // R-D11: the server stored events this agent never assigned (another copy ran it).
          else if (s.hash === a.hash && !isTerminal(s.state) && a.lastEventSeq < s.storedThrough) {
            expect(x).toMatchObject({ action: "diverged", incident: expect.any(String) });
            expect(res.terminate).toContain(u);
          }
          if (x.action === "requeue") throw new Error("a command the agent holds is never requeued");
        }
        const t = new Set(res.terminate);
        for (const d of res.discard) expect(t.has(d)).toBe(false);
        for (const u of [...res.terminate, ...res.discard]) expect(inSnap.has(u)).toBe(true);
      }),
      { numRuns: runs(3000) },
    );
  });
});

describe("reconciliation end to end", () => {
  it("R-D6: after registration the server asks about exactly its in-flight commands for that client", () => {
    const h = new Harness();
    h.addAgent("a", { maxRunning: 1 });
    h.addAgent("b");
    h.submit("a", "run");
    h.submit("a", "queued-at-agent");
    h.submit("a", "done");
    h.exit("a", "run", 0);
    h.submit("b", "other");
    h.output("a", "queued-at-agent", "x");
    reconnect(h);
    const req = h.sent("reconcileRequest", "a").at(-1)!.payload.value as { targets: Array<{ issueUuid: string; lastServerEventSeq: bigint }> };
    const names = req.targets.map((t) => t.issueUuid).sort();
    // Both are active at the server (one slot: "done" waits at the agent behind "queued-at-agent"), so both are named.
    expect(["done", "queued-at-agent"].map((n) => h.command(n).endedAt)).toEqual([null, null]);
    expect(names).toEqual(["done", "queued-at-agent"]);
    expect(names).not.toContain("run");
    expect(names).not.toContain("other");
    const t = req.targets.find((x) => x.issueUuid === "queued-at-agent")!;
    expect(t.lastServerEventSeq).toBe(BigInt(h.command("queued-at-agent").storedThrough));
  });

  it("R-D6 R-D10 R-D5: a queued command is named in the request; the agent's matching tombstone ends it without a dispatch round trip", () => {
    const h = new Harness();
    h.addAgent("a");
    h.cutLink("a");
    h.submit("a", "x", { argv: ["true"] });
    expect(h.command("x").state).toBe("queued");
    // The server's data directory as a backup taken now: x is queued.
    const backup = structuredClone(h.serverDisk.durable);
    h.reconnectNow("a");
    h.exit("a", "x", 0);
    expect(h.command("x").state).toBe("succeeded");
    expect(h.tombstoned("a", "x")).toBe(true);
    // The server is restored from the backup: it holds x queued again.
    h.serverDisk.durable = backup;
    h.restartServer();
    expect(h.command("x").state).toBe("queued");
    const before = h.wire.length;
    h.reconnectNow("a");
    const after = h.wire.slice(before).map((w) => w.env.payload);
    const req = after.find((p) => p.case === "reconcileRequest")!.value as { targets: Array<{ issueUuid: string }> };
    expect(req.targets.map((t) => t.issueUuid)).toEqual(["x"]);
    const snap = after.find((p) => p.case === "reconcileSnapshot")!.value as { retainedCommands: Array<{ issueUuid: string; tombstoned: boolean }> };
    expect(snap.retainedCommands.map((r) => [r.issueUuid, r.tombstoned])).toEqual([["x", true]]);
    // Never dispatched again, never launched twice: it ends interrupted, with an incident.
    expect(after.filter((p) => p.case === "commandDispatch")).toEqual([]);
    expect(h.spawned("a").filter((u) => u === "x")).toHaveLength(1);
    expect(h.command("x").state).toBe("interrupted");
    expect(h.incidents().map((i) => [i.issueUuid, i.kind])).toEqual([["x", "reconcile_already_executed"]]);
  });

  it("R-D6 R-D9: a queued command the snapshot does not hold stays queued through reconciliation and is dispatched once after the result", () => {
    const h = new Harness();
    h.addAgent("a");
    h.cutLink("a");
    h.submit("a", "q", { argv: ["true"] });
    const before = h.wire.length;
    h.reconnectNow("a");
    const after = h.wire.slice(before).map((w) => w.env.payload.case);
    expect(after.indexOf("reconcileRequest")).toBeLessThan(after.indexOf("reconcileResult"));
    expect(after.indexOf("reconcileResult")).toBeLessThan(after.indexOf("commandDispatch"));
    expect(after.filter((c) => c === "commandDispatch")).toHaveLength(1);
    expect(h.spawned("a")).toEqual(["q"]);
    expect(h.incidents()).toEqual([]);
  });

  it("R-D7: the agent answers once with a complete snapshot, then resumes retransmission from the server's last acknowledged event", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.submit("a", "c2");
    h.output("a", "c1", "one");
    h.autoDeliver = false;
    h.output("a", "c1", "two");
    h.exit("a", "c2", 3);
    h.queue.length = 0; // the events and acks are lost
    h.autoDeliver = true;
    const before = h.wire.length;
    reconnect(h);
    const after = h.wire.slice(before);
    const snapIdx = after.findIndex((w) => w.env.payload.case === "reconcileSnapshot");
    const firstEvent = after.findIndex((w) => w.env.payload.case === "commandEvent");
    expect(after.filter((w) => w.env.payload.case === "reconcileSnapshot")).toHaveLength(1);
    expect(snapIdx).toBeGreaterThanOrEqual(0);
    expect(firstEvent).toBeGreaterThan(snapIdx);
    const snap = after[snapIdx]!.env.payload.value as { retainedCommands: Array<{ issueUuid: string; lifecycle: number }> };
    expect(snap.retainedCommands.map((r) => [r.issueUuid, r.lifecycle])).toEqual([
      ["c1", L.RUNNING],
      ["c2", L.FAILED],
    ]);
    // Resent from the first unacknowledged event: c1's "two" and c2's exit.
    const seqs = after
      .filter((w) => w.env.payload.case === "commandEvent")
      .map((w) => {
        const e = w.env.payload.value as { issueUuid: string; eventSeq: bigint };
        return `${e.issueUuid}#${e.eventSeq}`;
      });
    expect(seqs).toEqual(["c1#3", "c2#2"]);
    expect(h.command("c2").state).toBe("failed");
    expect(h.retained("a")).not.toContain("c2");
  });

  it("R-D8: nothing is dispatched on a session until the snapshot is classified and the result is durable", () => {
    const h = new Harness();
    h.addAgent("a");
    const a = h.agents.get("a")!;
    h.agentInput("a", { type: "transport_closed", conn: a.conn, reason: "cut" });
    h.serverInput({ type: "conn_closed", conn: a.serverConn, reason: "cut" });
    a.serverConn = 0;
    h.submit("a", "c1");
    expect(h.command("c1").state).toBe("queued");
    const before = h.wire.length;
    const since = (k: string) => h.wire.slice(before).filter((w) => w.env.payload.case === k);
    h.autoDurable = false;
    h.reconnectNow("a"); // hello; the server's client record is not durable yet
    expect(since("serverWelcome")).toHaveLength(0);
    h.flush("server"); // welcome + request
    h.flush("a"); // snapshot leaves once the agent's state is durable
    expect(since("reconcileSnapshot")).toHaveLength(1);
    expect(since("reconcileResult")).toHaveLength(0);
    expect(since("commandDispatch")).toHaveLength(0);
    expect(h.sessionFor("a")?.phase).toBe("reconciling");
    h.flush("server"); // the result is durable: result, then the dispatch is recorded
    h.flush("server"); // ... and sent
    const order = h.wire
      .slice(before)
      .filter((w) => w.from === "server")
      .map((w) => w.env.payload.case);
    expect(order.indexOf("reconcileResult")).toBeGreaterThan(-1);
    expect(order.indexOf("commandDispatch")).toBeGreaterThan(order.indexOf("reconcileResult"));
    expect(h.serverDisk.durable.get("reconcile")?.has("a")).toBe(true);
  });

  it("R-D9: a dispatched command the agent never received returns to queued and runs once", () => {
    const h = new Harness();
    h.addAgent("a");
    h.autoDeliver = false;
    h.submit("a", "c1");
    h.queue.length = 0; // dispatch lost
    h.autoDeliver = true;
    expect(h.command("c1").state).toBe("dispatched");
    reconnect(h);
    expect(h.spawned("a")).toEqual(["c1"]);
    expect(h.command("c1").state).toBe("running");
  });

  it("R-D9: an accepted command missing from a healthy snapshot becomes interrupted with an incident", () => {
    const h = new Harness();
    h.addAgent("a", { maxRunning: 1 });
    h.submit("a", "c0");
    h.submit("a", "c1");
    expect(h.command("c1").state).toBe("accepted");
    // Invariant failure: the agent forgets what it accepted (state wiped, same instance id).
    const a = h.agents.get("a")!;
    const instance = a.disk.durable.get("meta")!;
    a.disk.durable = new Map([["meta", instance]]);
    h.restartAgent("a");
    reconnect(h);
    expect(h.command("c1").state).toBe("interrupted");
    expect(h.command("c0").state).toBe("interrupted");
    expect(
      [...h.server.incidents.values()]
        .filter((i) => i.kind === "reconcile_interrupt")
        .map((i) => i.uuid)
        .sort(),
    ).toEqual(["c0", "c1"]);
  });

  it("R-D11: an agent-held command the server lacks is terminated locally after the durable result, with a recovery incident", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "ghost");
    h.serverDisk.durable = new Map(); // server loses everything
    h.restartServer();
    reconnect(h);
    const res = h.sent("reconcileResult").at(-1)!.payload.value as { terminateLocalIssueUuids: string[] };
    expect(res.terminateLocalIssueUuids).toEqual(["ghost"]);
    const a = h.agents.get("a")!;
    expect(a.procs.get("ghost")!.signals).toContain(SignalKind.KILL);
    expect(h.retained("a")).toEqual([]);
    expect(h.tombstoned("a", "ghost")).toBe(true);
    expect(h.incidents().some((i) => i.issueUuid === "ghost" && i.kind === "reconcile_terminate_local")).toBe(true);
  });

  it("R-D12: the result discards terminal records the server already stored even when the EventAck was lost; repeating it is harmless", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const a = h.agents.get("a")!;
    h.autoDeliver = false;
    h.exit("a", "c1", 0);
    // Deliver the agent's events to the server but drop the server's acks.
    while (h.queue.length > 0) {
      const n = h.wire.length;
      h.queue.shift()!();
      // drop anything the server queued in reply
      if (h.wire.length > n) h.queue.length = 0;
    }
    h.autoDeliver = true;
    expect(h.command("c1").state).toBe("succeeded");
    expect(h.retained("a"), "no ack arrived: the agent still holds it").toEqual(["c1"]);
    reconnect(h);
    const res = h.sent("reconcileResult").at(-1)!;
    expect((res.payload.value as { discardLocalTerminalIssueUuids: string[] }).discardLocalTerminalIssueUuids).toEqual(["c1"]);
    expect(h.retained("a")).toEqual([]);
    expect(h.tombstoned("a", "c1")).toBe(true);
    const wire = h.wire.filter((w) => w.env.payload.case === "reconcileResult").at(-1)!;
    const tombs = a.st.tombstones.size; // internal: the ledger's size (a repeat must add no entry; no peer counts them)
    const persisted = h.agentEffects.length;
    h.agentInput("a", { type: "frame", conn: a.conn, data: wire.data });
    expect(a.st.tombstones.size).toBe(tombs);
    expect(
      h.agentEffects.slice(persisted).filter((x) => x.e.type === "persist"),
      "a repeat changes nothing durable",
    ).toEqual([]);
    expect(h.tombstoned("a", "c1")).toBe(true);
    expect(h.sessionFor("a")?.phase).toBe("ready");
  });

  it("R-D13: an agent with a store incident claims no complete snapshot and accepts no work until repaired", () => {
    const h = new Harness();
    h.addAgent("a");
    h.agentInput("a", { type: "store_incident", detail: "journal CRC mismatch at 4096" });
    reconnect(h);
    h.submit("a", "c1");
    expect(h.sent("reconcileSnapshot")).toHaveLength(1); // only the first session's
    const err = h.sent("error", "server").at(-1)!.payload.value as { error: { code: number } };
    expect(err.error.code).toBe(Code.STORE_INCIDENT);
    expect(h.incidents().some((i) => i.kind === "agent_store_incident")).toBe(true);
    expect(h.sent("commandDispatch")).toHaveLength(0);
    expect(h.spawned("a")).toEqual([]);
    h.agentInput("a", { type: "store_repaired" });
    reconnect(h);
    expect(h.spawned("a")).toEqual(["c1"]);
  });
});

describe("regressions", () => {
  it("R-D11 R-D12: events of a command the server ended itself never close the session, so the result can end the agent's copy", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.output("a", "c1", "acked\n");
    h.autoDeliver = false;
    h.output("a", "c1", "lost 1\n");
    h.output("a", "c1", "lost 2\n");
    h.queue.length = 0;
    h.autoDeliver = true;
    h.cutLink("a");
    // The server ended c1 itself and knows only its first event (e.g. after a divergence).
    const rec = rowOf(h.serverDisk.durable, "command", "c1")!;
    h.serverDisk.durable.get("command")!.set("c1", { ...rec, state: L.INTERRUPTED, terminalSource: "server", storedThrough: 0 });
    h.restartServer();
    h.reconnectNow("a"); // the agent resends events 3 and 4: a "gap" for the server
    expect(h.sessionFor("a")?.phase).toBe("ready");
    expect(h.sent("error", "a").filter((e) => (e.payload.value as { error: { code: number } }).error.code === Code.SEQUENCE_VIOLATION)).toHaveLength(0);
    const res = h.sent("reconcileResult").at(-1)!.payload.value as { terminateLocalIssueUuids: string[] };
    expect(res.terminateLocalIssueUuids).toEqual(["c1"]);
    expect(h.retained("a")).toEqual([]);
  });
});
