// One client's part of the server state (core/server/client-part.ts):
// restored and dropped on its own, with every index and total exact. The
// tables are what a simulated server stored (sim/world.ts: several clients,
// faults, crashes, retention, pruning, incidents, jobs), so the rows are the
// ones the real core writes.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { serverInvariants } from "../../../core/index.js";
import { clientIdsOf, clientTables, dropClientPart, globalTables, holdsClient, restoreClientPart } from "../../../core/server/client-part.js";
import { restoreJobs } from "../../../core/server/jobs.js";
import { restoreServer } from "../../../core/server/restore.js";
import type { ServerConfig, ServerState } from "../../../core/server/server-types.js";
import { type ServerTables, rowsOf } from "../../../core/server/store.js";
import { create } from "@bufbuild/protobuf";
import { CommandLifecycle as L, Code, ControlErrorSchema, ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { MAX_OPEN_INCIDENTS_PER_CLIENT } from "../../../core/limits.js";
import { planSchedule } from "../../../sim/schedule.js";
import { drawSwarm } from "../../../sim/swarm.js";
import { World } from "../../../sim/world.js";
import { runs } from "../../support/runs.js";
import { ServerRig, argv, lifecycle, sha } from "../../support/server-rig.js";

// Each seed is a simulated world of up to MAX_STEPS steps (a quarter of a second):
// the mutation run (RVBOX_PROPERTY_SCALE) takes the first three.
const SEEDS = [4, 7, 11, 16, 22, 25, 26, 31, 36, 37].slice(0, runs(10));
const MAX_STEPS = 4000;

const made = new Map<number, { config: ServerConfig; tables: ServerTables; ids: string[] }>();
/** The durable tables of a simulated server after (at most) MAX_STEPS steps of seed `seed`. */
function stored(seed: number): { config: ServerConfig; tables: ServerTables; ids: string[] } {
  let m = made.get(seed);
  if (!m) {
    const sw = drawSwarm(seed);
    const w = new World(seed, sw, planSchedule(seed, sw));
    w.start();
    while (w.steps < MAX_STEPS && w.phase !== "done") {
      const ev = w.q.pop();
      if (!ev || ev.at > w.endAt) break;
      ev.run();
    }
    const tables = w.server.disk.snapshot();
    m = { config: w.server.config, tables, ids: clientIdsOf(tables) };
    made.set(seed, m);
  }
  return m;
}

/** Entries grouped by client, each group in its order (the order between clients is the order parts came in). */
function byClient<V>(entries: Iterable<[string, V]>, clientOf: (key: string, v: V) => string): Record<string, Array<[string, V]>> {
  const out: Record<string, Array<[string, V]>> = {};
  for (const [k, v] of entries) (out[clientOf(k, v)] ??= []).push([k, v]);
  return out;
}
const sorted = <K, V>(m: Map<K, V>): Array<[K, V]> => [...m].sort(([a], [b]) => (String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0));
const nonDecreasing = (xs: number[]): boolean => xs.every((x, i) => i === 0 || xs[i - 1]! <= x);

/**
 * The state, comparable: every map and index in full, with the order that must hold within each client.
 * internal by design: this module moves a client's part of the state in and out, and "changing nothing"
 * means every map and index (no view shows them all).
 */
function canonical(st: ServerState) {
  const clientOfCommand = (uuid: string) => st.commands.get(uuid)!.clientId;
  return {
    config: st.config,
    rng: st.rng,
    clients: sorted(st.clients),
    conns: sorted(st.conns),
    commands: byClient(st.commands, (_k, c) => c.clientId),
    active: byClient(
      [...st.active].map((u) => [u, 0] as [string, number]),
      clientOfCommand,
    ),
    history: byClient(st.history, clientOfCommand),
    metaBytes: st.metaBytes,
    pruned: byClient(st.pruned, (_k, p) => p.clientId),
    clientOutput: sorted(st.clientOutput).map(([id, e]) => [id, e.bytes, [...e.uuids]]),
    incidents: byClient(st.incidents, (_k, i) => i.clientId),
    incidentSeq: st.incidentSeq,
    openIncidents: st.openIncidents,
    openByClient: sorted(st.openByClient),
    openOverByClient: sorted(st.openOverByClient),
    incidentDrops: sorted(st.incidentDrops),
    incidentsDropped: st.incidentsDropped,
    dropsDirty: [...st.dropsDirty].sort(),
    generationFloor: st.generationFloor,
    clientsAtRestore: st.clientsAtRestore,
    audit: [...st.audit],
    auditSeq: st.auditSeq,
    auditDropped: st.auditDropped,
    auditAtRestore: st.auditAtRestore,
    jobs: [...st.jobs], // internal, as above
    activeJobs: [...st.activeJobs],
    gate: st.gate,
    wake: st.wake,
  };
}

/** The orders kept across clients: history by end time, the pruned ledger by prune time (internal by design, as canonical above). */
function expectGlobalOrders(st: ServerState): void {
  expect(nonDecreasing([...st.history.values()])).toBe(true);
  expect(nonDecreasing([...st.pruned.values()].map((p) => p.at))).toBe(true);
}

/** A server restored from the global tables, then each client's part in `order`, then the jobs; invariants after each. */
function restoreByParts(config: ServerConfig, tables: ServerTables, order: string[]): ServerState {
  const st = restoreServer(config, globalTables(tables, ["job"]), 5);
  serverInvariants(st);
  for (const id of order) {
    expect(restoreClientPart(st, id, clientTables(tables, id))).toEqual({ ok: true });
    serverInvariants(st);
  }
  restoreJobs(st, rowsOf(tables, "job"));
  serverInvariants(st);
  return st;
}

const seedAndOrder = fc.constantFrom(...SEEDS).chain((seed) => {
  const ids = stored(seed).ids;
  return fc.tuple(fc.constant(seed), fc.shuffledSubarray(ids, { minLength: ids.length, maxLength: ids.length }));
});

describe("per-client server state", () => {
  it("the simulated tables name several clients (the properties below are not vacuous)", () => {
    const counts = SEEDS.map((s) => stored(s).ids.length);
    expect(Math.min(...counts)).toBeGreaterThanOrEqual(2);
    const rows = (t: string) => SEEDS.reduce((n, s) => n + (stored(s).tables.get(t)?.size ?? 0), 0);
    for (const t of ["command", "event", "pruned", "incident", "client"]) expect(rows(t), t).toBeGreaterThan(0);
  }, 120_000);

  it("restoring all rows at once equals restoring client by client, in any order", () => {
    fc.assert(
      fc.property(seedAndOrder, ([seed, order]) => {
        const { config, tables } = stored(seed);
        const whole = restoreServer(config, tables, 5);
        const parts = restoreByParts(config, tables, order);
        expect(canonical(parts)).toEqual(canonical(whole));
        expectGlobalOrders(whole);
        expectGlobalOrders(parts);
      }),
      { numRuns: 30 },
    );
  }, 120_000);

  it("dropping a client and restoring its rows gives back an equal state; invariants hold after each", () => {
    fc.assert(
      fc.property(seedAndOrder, ([seed, order]) => {
        const { config, tables } = stored(seed);
        const st = restoreServer(config, tables, 5);
        const before = canonical(st);
        // Drop several, then restore them in another order.
        const some = order.slice(0, Math.max(1, Math.ceil(order.length / 2)));
        const dropped: string[] = [];
        for (const id of some) {
          const r = dropClientPart(st, id);
          serverInvariants(st);
          if (!r.ok) {
            // Only a job with work for the client keeps it (a restored server has no connection and nothing in flight).
            expect(r.error.code).toBe(Code.CONFLICT);
            expect(r.error.message).toMatch(/^job .* still has work for client/);
            continue;
          }
          expect(holdsClient(st, id)).toBe(false);
          dropped.push(id);
        }
        for (const id of [...dropped].reverse()) {
          expect(restoreClientPart(st, id, clientTables(tables, id))).toEqual({ ok: true });
          serverInvariants(st);
        }
        const after = canonical(st);
        expect(after).toEqual(before);
        expectGlobalOrders(st);
      }),
      { numRuns: 30 },
    );
  }, 120_000);

  it("a part the server already holds, or rows of another client, are refused and change nothing", () => {
    const seed = SEEDS.find((s) => stored(s).ids.length >= 2)!;
    const { config, tables, ids } = stored(seed);
    const st = restoreServer(config, tables, 5);
    const before = canonical(st);
    expect(restoreClientPart(st, ids[0]!, clientTables(tables, ids[0]!))).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
    const fresh = restoreServer(config, globalTables(tables), 5);
    const other = restoreClientPart(fresh, ids[0]!, clientTables(tables, ids[1]!));
    expect(other).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(holdsClient(fresh, ids[0]!) || holdsClient(fresh, ids[1]!)).toBe(false);
    expect(canonical(st)).toEqual(before);
  }, 120_000);

  it("dropping a client with a live connection, or while a persist is not yet durable, is refused with CODE_CONFLICT and changes nothing", () => {
    const r = new ServerRig();
    r.connect("a");
    r.submit("a", "c1");
    r.submit("b", "c2");
    const before = structuredClone(canonical(r.st));
    expect(dropClientPart(r.st, "a")).toMatchObject({ ok: false, error: { code: Code.CONFLICT, message: "client a has a live connection" } });
    expect(canonical(r.st)).toEqual(before);
    r.autoDurable = false;
    r.submit("b", "c3");
    expect(dropClientPart(r.st, "b")).toMatchObject({ ok: false, error: { code: Code.CONFLICT, message: "a persist is not yet durable" } });
    r.flush();
    expect(dropClientPart(r.st, "b")).toEqual({ ok: true });
    serverInvariants(r.st);
    expect(holdsClient(r.st, "b")).toBe(false);
    expect([r.findCommand("c2"), r.findCommand("c3")]).toEqual([undefined, undefined]);
    expect(r.client("b")).toBeUndefined();
    // Its rows are still in the store: restoring them gives the client back as a restart would.
    const tables = r.disk.tables();
    expect(restoreClientPart(r.st, "b", clientTables(tables, "b"))).toEqual({ ok: true });
    serverInvariants(r.st);
    const whole = restoreServer(r.cfg, tables, 1);
    expect(canonical(r.st).commands.b).toEqual(canonical(whole).commands.b);
  });

  it("R-D11: a client whose incidents were dropped under a flood is dropped whole (its open and dropped counts go with it) and comes back with its rows", () => {
    const r = new ServerRig();
    const flood = r.open();
    r.hello(flood, "flood");
    const uuids = Array.from({ length: MAX_OPEN_INCIDENTS_PER_CLIENT + 3 }, (_, i) => `f-${String(i).padStart(4, "0")}`);
    r.snapshot(
      flood,
      uuids.map((u) => ({ issueUuid: u, lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: sha(u) })),
    );
    r.connect("other");
    r.submit("other", "o1");
    expect(r.droppedIncidents("flood")).toBe(3);
    r.step({ type: "conn_closed", conn: flood, reason: "gone" });
    const totalDropped = r.incidentsDropped();
    expect(dropClientPart(r.st, "flood")).toEqual({ ok: true });
    serverInvariants(r.st);
    expect(holdsClient(r.st, "flood")).toBe(false);
    expect(r.incidents().filter((i) => i.clientId === "flood")).toEqual([]);
    expect(r.droppedIncidents("flood")).toBe(0);
    expect(r.incidentDrops()).toEqual([]);
    // The server-wide total stays: it counts what this server dropped (R-D11's visible count).
    expect(r.incidentsDropped()).toBe(totalDropped);
    // Nothing of the dropped client is written again by this server.
    const later = r.submit("other", "o2");
    expect(later).toMatchObject({ ok: true });
    expect(r.disk.tables().get("incident_drop")?.has("flood")).toBe(true); // its rows stay for whoever adopts it
    // Adopted again (here, by the same server) from its rows: the counts are back.
    expect(restoreClientPart(r.st, "flood", clientTables(r.disk.tables(), "flood"))).toEqual({ ok: true });
    serverInvariants(r.st);
    expect(r.droppedIncidents("flood")).toBe(3);
    expect(r.incidents(true).filter((i) => i.clientId === "flood")).toHaveLength(MAX_OPEN_INCIDENTS_PER_CLIENT);
  });

  it("adopting a part is refused, changing nothing, for an empty client id and for a command id the server already holds", () => {
    const r = new ServerRig();
    r.connect("a");
    r.submit("a", "c1");
    r.submit("b", "c2");
    expect(dropClientPart(r.st, "b")).toEqual({ ok: true });
    const part = clientTables(r.disk.tables(), "b");
    const before = structuredClone(canonical(r.st));
    expect(restoreClientPart(r.st, "", part)).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "client id is required" } });
    // The same part with one more table row: b's command under an id a's command has.
    const withRow = (table: string, key: string, value: unknown): ServerTables => ({
      get: (t) => (t === table ? new Map([...(part.get(t) ?? []), [key, value]]) : part.get(t)),
    });
    const c2 = part.get("command")!.get("c2") as Record<string, unknown>;
    expect(restoreClientPart(r.st, "b", withRow("command", "c1", { ...c2, uuid: "c1" }))).toMatchObject({
      ok: false,
      error: { code: Code.CONFLICT, message: "command c1 is already held" },
    });
    // A pruned record of b under that id.
    expect(restoreClientPart(r.st, "b", withRow("pruned", "c1", { uuid: "c1", clientId: "b" }))).toMatchObject({
      ok: false,
      error: { code: Code.CONFLICT, message: "command c1 is already held" },
    });
    expect(canonical(r.st)).toEqual(before);
    expect(holdsClient(r.st, "b")).toBe(false);
    expect(restoreClientPart(r.st, "b", part)).toEqual({ ok: true });
    serverInvariants(r.st);
    expect(holdsClient(r.st, "b")).toBe(true);
  });

  it("adopting a part whose incident id the server already holds (another client's) is refused and changes nothing", () => {
    // A simulated server whose incidents name at least two clients.
    const pick = SEEDS.map((seed) => ({ seed, ...stored(seed) })).find(
      ({ tables }) => new Set([...(tables.get("incident") ?? new Map()).values()].map((v) => (v as { clientId: string }).clientId)).size >= 2,
    );
    expect(pick, "a seed with incidents of two clients").toBeDefined();
    const { config, tables } = pick!;
    const incidents = [...tables.get("incident")!] as Array<[string, { clientId: string }]>;
    const [xId, x] = incidents[0]!;
    const [yId] = incidents.find(([, v]) => v.clientId !== x.clientId)!;
    const st = restoreServer(config, tables, 5);
    expect(dropClientPart(st, x.clientId)).toEqual({ ok: true });
    const part = clientTables(tables, x.clientId);
    // x's part, plus one of x's incidents under the id of y's incident, which the server holds.
    const withClash: ServerTables = { get: (t) => (t === "incident" ? new Map([...part.get(t)!, [yId, { ...x }]]) : part.get(t)) };
    const before = structuredClone(canonical(st));
    expect(restoreClientPart(st, x.clientId, withClash)).toMatchObject({
      ok: false,
      error: { code: Code.CONFLICT, message: `incident ${yId} is already held` },
    });
    expect(canonical(st)).toEqual(before);
    expect(holdsClient(st, x.clientId)).toBe(false);
    expect(restoreClientPart(st, x.clientId, part)).toEqual({ ok: true });
    serverInvariants(st);
    expect(st.incidents.get(xId)).toEqual(x); // internal: the adopted row itself (no peer lists another client's incidents here)
  }, 120_000);

  it("a client with work of an unfinished job is not dropped", () => {
    const r = new ServerRig();
    r.connect("a");
    const b = r.connect("b");
    const res = r.control({ op: "submit_job", requestId: "j", jobId: "job-1", clients: ["a", "b"], spec: create(ExecutionSpecSchema, argv("true")) });
    expect(res).toMatchObject({ ok: true });
    r.step({ type: "conn_closed", conn: b, reason: "test" });
    expect(r.client("b")!.connected).toBe(false);
    const before = structuredClone(canonical(r.st));
    expect(dropClientPart(r.st, "b")).toMatchObject({ ok: false, error: { code: Code.CONFLICT, message: "job job-1 still has work for client b" } });
    expect(canonical(r.st)).toEqual(before);
    serverInvariants(r.st);
  });

  it("anything the server holds of a client counts as holding it: its record alone, a command alone, a pruned record alone, an incident alone; adopting it then is refused", () => {
    const r = new ServerRig({ historyMs: 1_000 });
    const close = (conn: number) => r.step({ type: "conn_closed", conn, reason: "gone" });
    // rec: a record and nothing else.
    close(r.connect("rec"));
    // cmd: a command submitted for a client that never registered.
    r.submit("cmd", "u-cmd");
    // pru: its record forgotten, its one command ended and pruned from history.
    const pru = r.connect("pru");
    r.running(pru, "u-pru");
    r.event(pru, "u-pru", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    close(pru);
    expect(r.control({ op: "forget_client", requestId: "f-pru", clientId: "pru" })).toEqual({ ok: true });
    r.now += 1_000;
    r.step({ type: "tick" });
    expect(r.findCommand("u-pru")).toBeUndefined();
    // inc: its record forgotten, one acknowledged incident left.
    const inc = r.connect("inc");
    r.frame(inc, {
      case: "error",
      value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "disk" }), closeSession: false },
    });
    const id = r.incidents().find((i) => i.clientId === "inc")!.incidentId;
    r.control({ op: "ack_incident", requestId: "ack", incidentId: id });
    close(inc);
    expect(r.control({ op: "forget_client", requestId: "f-inc", clientId: "inc" })).toEqual({ ok: true });
    const empty: ServerTables = { get: () => undefined };
    for (const clientId of ["rec", "cmd", "pru", "inc"]) {
      expect(holdsClient(r.st, clientId), clientId).toBe(true);
      expect(restoreClientPart(r.st, clientId, empty)).toEqual({
        ok: false,
        error: { code: Code.CONFLICT, message: `the server already holds client ${clientId}` },
      });
    }
    expect(holdsClient(r.st, "nobody")).toBe(false);
    expect(restoreClientPart(r.st, "nobody", empty)).toEqual({ ok: true });
    serverInvariants(r.st);
  });

  it("a job blocks dropping a client only while that client's own child is pending or started", () => {
    const r = new ServerRig();
    const close = (conn: number) => r.step({ type: "conn_closed", conn, reason: "gone" });
    const a = r.connect("a");
    close(r.connect("b"));
    const job = (jobId: string, clients: string[], maxConcurrency = "") =>
      r.control({ op: "submit_job", requestId: jobId, jobId, clients, spec: create(ExecutionSpecSchema, argv("true")), maxConcurrency });
    const finish = (uuid: string) => {
      r.accept(a, uuid);
      r.event(a, uuid, 1, lifecycle(L.RUNNING));
      r.event(a, uuid, 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    };
    // b's child second, pending behind a's.
    job("j1", ["a", "b"], "1");
    expect(dropClientPart(r.st, "b")).toEqual({ ok: false, error: { code: Code.CONFLICT, message: "job j1 still has work for client b" } });
    // a's child done, b's started (queued here: b is away).
    finish("j1.1");
    expect(r.command("j1.2").state).toBe("queued");
    expect(dropClientPart(r.st, "b")).toEqual({ ok: false, error: { code: Code.CONFLICT, message: "job j1 still has work for client b" } });
    r.control({ op: "cancel_job", requestId: "c1", jobId: "j1" });
    // j2 is still running on a, but b's child of it has ended: nothing blocks.
    job("j2", ["b", "a"]);
    r.control({ op: "signal", requestId: "k", uuid: "j2.1", signal: SignalKind.CANCEL });
    expect(r.getJob("j2")!.endedTime).toBeUndefined();
    expect(dropClientPart(r.st, "b")).toEqual({ ok: true });
  });
});
