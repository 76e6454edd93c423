import { describe, expect, it } from "vitest";
import { rowOf } from "../../core/server/store.js";
import { Harness } from "../support/harness.js";
import { Code } from "../../core/errors.js";
import { defaultServerConfig } from "../../core/index.js";
import { CommandLifecycle as L, ShellType, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { encodeEnvelope } from "../../core/codec/frame-codec.js";

const accepted = (h: Harness) =>
  h.sent("commandAccepted").map((e) => e.payload.value as { issueUuid: string; accepted: boolean; rejection?: { code: number } });

function fastRedelivery(): ReturnType<typeof defaultServerConfig> {
  const cfg = defaultServerConfig();
  cfg.limits.redeliveryMs = 5_000;
  return cfg;
}

function dispatchesOf(h: Harness, uuid: string): unknown[] {
  return h.sent("commandDispatch").filter((e) => e.payload.case === "commandDispatch" && e.payload.value.issueUuid === uuid);
}

/** Reconnect `name`; stall the server's disk right after the session turns ready. */
function readyWithDiskStalled(h: Harness, name: string): void {
  h.autoDurable = false;
  h.reconnectNow(name);
  for (let i = 0; i < 20 && !h.sessions().some((c) => c.phase === "ready"); i++) {
    h.flush(name);
    h.flush("server", 1);
  }
  expect(h.sessions().some((c) => c.phase === "ready")).toBe(true);
}

describe("dispatch", () => {
  it("R-D1: the command is durable at the server before any dispatch, and the submit is answered only then", () => {
    const h = new Harness();
    h.addAgent("a");
    h.autoDurable = false;
    const r = h.submit("a", "c1");
    expect(r).toBeUndefined();
    expect(h.sent("commandDispatch")).toHaveLength(0);
    expect(h.serverDisk.durable.get("command")?.has("c1") ?? false).toBe(false);
    h.flush("server");
    expect(h.replies.get("submit-c1")).toEqual({ ok: true, uuid: "c1", revision: 1 });
    // With the agent ready, the create and the dispatched state share one
    // batch: once it is durable the dispatch leaves, after one flush, not two.
    expect(rowOf(h.serverDisk.durable, "command", "c1")!.state).toBe(L.DISPATCHED);
    expect(h.sent("commandDispatch")).toHaveLength(1);
  });

  it("R-D1: a command submitted while its agent is offline is durable as queued, and dispatched only after a second durable record", () => {
    const h = new Harness();
    h.addAgent("a");
    h.cutLink("a");
    h.autoDurable = false;
    h.submit("a", "c1");
    h.flush("server");
    expect(rowOf(h.serverDisk.durable, "command", "c1")!.state).toBe(L.QUEUED);
    readyWithDiskStalled(h, "a");
    expect(dispatchesOf(h, "c1")).toHaveLength(0);
    h.flush("server");
    expect(rowOf(h.serverDisk.durable, "command", "c1")!.state).toBe(L.DISPATCHED);
    expect(dispatchesOf(h, "c1")).toHaveLength(1);
  });

  it("R-D1: no redelivery before the dispatched record is durable, however slow the disk", () => {
    const h = new Harness(fastRedelivery());
    h.addAgent("a");
    h.cutLink("a");
    h.submit("a", "c1"); // durable as queued while the agent is away
    readyWithDiskStalled(h, "a");
    for (let i = 0; i < 4; i++) h.advance(5_000); // four redelivery timeouts; the dispatched record is still not durable
    expect(dispatchesOf(h, "c1")).toHaveLength(0);
    h.flush("server");
    expect(dispatchesOf(h, "c1")).toHaveLength(1);
  });

  it("R-D1: an unanswered dispatch is redelivered until CommandAccepted", () => {
    const h = new Harness(fastRedelivery());
    h.addAgent("a");
    h.autoDeliver = false;
    h.submit("a", "c1");
    h.queue.length = 0; // the dispatch is lost in flight
    h.advance(5_000);
    h.queue.length = 0; // lost again
    h.advance(5_000);
    const dispatches = h.sent("commandDispatch");
    expect(dispatches).toHaveLength(3);
    expect(new Set(h.wire.filter((w) => w.env.payload.case === "commandDispatch").map((w) => Buffer.from(w.data).toString("hex"))).size).toBe(1);
    h.autoDeliver = true;
    h.advance(5_000);
    expect(h.command("c1").state).toBe("running");
    h.advance(5_000);
    expect(h.sent("commandDispatch")).toHaveLength(4);
  });

  it("R-D2: the agent deduplicates a redelivered dispatch durably and launches once", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const dispatch = h.wire.find((w) => w.env.payload.case === "commandDispatch")!;
    const a = h.agents.get("a")!;
    h.agentInput("a", { type: "frame", conn: a.conn, data: dispatch.data });
    h.restartAgent("a");
    // After a restart (new session) the server would not redeliver; inject the old dispatch re-fenced.
    const fence = a.st.session.fence!;
    const again = encodeEnvelope(fence, {
      ...dispatch.env.payload,
      value: { ...(dispatch.env.payload.value as object), targetSessionGeneration: BigInt(fence.generation) },
    } as never);
    h.agentInput("a", { type: "frame", conn: a.conn, data: again });
    expect(a.spawns).toEqual(["c1"]);
    expect(accepted(h).filter((x) => x.issueUuid === "c1" && x.accepted).length).toBeGreaterThanOrEqual(2);
  });

  it("R-D2: the same issue_uuid with a different request hash is refused as a conflict", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const a = h.agents.get("a")!;
    const d = h.wire.find((w) => w.env.payload.case === "commandDispatch")!;
    const other = encodeEnvelope(a.st.session.fence, {
      ...d.env.payload,
      value: { ...(d.env.payload.value as object), immutableRequestSha256: new Uint8Array(32).fill(9) },
    } as never);
    h.agentInput("a", { type: "frame", conn: a.conn, data: other });
    expect(accepted(h).at(-1)).toMatchObject({ issueUuid: "c1", accepted: false, rejection: { code: Code.CONFLICT } });
    expect(a.spawns).toEqual(["c1"]);
  });

  it("R-D3: a full agent queue gives a transient capacity rejection; the server requeues with backoff and runs it later", () => {
    const h = new Harness();
    h.addAgent("a", { maxRunning: 1, maxQueued: 0 });
    h.server.clients.get("a")!.capacity.maxQueued = 5; // the server's view is stale
    h.autoDeliver = false;
    h.submit("a", "c1");
    h.submit("a", "c2");
    expect(h.sent("commandDispatch")).toHaveLength(2);
    h.autoDeliver = true;
    h.deliver();
    expect(accepted(h).find((x) => x.issueUuid === "c2")).toMatchObject({ accepted: false, rejection: { code: Code.CAPACITY } });
    expect(h.command("c2").state).toBe("queued");
    const c2 = h.cmd("c2"); // setup: when its retry is due (internal: no view shows it)
    expect(c2.dispatch.nextAttemptAt).toBeGreaterThanOrEqual(h.now);
    h.exit("a", "c1", 0);
    h.now = c2.dispatch.nextAttemptAt;
    h.serverInput({ type: "tick" });
    expect(h.spawned("a")).toEqual(["c1", "c2"]);
  });

  it("R-D4: a permanent rejection ends rejected, is never retried, never failed", () => {
    const h = new Harness(fastRedelivery());
    h.addAgent("a");
    h.submit("a", "ps", { program: { case: "shell", value: { shell: ShellType.POWERSHELL, commandLine: "Get-Date" } } } as never);
    expect(h.command("ps").state).toBe("rejected");
    expect(h.command("ps").reason).toMatch(/UNSUPPORTED_PLATFORM/);
    // A spec every agent refuses (VALIDATION) never gets this far: submit refuses it (spec-limits.ts).
    h.advance(60_000);
    expect(h.sent("commandDispatch")).toHaveLength(1);
    expect(h.spawned("a")).toEqual([]);
  });

  it("R-D5 R-D10: a tombstone hit returns CODE_ALREADY_EXECUTED; the server suppresses dispatch and reconciles its stale state", () => {
    const h = new Harness();
    h.addAgent("a");
    const stale = structuredClone(h.serverDisk.durable); // server state before c1 existed
    h.submit("a", "c1");
    h.exit("a", "c1", 0);
    expect(h.tombstoned("a", "c1")).toBe(true);
    // The server loses its history (restored from an old backup) and the
    // operator submits the same request again. (A command the server still
    // holds queued is caught earlier, by the ReconcileRequest: reconcile.test.ts.)
    h.serverDisk.durable = stale;
    h.restartServer();
    const a = h.agents.get("a")!;
    h.reconnectNow("a");
    h.submit("a", "c1");
    expect(accepted(h).at(-1)).toMatchObject({ issueUuid: "c1", accepted: false, rejection: { code: Code.ALREADY_EXECUTED } });
    expect(h.command("c1").state).toBe("interrupted");
    expect(h.incidents().some((i) => i.issueUuid === "c1" && i.kind === "already_executed")).toBe(true);
    expect(a.spawns).toEqual(["c1"]);
  });

  it("R-D10: a tombstone reported in the snapshot suppresses replay of a command the server thinks is in flight", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const stale = structuredClone(h.serverDisk.durable); // c1 dispatched
    h.exit("a", "c1", 0);
    h.serverDisk.durable = stale;
    h.restartServer();
    const a = h.agents.get("a")!;
    h.reconnectNow("a");
    const snap = h.sent("reconcileSnapshot").at(-1)!.payload.value as { retainedCommands: Array<{ issueUuid: string; tombstoned: boolean }> };
    expect(snap.retainedCommands).toEqual([expect.objectContaining({ issueUuid: "c1", tombstoned: true })]);
    expect(h.command("c1").state).toBe("interrupted");
    expect(h.sent("commandDispatch")).toHaveLength(1);
    expect(a.spawns).toEqual(["c1"]);
  });

  it("R-D1: queue expiry ends a never-dispatched command expired at the server; an accepted one expires at the agent", () => {
    const h = new Harness();
    h.submit("nobody", "lonely", {}, { queueExpiry: h.now + 1_000 });
    h.advance(1_000);
    expect(h.command("lonely").state).toBe("expired");
    h.addAgent("a", { maxRunning: 1 });
    h.submit("a", "busy");
    h.submit("a", "waits", {}, { queueExpiry: h.now + 2_000 });
    expect(h.command("waits").state).toBe("accepted");
    h.advance(2_000);
    expect(h.command("waits").state).toBe("expired");
    expect(h.spawned("a")).toEqual(["busy"]);
  });
});

describe("what readers see", () => {
  it("R-O3: the committed view shows a state only once its persist is durable, so a crash never takes back what a reader saw", () => {
    const h = new Harness();
    h.submit("offline", "c1");
    h.autoDurable = false;
    h.control({ op: "signal", requestId: "x", uuid: "c1", signal: SignalKind.CANCEL });
    // Internal on purpose: the working state is ahead of what any reader may see.
    const working = h.cmd("c1");
    expect(working.state).toBe(L.CANCELLED);
    expect(h.command("c1").state).toBe("queued");
    h.restartServer(); // the cancel was never durable: nobody saw it, nobody was told
    expect(h.command("c1").state).toBe("queued");
    h.control({ op: "signal", requestId: "y", uuid: "c1", signal: SignalKind.CANCEL });
    h.flush("server");
    expect(h.command("c1").state).toBe("cancelled");
    expect(h.replies.get("y")).toEqual({ ok: true, uuid: "c1", revision: 2 });
  });
});
