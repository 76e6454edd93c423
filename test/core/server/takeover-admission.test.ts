// Issue 12 items 5-7: submits to unknown clients, exact-instance
// authorization (revoke, dismiss), and what an authorized takeover does to
// the instance it displaced (CODE_REPLACED).
import { rowOf } from "../../../core/server/store.js";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { BACKOFF_CAP_MS, CLIENT_SUGGESTION_MAX_DISTANCE, MAX_CLIENT_SUGGESTIONS, MAX_INSTANCE_ID_CHARS } from "../../../core/limits.js";
import { boundedDistance, clientsNamedBy, closestClients, globMatches } from "../../../core/server/client-names.js";
import { restoreServer } from "../../../core/index.js";
import { Harness } from "../../support/harness.js";
import { expectClosed, ServerRig } from "../../support/server-rig.js";
import { plainClaim } from "../../support/pair.js";

const spec = () => create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["true"] } } });
const submit = (r: ServerRig, clientId: string, uuid: string, allowUnknownClient = false) =>
  r.control({ op: "submit", requestId: `s-${uuid}`, uuid, clientId, spec: spec(), allowUnknownClient });
const lastError = (h: Harness, to: string) => h.sent("error", to).at(-1)?.payload.value as { error?: { code: number; message: string } } | undefined;

describe("client names in refusals", () => {
  it("edit distance is exact up to its bound and stops beyond it", () => {
    expect(boundedDistance("web-1", "web-1", 3)).toBe(0);
    expect(boundedDistance("web-1", "wbe-1", 3)).toBe(2);
    expect(boundedDistance("web-1", "web-12", 3)).toBe(1);
    expect(boundedDistance("abcdef", "uvwxyz", 3)).toBe(4);
    expect(boundedDistance("a", "abcdefgh", 3)).toBe(4);
    // Exactly at the bound: lengths differing by the bound, and a row whose best reaches it early.
    expect(boundedDistance("ab", "abxyz", 3)).toBe(3);
    expect(boundedDistance("xyzdef", "abcdef", 3)).toBe(3);
    expect(boundedDistance("xyzdef", "abcdeg", 3)).toBe(4);
  });

  it("a typo exactly CLIENT_SUGGESTION_MAX_DISTANCE edits away is still suggested; one more is not", () => {
    const d = CLIENT_SUGGESTION_MAX_DISTANCE;
    const known = ["db-primary"];
    // Not a prefix either way; d substitutions at the front.
    expect(closestClients(known, `${"x".repeat(d)}${"db-primary".slice(d)}`)).toEqual(["db-primary"]);
    expect(closestClients(known, `${"x".repeat(d + 1)}${"db-primary".slice(d + 1)}`)).toEqual([]);
    // d letters missing (lengths differ by exactly d).
    expect(closestClients(known, "dbprima")).toEqual(["db-primary"]);
  });

  it("closest ids: prefixes first, then by distance, at most MAX_CLIENT_SUGGESTIONS, none further than the bound", () => {
    const known = ["web-1", "web-2", "web-10", "db-1", "cache", "webserver-long-name"];
    expect(closestClients(known, "web")).toEqual(["web-1", "web-10", "web-2"].slice(0, MAX_CLIENT_SUGGESTIONS));
    expect(closestClients(known, "web-3")).toEqual(["web-1", "web-2", "web-10"]);
    expect(closestClients(known, "cahce")).toEqual(["cache"]);
    expect(closestClients(known, "x".repeat(CLIENT_SUGGESTION_MAX_DISTANCE + 2))).toEqual([]);
    expect(closestClients(known, "CACHE")).toEqual(["cache"]);
  });

  it("lists and wildcards name the known ids they match", () => {
    expect(globMatches("web-*", "web-1")).toBe(true);
    expect(globMatches("*-1", "db-1")).toBe(true);
    expect(globMatches("w*b*1", "web-1")).toBe(true);
    expect(globMatches("web-*", "db-1")).toBe(false);
    expect(globMatches("a*a", "a")).toBe(false);
    // Middle parts are found in order, each after the one before, and inside the last part's start.
    expect(globMatches("a*z*c", "abc")).toBe(false);
    expect(globMatches("a*b*b*c", "abc")).toBe(false);
    expect(globMatches("a*b*b*c", "abbc")).toBe(true);
    expect(globMatches("web-*-eu-*", "web-7-eu-2")).toBe(true);
    expect(globMatches("web-*-eu-*", "web-7-us-2")).toBe(false);
    expect(globMatches("*-eu-*-eu", "x-eu")).toBe(false);
    // A list as typed with spaces after the commas, and empty entries ignored.
    expect(clientsNamedBy(["web-1", "web-2", "db-1"], "web-1, db-1,,")).toEqual({ ids: ["web-1", "db-1"], total: 2 });
    expect(clientsNamedBy(["web-1", "web-2", "db-1", "web-3", "web-4"], "web-*")).toEqual({ ids: ["web-1", "web-2", "web-3"], total: 4 });
    expect(clientsNamedBy(["web-1", "web-2", "db-1"], "web-1,db-1")).toEqual({ ids: ["web-1", "db-1"], total: 2 });
  });
});

describe("submit admission: unknown client ids", () => {
  it("R-D1: a submit for a client id the server has never seen is refused NOT_FOUND with the closest known ids and nothing stored; allow_unknown_client queues it", () => {
    const r = new ServerRig();
    r.connect("web-1");
    r.connect("web-2");
    const res = submit(r, "web-3", "u1");
    expect(res).toEqual({
      ok: false,
      error: {
        code: Code.NOT_FOUND,
        message:
          "no client web-3 has registered with this server; did you mean web-1, web-2? (allow_unknown_client queues it for an id that has not registered yet)",
      },
    });
    expect(r.findCommand("u1")).toBeUndefined();
    expect(r.disk.durable.get("command")?.has("u1") ?? false).toBe(false);
    expect(submit(r, "nosuch-client", "u2")).toMatchObject({
      ok: false,
      error: { code: Code.NOT_FOUND, message: expect.stringMatching(/^no client nosuch-client has registered with this server \(/) },
    });
    // A server nobody has registered with yet says so.
    const empty = new ServerRig();
    expect(submit(empty, "web-1", "u3")).toMatchObject({
      ok: false,
      error: { code: Code.NOT_FOUND, message: expect.stringContaining("no client has registered yet") },
    });
    // R-D1: with allow_unknown_client the command is queued for the id and dispatched once it registers.
    expect(submit(r, "later", "u9", true)).toEqual({ ok: true, uuid: "u9", revision: 1 });
    expect(r.command("u9").state).toBe("queued");
    const c = r.connect("later");
    expect(r.command("u9").state).toBe("dispatched");
    // Dispatched on that session: the frame went to it, targeting its generation.
    const sentTo = r.sent(r.log, c, "commandDispatch").map((x) => x.env.payload.value as { issueUuid: string; targetSessionGeneration: bigint });
    expect(sentTo.map((d) => [d.issueUuid, d.targetSessionGeneration])).toEqual([["u9", r.session(c)!.generation]]);
  });

  it("an unknown id with ',' or '*' is refused as a list or wildcard, naming the known ids it matches, even with allow_unknown_client; a known one is admitted", () => {
    const r = new ServerRig();
    r.connect("web-1");
    r.connect("web-2");
    expect(submit(r, "web-1,web-2", "u1", true)).toEqual({
      ok: false,
      error: {
        code: Code.VALIDATION,
        message:
          "client id web-1,web-2 looks like a list or a wildcard (it names web-1, web-2); multi-client runs are not supported yet: submit once per client",
      },
    });
    expect(submit(r, "db-*", "u2")).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: expect.stringContaining("(it names no known client)") },
    });
    // More matches than MAX_CLIENT_SUGGESTIONS: the first ones and how many more.
    for (const id of ["web-3", "web-4", "web-5"]) r.connect(id);
    expect(submit(r, "web-*", "u3")).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: expect.stringContaining("(it names web-1, web-2, web-3 and 2 more)") },
    });
    expect(r.listCommands().length).toBe(0);
    // A known client id is admitted whatever its characters, and a retried submit is answered
    // like the original even after the client was forgotten.
    const odd = r.connect("odd,id*");
    r.step({ type: "conn_closed", conn: odd, reason: "gone" });
    expect(submit(r, "odd,id*", "u1")).toMatchObject({ ok: true });
    r.control({ op: "signal", requestId: "cancel", uuid: "u1", signal: SignalKind.CANCEL });
    expect(r.control({ op: "forget_client", requestId: "f", clientId: "odd,id*" })).toEqual({ ok: true });
    expect(submit(r, "odd,id*", "u1")).toEqual({ ok: true, uuid: "u1", revision: 2 });
  });
});

describe("authorize: only the exact pending or replaced instance", () => {
  const claimed = (): ServerRig => {
    const r = new ServerRig();
    r.connect("a", "I-0123456789abcdef");
    const j = r.open();
    expectClosed(r, r.hello(j, "a", "J-fedcba9876543210"), j, Code.IDENTITY_CONFLICT);
    return r;
  };
  const auth = (r: ServerRig, instanceId: string, instanceNotYetSeen = false, clientId = "a") =>
    r.control({ op: "authorize", requestId: `a-${instanceId}-${instanceNotYetSeen}-${clientId}`, clientId, instanceId, instanceNotYetSeen });

  it("R-F5: a prefix of the claimant, another instance, or the current one is refused VALIDATION and stores nothing", () => {
    const r = claimed();
    expect(auth(r, "J-fedcba")).toEqual({
      ok: false,
      error: {
        code: Code.VALIDATION,
        message: "instance J-fedcba is not the pending claimant of client a (that is J-fedcba9876543210); give the full id, not a prefix",
      },
    });
    expect(auth(r, "K")).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "instance K is not the pending claimant of client a (that is J-fedcba9876543210)" },
    });
    expect(auth(r, "I-0123456789abcdef")).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "instance I-0123456789abcdef already holds client a; nothing to authorize" },
    });
    expect(auth(r, "I-0123456789abcdef", true)).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(auth(r, "", true)).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "instance id must be 1-128 printable ASCII characters" } });
    expect(r.client("a")!.authorizedInstanceId).toBe("");
  });

  it("R-F5: a client with no claim is refused unless instance_not_yet_seen; an unknown client is NOT_FOUND", () => {
    const r = new ServerRig();
    r.connect("a", "I");
    expect(auth(r, "J")).toEqual({
      ok: false,
      error: {
        code: Code.VALIDATION,
        message: "client a has no pending claim: no other instance has tried it; to authorize an instance that has not tried yet, set instance_not_yet_seen",
      },
    });
    expect(auth(r, "J", false, "b")).toMatchObject({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "no client b has registered with this server; did you mean a?" },
    });
    expect(auth(r, "J", true)).toEqual({ ok: true, instanceId: "J", expiresAt: r.now + r.cfg.limits.authorizationTtlMs });
    expect(r.client("a")!.authorizedInstanceId).toBe("J");
  });

  it("R-F5: the exact claimant is authorized; revoking withdraws it durably, so its next hello is refused again", () => {
    const r = claimed();
    expect(auth(r, "J-fedcba9876543210")).toEqual({ ok: true, instanceId: "J-fedcba9876543210", expiresAt: r.now + r.cfg.limits.authorizationTtlMs });
    expect(r.control({ op: "revoke_authorization", requestId: "rv", clientId: "a" })).toEqual({ ok: true, instanceId: "J-fedcba9876543210" });
    expect(r.client("a")!.authorizedInstanceId).toBe("");
    expect(rowOf(r.disk.durable, "client", "a")!.authorization).toBeNull();
    expect(r.control({ op: "revoke_authorization", requestId: "rv2", clientId: "a" })).toEqual({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "client a has no authorization to revoke" },
    });
    expect(r.control({ op: "revoke_authorization", requestId: "rv3", clientId: "zz" })).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND } });
    const j = r.open();
    expectClosed(r, r.hello(j, "a", "J-fedcba9876543210"), j, Code.IDENTITY_CONFLICT);
  });

  it("R-F5: an instance id of 1-128 printable ASCII characters: the bounds themselves are accepted, anything else refused", () => {
    const r = new ServerRig();
    r.connect("a", "I");
    const refused = { ok: false, error: { code: Code.VALIDATION, message: `instance id must be 1-${MAX_INSTANCE_ID_CHARS} printable ASCII characters` } };
    for (const bad of ["x".repeat(MAX_INSTANCE_ID_CHARS + 1), "J\tK", "J\u00e9"]) expect(auth(r, bad, true)).toEqual(refused);
    for (const good of ["J", "x".repeat(MAX_INSTANCE_ID_CHARS), "J~!"]) expect(auth(r, good, true)).toMatchObject({ ok: true, instanceId: good });
  });

  it("R-F5: an authorization can be revoked until the moment it expires, not at that moment", () => {
    const r = claimed();
    const at = r.now;
    auth(r, "J-fedcba9876543210");
    r.now = at + r.cfg.limits.authorizationTtlMs - 1;
    expect(r.control({ op: "revoke_authorization", requestId: "rv1", clientId: "a" })).toEqual({ ok: true, instanceId: "J-fedcba9876543210" });
    auth(r, "J-fedcba9876543210");
    r.now += r.cfg.limits.authorizationTtlMs;
    expect(r.control({ op: "revoke_authorization", requestId: "rv2", clientId: "a" })).toEqual({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "client a has no authorization to revoke" },
    });
  });

  it("R-F5: registration is traced with its connection, client and generation; an authorization consumed is traced whether or not the client was live", () => {
    const r = claimed();
    auth(r, "J-fedcba9876543210");
    const j = r.open();
    r.hello(j, "a", "J-fedcba9876543210");
    const b = r.connect("b", "I");
    r.step({ type: "conn_closed", conn: b, reason: "gone" });
    auth(r, "K", true, "b");
    const k = r.open();
    r.hello(k, "b", "K");
    const names = new Set(["registered", "authorization_consumed"]);
    const traces = r.log.flatMap((e) => (e.type === "trace" && names.has(e.event) ? [[e.event, e.detail]] : []));
    expect(traces.slice(1)).toEqual([
      ["authorization_consumed", { client: "a", instance: "J-fedcba9876543210" }],
      ["registered", { conn: j, client: "a", generation: 2 }],
      ["registered", { conn: b, client: "b", generation: 1 }],
      ["authorization_consumed", { client: "b", instance: "K" }],
      ["registered", { conn: k, client: "b", generation: 2 }],
    ]);
  });

  it("every change an operator makes to a client record is traced with the client and what changed", () => {
    const r = claimed();
    auth(r, "J-fedcba9876543210");
    r.control({ op: "revoke_authorization", requestId: "rv", clientId: "a" });
    r.control({ op: "dismiss_claim", requestId: "d", clientId: "a" });
    r.control({ op: "set_draining", requestId: "dr1", clientId: "a", draining: true });
    r.control({ op: "set_draining", requestId: "dr2", clientId: "a", draining: true });
    r.control({ op: "set_draining", requestId: "dr3", clientId: "a", draining: false });
    r.control({ op: "set_labels", requestId: "l", clientId: "a", set: { role: "web", zone: "eu" }, remove: [] });
    r.step({ type: "conn_closed", conn: r.st.clients.get("a")!.conn, reason: "gone" });
    r.control({ op: "forget_client", requestId: "f", clientId: "a" });
    const names = new Set(["authorization_revoked", "claim_dismissed", "client_draining", "client_undrained", "client_labels", "client_forgotten"]);
    expect(r.log.flatMap((e) => (e.type === "trace" && names.has(e.event) ? [[e.event, e.detail]] : []))).toEqual([
      ["authorization_revoked", { client: "a", instance: "J-fedcba9876543210" }],
      ["claim_dismissed", { client: "a", instance: "J-fedcba9876543210" }],
      ["client_draining", { client: "a" }],
      ["client_undrained", { client: "a" }],
      ["client_labels", { client: "a", labels: "role=web,zone=eu" }],
      ["client_forgotten", { client: "a", generation: 1 }],
    ]);
  });

  it("R-F4: dismissing a claim forgets it durably; with none (or an unknown client) it is NOT_FOUND; the claimant trying again is recorded anew", () => {
    const r = claimed();
    expect(r.control({ op: "dismiss_claim", requestId: "d", clientId: "a" })).toEqual({ ok: true, instanceId: "J-fedcba9876543210" });
    expect(r.claimOf("a")).toBeUndefined();
    expect(rowOf(r.disk.durable, "client", "a")!.pendingClaim).toBeNull();
    expect(r.control({ op: "dismiss_claim", requestId: "d2", clientId: "a" })).toEqual({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "client a has no pending claim" },
    });
    expect(r.control({ op: "dismiss_claim", requestId: "d3", clientId: "zz" })).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND } });
    expect(auth(r, "J-fedcba9876543210")).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    const j = r.open();
    expectClosed(r, r.hello(j, "a", "J-fedcba9876543210"), j, Code.IDENTITY_CONFLICT);
    expect(plainClaim(r.claimOf("a"))).toMatchObject({ instanceId: "J-fedcba9876543210", attempts: 1 });
  });
});

describe("an authorized takeover ends the displaced instance's work", () => {
  it("R-F3 R-F5: the old instance is fenced with CODE_REPLACED, its running command ends interrupted as a takeover, it kills and tombstones its work, and it stops claiming until authorized again", () => {
    const h = new Harness();
    h.addAgent("old", { clientId: "web-1" }, 7);
    const oldA = h.agents.get("old")!;
    h.submit("web-1", "u1", { argv: ["sleep", "1000"] });
    expect(h.command("u1").state).toBe("running");
    const I = h.helloOf("old")!.clientInstanceId;
    // A new host claims the id while the old one is live: refused, recorded.
    h.addAgent("new", { clientId: "web-1" }, 99);
    const newA = h.agents.get("new")!;
    const J = h.helloOf("new")!.clientInstanceId;
    void newA;
    expect(lastError(h, "new")?.error?.code).toBe(Code.IDENTITY_CONFLICT);
    expect(h.claimOf("web-1")?.instanceId).toBe(J);
    expect(h.control({ op: "authorize", requestId: "auth", clientId: "web-1", instanceId: J, instanceNotYetSeen: false })).toEqual({
      ok: true,
      instanceId: J,
      expiresAt: h.now + 5 * 60_000,
    });
    h.reconnectNow("new");
    expect(h.sessionFor("new")?.phase).toBe("ready");

    // The server: a takeover, not an invariant failure.
    expect(h.command("u1")).toMatchObject({
      state: "interrupted",
      reason: `client taken over by instance ${J}; the command was running on the previous instance ${I}`,
    });
    const incidents = h.incidents().filter((i) => i.issueUuid === "u1");
    expect(incidents.map((i) => [i.kind, i.detail])).toEqual([
      [
        "takeover_interrupt",
        `web-1 was taken over by instance ${J}; the command was running on the previous instance ${I}; its process may still run there until that instance reconnects and is told it was replaced`,
      ],
    ]);
    // internal: the displaced instance on the client record (no view shows it; what it does is observed below)
    expect(h.server.clients.get("web-1")!.replaced).toMatchObject({ instanceId: I, by: J, authorized: true });

    // The old instance was told at once (its live session was fenced with CODE_REPLACED).
    expect(lastError(h, "old")?.error?.code).toBe(Code.REPLACED);
    expect(lastError(h, "old")?.error?.message).toContain(`was taken over by instance ${J}`);
    expect(oldA.procs.get("u1")!.signals).toEqual([SignalKind.KILL]);
    expect(h.retained("old")).toEqual([]);
    expect(h.tombstoned("old", "u1")).toBe(true);
    expect(oldA.st.replaced).not.toBeNull(); // internal: the agent's record of being replaced (its effect, the capped backoff, is observed below)
    expect(h.linkUp("old")).toBe(false);
    // It tries again only after the backoff cap.
    const hellos = () => h.framesSent("old", "clientHello").length;
    const waitsTheCap = () => {
      const from = h.now;
      const before = hellos();
      h.now = from + BACKOFF_CAP_MS - 1;
      h.agentInput("old", { type: "tick" });
      expect(hellos(), "not before the cap").toBe(before);
      h.now = from + BACKOFF_CAP_MS;
      h.agentInput("old", { type: "tick" });
      expect(hellos(), "at the cap").toBe(before + 1);
    };

    // It comes back: refused again with CODE_REPLACED, never recorded as a claim, and it waits the cap again.
    waitsTheCap();
    expect(lastError(h, "old")?.error?.code).toBe(Code.REPLACED);
    expect(h.claimOf("web-1")).toBeUndefined();
    expect(h.sessionFor("new")?.phase).toBe("ready");

    // The operator may re-admit it: the replaced instance is one authorize accepts by name.
    expect(h.control({ op: "authorize", requestId: "back", clientId: "web-1", instanceId: I, instanceNotYetSeen: false })).toEqual({
      ok: true,
      instanceId: I,
      expiresAt: h.now + 5 * 60_000,
    });
    waitsTheCap();
    expect(h.sessionFor("old")?.phase).toBe("ready");
    expect(oldA.st.replaced).toBeNull(); // internal: as above
    // internal: the displaced instance on the client record, now the other way round
    expect(h.server.clients.get("web-1")!.replaced).toMatchObject({ instanceId: J, by: I, authorized: true });
    expect(lastError(h, "new")?.error?.code).toBe(Code.REPLACED);
  });

  it("R-F6: a new instance accepted with no live session (no authorization) is no takeover: the old instance is not refused as replaced", () => {
    const r = new ServerRig();
    const i = r.connect("a", "I");
    r.step({ type: "conn_closed", conn: i, reason: "gone" });
    const j = r.connect("a", "J");
    // internal: recorded as displaced but not authorized (no view shows it; what follows is observed below)
    expect(r.st.clients.get("a")!.replaced).toMatchObject({ instanceId: "I", by: "J", authorized: false });
    const back = r.open();
    expectClosed(r, r.hello(back, "a", "I"), back, Code.IDENTITY_CONFLICT);
    expect(r.claimOf("a")?.instanceId).toBe("I");
    void j;
  });

  it("R-F5: the displaced instance survives a server restart (it is part of the durable client record)", () => {
    const r = new ServerRig();
    r.connect("a", "I");
    const j = r.open();
    expectClosed(r, r.hello(j, "a", "J"), j, Code.IDENTITY_CONFLICT);
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "J", instanceNotYetSeen: false });
    r.connect("a", "J");
    expect(rowOf(r.disk.durable, "client", "a")!.replaced).toMatchObject({ instanceId: "I", by: "J", authorized: true });
    r.st = restoreServer(r.cfg, r.disk.tables(), 2);
    const back = r.open();
    expectClosed(r, r.hello(back, "a", "I"), back, Code.REPLACED);
  });
});
