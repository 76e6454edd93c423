// What a peer holding the fleet-wide agent token can grow, and its bound
// (docs/ARCHITECTURE.md "What a peer can grow"): incidents per client and in
// total (R-D11), client records (R-F6), and each remaining table at n and n+1.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { ReconcileResult, StdinWrite } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import {
  CommandLifecycle as L,
  ControlErrorSchema,
  OutputIncompleteSchema,
  OutputStream,
  SignalKind,
  StdinAckSchema,
} from "../../../protos/gen/rvbox/v1/common_pb.js";
import { restoreServer, serverInvariants, type Incident } from "../../../core/index.js";
import { Code, InvariantViolation } from "../../../core/errors.js";
import {
  MAX_CLIENTS,
  MAX_INCIDENTS_KEPT,
  MAX_OPEN_INCIDENTS,
  MAX_OPEN_INCIDENTS_PER_CLIENT,
  SERVER_RECENT_DIGESTS,
  SERVER_ROW_EVENTS_PER_COMMAND,
  STDIN_WRITES_IN_FLIGHT,
} from "../../../core/limits.js";
import { rowEventBound } from "../../../core/server/ingest.js";
import { T0, sha, of, ServerRig, expectClosed, type StateInit } from "../../support/server-rig.js";
import { plainIncident } from "../../support/pair.js";

const unknownRunning = (uuid: string): StateInit => ({
  issueUuid: uuid,
  lifecycle: L.RUNNING,
  lastClientEventSeq: 1n,
  commandRevision: 1n,
  immutableRequestSha256: sha(uuid),
});

/** A session of `client` waiting for its snapshot. */
function reconciling(r: ServerRig, client: string): number {
  const c = r.open();
  r.hello(c, client);
  expect(r.session(c)?.phase).toBe("reconciling");
  return c;
}

const storeIncident = (r: ServerRig, conn: number) =>
  r.frame(conn, {
    case: "error",
    value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "disk" }), closeSession: false },
  });

/** ListIncidents (open only): how many a client has. */
const openOf = (r: ServerRig, client: string) => r.incidents(true).filter((i) => i.clientId === client).length;

/**
 * A server restored from tables holding `perClient[client]` open incidents
 * per client (and those clients' records), as a crash and restart would leave it.
 */
function seeded(perClient: Record<string, number>, acknowledged = 0, openFirst = false): ServerRig {
  const r = new ServerRig();
  const incidents = new Map<string, Incident>();
  const clients = new Map<string, unknown>();
  let n = 0;
  const add = (clientId: string, ack: boolean) => {
    n++;
    incidents.set(`inc-${n}`, { id: `inc-${n}`, clientId, uuid: `u${n}`, kind: "reconcile_terminate", detail: "d", at: T0, acknowledged: ack });
  };
  if (!openFirst) for (let i = 0; i < acknowledged; i++) add("old", true);
  for (const [client, k] of Object.entries(perClient)) {
    clients.set(client, {
      clientId: client,
      generation: 1,
      instanceId: `inst-${client}`,
      conn: 0,
      pendingClaim: null,
      authorization: null,
      capacity: { running: 0, queued: 0, maxRunning: 0, maxQueued: 0 },
      lastSeen: T0,
      draining: false,
    });
    for (let i = 0; i < k; i++) add(client, false);
  }
  if (openFirst) for (let i = 0; i < acknowledged; i++) add("old", true);
  const tables = new Map<string, Map<string, unknown>>([
    ["incident", incidents as Map<string, unknown>],
    ["client", clients],
  ]);
  for (const [t, m] of tables) r.disk.durable.set(t, new Map(m));
  r.st = restoreServer(r.cfg, { get: (t) => tables.get(t) }, 1);
  serverInvariants(r.st);
  return r;
}

describe("incidents under a flood (R-D11)", () => {
  for (const step of [3_600_000, -3_600_000]) {
    it(`R-D11: with the wall clock ${step > 0 ? "ahead of" : "behind"} the deadline clock by 1 h, a dropped incident's last time is a wall time like the incidents' own`, () => {
      const r = new ServerRig();
      r.now += 5_000;
      r.wallStep = step;
      const flood = reconciling(r, "flood");
      const uuids = Array.from({ length: MAX_OPEN_INCIDENTS_PER_CLIENT + 1 }, (_, i) => `w-${String(i).padStart(5, "0")}`);
      r.snapshot(flood, uuids.map(unknownRunning));
      const wall = r.now + r.wallStep;
      expect(r.incidentDrops()).toEqual([{ clientId: "flood", count: 1, lastAt: wall, lastKind: "reconcile_terminate_local" }]);
      expect(new Set(r.incidents().map((i) => timestampMs(i.time!)))).toEqual(new Set([wall]));
    });
  }

  it("R-D11: 10,005 unknown running commands in one snapshot: all terminated, the client's incidents stop at its bound, the rest are counted exactly, another client's incident is still recorded, and all of it survives a restart", () => {
    const r = new ServerRig();
    const flood = reconciling(r, "flood");
    const uuids = Array.from({ length: MAX_OPEN_INCIDENTS + 5 }, (_, i) => `u-${String(i).padStart(5, "0")}`);
    const out = r.snapshot(flood, uuids.map(unknownRunning));
    const result = r.sent(out, flood, "reconcileResult").map((s) => s.env.payload.value as ReconcileResult);
    expect(result).toHaveLength(1);
    expect(result[0]!.terminateLocalIssueUuids).toEqual(uuids);
    expect(openOf(r, "flood")).toBe(MAX_OPEN_INCIDENTS_PER_CLIENT);
    const dropped = uuids.length - MAX_OPEN_INCIDENTS_PER_CLIENT;
    expect(r.incidentDrops()).toEqual([{ clientId: "flood", count: dropped, lastAt: T0, lastKind: "reconcile_terminate_local" }]);
    expect(r.droppedIncidents("flood")).toBe(dropped);
    expect(r.incidentsDropped()).toBe(dropped);
    // Durable, in one record per client and one total however many were dropped.
    const drops = of(out, "persist")
      .flatMap((p) => p.records)
      .filter((x) => x.table === "incident_drop" || x.table === "counter");
    expect(drops.map((x) => [x.table, x.key])).toEqual([
      ["incident_drop", "flood"],
      ["counter", "incidents_dropped"],
    ]);
    expect(r.disk.durable.get("counter")!.get("incidents_dropped")).toEqual({ count: dropped });

    // Another client's real incident is recorded.
    const other = reconciling(r, "victim");
    r.snapshot(other, [unknownRunning("victim-cmd")]);
    const theirs = r
      .incidents()
      .map(plainIncident)
      .filter((i) => i.clientId === "victim");
    expect(theirs.map((i) => [i.uuid, i.kind])).toEqual([["victim-cmd", "reconcile_terminate_local"]]);
    expect(r.droppedIncidents("victim")).toBe(0);

    const back = new ServerRig();
    back.st = restoreServer(r.cfg, r.disk.tables(), 2);
    serverInvariants(back.st);
    expect(openOf(back, "flood")).toBe(MAX_OPEN_INCIDENTS_PER_CLIENT);
    expect(openOf(back, "victim")).toBe(1);
    expect(back.droppedIncidents("flood")).toBe(dropped);
    expect(back.incidentsDropped()).toBe(dropped);
    // internal: the restored per-client index agrees (what the bounds are checked against)
    expect(back.st.openByClient.get("flood")).toBe(MAX_OPEN_INCIDENTS_PER_CLIENT);
  });

  it("R-D11: a client's open incidents stop at exactly MAX_OPEN_INCIDENTS_PER_CLIENT; acknowledging one makes room again", () => {
    const r = seeded({ a: MAX_OPEN_INCIDENTS_PER_CLIENT - 1 });
    const c = r.connect("a");
    storeIncident(r, c);
    expect(openOf(r, "a")).toBe(MAX_OPEN_INCIDENTS_PER_CLIENT);
    expect(r.incidentsDropped()).toBe(0);
    const out = storeIncident(r, c);
    expect(openOf(r, "a")).toBe(MAX_OPEN_INCIDENTS_PER_CLIENT);
    expect(
      of(out, "trace")
        .filter((t) => t.event === "incident_dropped")
        .map((t) => t.detail),
    ).toEqual([{ client: "a", kind: "agent_store_incident", uuid: "", why: "per-client bound" }]);
    expect(r.droppedIncidents("a")).toBe(1);
    expect(r.control({ op: "ack_incident", requestId: "ack", incidentId: "inc-1" })).toEqual({ ok: true });
    storeIncident(r, c);
    expect(openOf(r, "a")).toBe(MAX_OPEN_INCIDENTS_PER_CLIENT);
    expect(r.droppedIncidents("a")).toBe(1);
  });

  it("R-D11: at the total bound a client with fewer open incidents takes the heaviest client's newest one, which is counted; the heaviest's own is counted", () => {
    const per: Record<string, number> = {};
    const heavy = MAX_OPEN_INCIDENTS / MAX_OPEN_INCIDENTS_PER_CLIENT;
    for (let i = 0; i < heavy; i++) per[`h${i}`] = MAX_OPEN_INCIDENTS_PER_CLIENT;
    per.h0 = MAX_OPEN_INCIDENTS_PER_CLIENT - 1; // n - 1 in total: one more fits without eviction
    per.z = 0;
    const r = seeded(per);
    expect(r.incidents(true).length).toBe(MAX_OPEN_INCIDENTS - 1);
    const z = r.connect("z");
    storeIncident(r, z);
    expect(r.incidents(true).length).toBe(MAX_OPEN_INCIDENTS);
    expect(r.incidentsDropped()).toBe(0);
    // n + 1: the heaviest client (h1, the first at 100) gives up its newest incident.
    const newestH1 = r
      .incidents()
      .filter((i) => i.clientId === "h1")
      .at(-1)!.incidentId;
    const out = storeIncident(r, z);
    expect(r.incidents(true).length).toBe(MAX_OPEN_INCIDENTS);
    expect(openOf(r, "z")).toBe(2);
    expect(openOf(r, "h1")).toBe(MAX_OPEN_INCIDENTS_PER_CLIENT - 1);
    expect(r.incidents().some((i) => i.incidentId === newestH1)).toBe(false);
    expect(r.droppedIncidents("h1")).toBe(1);
    expect(
      of(out, "persist")
        .flatMap((p) => p.records)
        .some((x) => x.table === "incident" && x.key === newestH1 && x.value === null),
    ).toBe(true);
    // A client as heavy as the others (h2 at 100) is at its own bound: counted.
    const h2 = r.connect("h2");
    storeIncident(r, h2);
    expect(r.droppedIncidents("h2")).toBe(1);
    // h1 at 99 while the heaviest hold 100: swapping would only move the imbalance, so it is counted.
    const h1 = r.connect("h1");
    const before = r.incidentsDropped();
    const out2 = storeIncident(r, h1);
    expect(of(out2, "trace").find((t) => t.event === "incident_dropped")?.detail).toMatchObject({ client: "h1", why: "total bound" });
    expect(r.incidentsDropped()).toBe(before + 1);
    expect(r.incidents(true).length).toBe(MAX_OPEN_INCIDENTS);
  });

  it("R-D11: at MAX_INCIDENTS_KEPT the oldest acknowledged incident goes to make room", () => {
    const r = seeded({ a: 1 }, MAX_INCIDENTS_KEPT - 1);
    expect(r.incidents().length).toBe(MAX_INCIDENTS_KEPT);
    const c = r.connect("a");
    const out = storeIncident(r, c);
    expect(r.incidents().length).toBe(MAX_INCIDENTS_KEPT);
    expect(r.incidents().some((i) => i.incidentId === "inc-1")).toBe(false);
    expect(r.incidents().some((i) => i.incidentId === `inc-${MAX_INCIDENTS_KEPT + 1}`)).toBe(true);
    expect(
      of(out, "persist")
        .flatMap((p) => p.records)
        .filter((x) => x.table === "incident")
        .map((x) => [x.key, x.value === null]),
    ).toEqual([
      ["inc-1", true],
      [`inc-${MAX_INCIDENTS_KEPT + 1}`, false],
    ]);
  });

  it("R-D11: at MAX_INCIDENTS_KEPT an open incident older than every acknowledged one stays; the oldest acknowledged goes", () => {
    const r = seeded({ a: 1 }, MAX_INCIDENTS_KEPT - 1, true);
    expect(r.incidents()[0]).toMatchObject({ incidentId: "inc-1", clientId: "a" });
    storeIncident(r, r.connect("a"));
    expect(r.incidents().length).toBe(MAX_INCIDENTS_KEPT);
    expect(r.incidents().some((i) => i.incidentId === "inc-1")).toBe(true);
    expect(r.incidents().some((i) => i.incidentId === "inc-2")).toBe(false);
  });

  it("R-D11: the invariants catch a mis-keyed incident, a per-client index off by one, more open than MAX_OPEN_INCIDENTS, malformed drop counters and per-client drops over the total", () => {
    // setup: each state is corrupted on purpose (an invariant test)
    const cases: Array<[(r: ServerRig) => void, RegExp]> = [
      [(r) => void (r.st.incidents.get("inc-1")!.id = "zz"), /^incident key mismatch$/],
      [(r) => void r.st.openByClient.set("a", 3), /^open incident index drift for a$/],
      [(r) => void r.st.openByClient.set("b", 1), /^open incident index drift$/],
      [(r) => void r.st.incidentDrops.set("a", { clientId: "b", count: 1, lastAt: T0, lastKind: "k" }), /^drop counter of a malformed$/],
      [(r) => void r.st.incidentDrops.set("a", { clientId: "a", count: 0, lastAt: T0, lastKind: "k" }), /^drop counter of a malformed$/],
      [(r) => void r.st.incidentDrops.set("a", { clientId: "a", count: 2, lastAt: T0, lastKind: "k" }), /^per-client drop counts exceed the total$/],
    ];
    for (const [corrupt, message] of cases) {
      const r = seeded({ a: 2 });
      r.st.incidentsDropped = 1;
      serverInvariants(r.st);
      corrupt(r);
      expect(() => serverInvariants(r.st)).toThrow(message);
    }
    const per: Record<string, number> = {};
    for (let i = 0; i < MAX_OPEN_INCIDENTS / MAX_OPEN_INCIDENTS_PER_CLIENT; i++) per[`h${i}`] = MAX_OPEN_INCIDENTS_PER_CLIENT;
    per.z = 0;
    const full = seeded(per);
    full.st.incidents.set("x", { id: "x", clientId: "z", uuid: "", kind: "k", detail: "", at: T0, acknowledged: false });
    full.st.openByClient.set("z", 1);
    full.st.openIncidents++;
    expect(() => serverInvariants(full.st)).toThrow(new RegExp(`^${MAX_OPEN_INCIDENTS + 1} open incidents over the bound$`));
  });

  it("R-D11: the invariants catch a drifted open-incident index, a client over its bound and a drop counter of an unknown client", () => {
    // setup: each state is corrupted on purpose (an invariant test)
    const r = seeded({ a: 2 });
    r.st.openIncidents++;
    expect(() => serverInvariants(r.st)).toThrow(/open incident index drift/);
    const s = seeded({ a: MAX_OPEN_INCIDENTS_PER_CLIENT });
    s.st.incidents.set("x", { id: "x", clientId: "a", uuid: "", kind: "k", detail: "", at: T0, acknowledged: false });
    s.st.openByClient.set("a", MAX_OPEN_INCIDENTS_PER_CLIENT + 1);
    s.st.openIncidents++;
    expect(() => serverInvariants(s.st)).toThrow(/over the per-client bound/);
    const t = seeded({ a: 1 });
    t.st.incidentDrops.set("ghost", { clientId: "ghost", count: 1, lastAt: T0, lastKind: "k" });
    t.st.incidentsDropped = 1;
    expect(() => serverInvariants(t.st)).toThrow(/drop counter of unknown client ghost/);
    expect(() => serverInvariants(t.st)).toThrow(InvariantViolation);
  });
});

describe("client records (R-F6)", () => {
  it("R-F6 R-W10: a hello naming a new client id past maxClients is refused with CAPACITY and creates no record; known clients still register", () => {
    const r = new ServerRig({ maxClients: 2 });
    r.connect("a");
    const b = r.connect("b");
    expect(r.clientList().length).toBe(2);
    const c = r.open();
    const out = r.hello(c, "c");
    expectClosed(
      r,
      out,
      c,
      Code.CAPACITY,
      "client id c refused: the server keeps at most 2 client records (limits.maxClients) and holds 2; an operator may forget unused ones (rvbox forget-client)",
    );
    expect(r.client("c")).toBeUndefined();
    expect(of(out, "persist")).toEqual([]);
    expect(r.disk.durable.get("client")?.has("c")).toBe(false);
    // Existing clients are unaffected: b registers again (fencing its old session).
    r.step({ type: "conn_closed", conn: b, reason: "gone" });
    r.connect("b");
    expect(r.clientList().length).toBe(2);
  });

  it("R-F6: the default bound is MAX_CLIENTS, exactly: the last one fits, one more is refused", () => {
    const r = new ServerRig();
    r.store = false;
    expect(r.cfg.limits.maxClients).toBe(MAX_CLIENTS);
    // setup: MAX_CLIENTS - 1 records poked in (registering each through a hello and snapshot is slow)
    for (let i = 0; i < MAX_CLIENTS - 1; i++)
      r.st.clients.set(`c${i}`, {
        clientId: `c${i}`,
        generation: 1,
        instanceId: "i",
        conn: 0,
        pendingClaim: null,
        authorization: null,
        replaced: null,
        capacity: { running: 0, queued: 0, maxRunning: 0, maxQueued: 0 },
        lastSeen: T0,
        draining: false,
        labels: {},
      });
    r.connect("last");
    expect(r.clientList().length).toBe(MAX_CLIENTS);
    const c = r.open();
    expectClosed(r, r.hello(c, "one-more"), c, Code.CAPACITY);
    expect(r.clientList().length).toBe(MAX_CLIENTS);
  });

  it("R-F6: an operator forgets a client: refused while it has a live session; durable; the id registers again above its old generations", () => {
    const r = new ServerRig({ maxClients: 1 });
    const a = r.connect("a");
    r.running(a, "c1");
    expect(r.control({ op: "forget_client", requestId: "f0", clientId: "nobody" })).toEqual({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "unknown client nobody" },
    });
    expect(r.control({ op: "forget_client", requestId: "f1", clientId: "a" })).toEqual({
      ok: false,
      error: { code: Code.CONFLICT, message: `client a has a live session (connection ${a}); stop its agent first` },
    });
    r.step({ type: "conn_closed", conn: a, reason: "gone" });
    // (Forgetting a client with non-terminal commands ends them: admission-limits.test.ts.)
    r.submit("a", "c2");
    r.control({ op: "signal", requestId: "k2", uuid: "c2", signal: SignalKind.CANCEL });
    // A new session (generation 2) whose agent no longer has it ends it, then forget.
    const a2 = r.connect("a");
    expect(r.command("c1").state).toBe("interrupted");
    r.step({ type: "conn_closed", conn: a2, reason: "gone" });
    expect(r.client("a")!.generation).toBe(2n);
    expect(r.control({ op: "forget_client", requestId: "f3", clientId: "a" })).toEqual({ ok: true });
    expect(r.client("a")).toBeUndefined();
    expect(r.disk.durable.get("client")!.has("a")).toBe(false);
    expect(r.disk.durable.get("reconcile")?.has("a") ?? false).toBe(false);
    expect(r.command("c1").state).toBe("interrupted"); // history stays
    // The bound has room again: another client fits.
    const b = r.connect("b");
    expect(r.session(b)!.generation).toBe(3n);
    r.step({ type: "conn_closed", conn: b, reason: "gone" });
    // Forgetting survives a restart, and so does the generation floor.
    const back = new ServerRig({ maxClients: 1 });
    back.st = restoreServer({ ...r.cfg, limits: { ...r.cfg.limits, maxClients: 2 } }, r.disk.tables(), 2); // room for "a" again
    serverInvariants(back.st);
    expect(back.clientList().map((x) => x.clientId)).toEqual(["b"]);
    // The floor survived: "a" registers above its forgotten generation 2.
    const a3 = back.connect("a");
    expect(back.session(a3)!.generation).toBe(3n);
  });

  it("R-F6: forgetting a client deletes its drop counter; the total keeps it", () => {
    const r = seeded({ a: MAX_OPEN_INCIDENTS_PER_CLIENT });
    const c = r.connect("a");
    storeIncident(r, c);
    expect(r.droppedIncidents("a")).toBe(1);
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    expect(r.control({ op: "forget_client", requestId: "f", clientId: "a" })).toEqual({ ok: true });
    expect(r.droppedIncidents("a")).toBe(0);
    expect(r.disk.durable.get("incident_drop")!.has("a")).toBe(false);
    expect(r.incidentsDropped()).toBe(1);
    expect(restoreServer(r.cfg, r.disk.tables(), 2).incidentsDropped).toBe(1);
  });

  it("R-F6: the invariant catches more client records than the bound (unless restored that way)", () => {
    const r = new ServerRig({ maxClients: 1 });
    r.connect("a");
    // setup: a record over the bound poked in (an invariant test)
    r.st.clients.set("x", { ...r.st.clients.get("a")!, clientId: "x", conn: 0 });
    expect(() => serverInvariants(r.st)).toThrow(/2 client records over the bound 1/);
    // A server restarted with a lowered bound keeps what it has and admits no new id.
    const back = restoreServer({ ...r.cfg, limits: { ...r.cfg.limits, maxClients: 0 } }, r.disk.tables(), 2);
    expect(() => serverInvariants(back)).not.toThrow();
  });
});

describe("what an agent can grow at the server, at n and n + 1", () => {
  const incomplete = { case: "incomplete" as const, value: create(OutputIncompleteSchema, { streams: [OutputStream.STDOUT], reason: "pipe" }) };

  it("R-W10 R-O3: a command stores at most its bound of non-output events; the next one closes with CAPACITY and is not stored", () => {
    const r = new ServerRig();
    const c = r.connect("a");
    r.running(c, "c1");
    // internal: the row-event count and its bound are accounting (setup pokes the count; CAPACITY is what a peer sees)
    const cmd = r.cmd("c1");
    expect(rowEventBound(cmd)).toBe(SERVER_ROW_EVENTS_PER_COMMAND + 0 + 1);
    cmd.ingest.rowEvents = rowEventBound(cmd) - 1; // as if that many had been stored
    r.event(c, "c1", 2, incomplete);
    expect(cmd.ingest.rowEvents).toBe(rowEventBound(cmd));
    expect(r.command("c1").storedThrough).toBe(2);
    const out = r.event(c, "c1", 3, incomplete);
    expectClosed(r, out, c, Code.CAPACITY, `c1 already has ${rowEventBound(cmd)} stored non-output events, the most it may have`);
    expect(r.command("c1").storedThrough).toBe(2);
    expect(r.outputOf("c1").items.filter((i) => i.kind === "incomplete")).toHaveLength(1);
    expect(cmd.ingest.receivedThrough).toBe(2); // internal: not even received
    cmd.ingest.rowEvents = rowEventBound(cmd) + 1;
    expect(() => serverInvariants(r.st)).toThrow(/stored non-output events over the bound/);
  });

  it("R-W10: each stdin write and each revision raises the command's bound by one (their acks and results are stored rows)", () => {
    const r = new ServerRig();
    r.submit("off", "c1", { program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true });
    const before = rowEventBound(r.cmd("c1")); // internal: the bound is accounting (CAPACITY above is its observable end)
    r.control({ op: "stdin", requestId: "w1", uuid: "c1", data: new Uint8Array([1]), appendNewline: false });
    expect(rowEventBound(r.cmd("c1"))).toBe(before + 1);
  });

  it("R-S1 R-W3: the server keeps at most STDIN_WRITES_IN_FLIGHT stdin writes sent and unacknowledged per command, however small", () => {
    const r = new ServerRig();
    r.store = false;
    const c = r.connect("a");
    r.running(c, "c1", { program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true });
    r.log = [];
    for (let i = 1; i <= STDIN_WRITES_IN_FLIGHT + 1; i++)
      r.control({ op: "stdin", requestId: `w${i}`, uuid: "c1", data: new Uint8Array(0), appendNewline: false });
    const seqs = () => r.sent(r.log, c, "stdinWrite").map((s) => Number((s.env.payload.value as StdinWrite).writeSeq));
    expect(seqs()).toEqual(Array.from({ length: STDIN_WRITES_IN_FLIGHT }, (_, i) => i + 1));
    // Every write was taken (answered ok), the last one held back.
    expect(Array.from({ length: STDIN_WRITES_IN_FLIGHT + 1 }, (_, i) => r.replies.get(`w${i + 1}`)?.ok)).toEqual(Array(STDIN_WRITES_IN_FLIGHT + 1).fill(true));
    // One acknowledged: one more may go.
    const out = r.event(c, "c1", 2, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: 1n }) });
    expect(r.sent(out, c, "stdinWrite").map((s) => (s.env.payload.value as StdinWrite).writeSeq)).toEqual([BigInt(STDIN_WRITES_IN_FLIGHT + 1)]);
    expect(Math.max(...seqs())).toBe(STDIN_WRITES_IN_FLIGHT + 1);
  });

  it("R-O2 R-W7: the invariants catch more than SERVER_RECENT_DIGESTS digests and ingress bytes over the high watermark", () => {
    const r = new ServerRig();
    const c = r.connect("a");
    r.running(c, "c1");
    // setup: each state is corrupted on purpose (an invariant test)
    for (let s = 1; s <= SERVER_RECENT_DIGESTS + 1; s++) r.cmd("c1").ingest.digests[s] = s;
    expect(() => serverInvariants(r.st)).toThrow(/more than SERVER_RECENT_DIGESTS digests/);
    const k = new ServerRig({ ingressHigh: 100 });
    const d = k.connect("a");
    k.st.conns.get(d)!.ingressPending = 101;
    expect(() => serverInvariants(k.st)).toThrow(/ingress over its high watermark/);
  });
});
