// WatchFleet against a REAL server and agents on loopback: the snapshot first,
// then the changes the server pushes by itself (no further request on the
// stream), coalescing, and a fresh snapshot when a watcher's queue overflows.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { Client as ControlClient } from "@connectrpc/connect";
import type { ControlService, WatchFleetResponse } from "../../../protos/gen/rvbox/v1/control_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { MAX_WATCHERS, WATCH_QUEUE_LIMIT } from "../../../shells/server/fleet-watch.js";
import { cleanupTemp, controlClient, startAgent, startServer, waitFor, type TestServer } from "./helpers.js";

type Change = WatchFleetResponse["change"];

/** One open WatchFleet stream, collecting what arrives. */
interface Watch {
  got: Change[];
  /** Messages after index `from` of one kind. */
  since<K extends NonNullable<Change["case"]>>(from: number, kind: K): Array<Extract<Change, { case: K }>["value"]>;
  ended: Promise<unknown>;
  stop(): void;
}

function watch(client: ControlClient<typeof ControlService>, commandClients: string[]): Watch {
  const got: Change[] = [];
  const abort = new AbortController();
  const ended = (async () => {
    try {
      for await (const m of client.watchFleet({ commandClients }, { signal: abort.signal })) got.push(m.change);
      return "ended";
    } catch (err) {
      return err;
    }
  })();
  return {
    got,
    since: (from, kind) =>
      got
        .slice(from)
        .filter((c) => c.case === kind)
        .map((c) => c.value as never),
    ended,
    stop: () => abort.abort(),
  };
}

const snapshotOf = (c: Change | undefined) => {
  expect(c?.case).toBe("snapshot");
  return (c as Extract<Change, { case: "snapshot" }>).value;
};

const MiB = 1024 * 1024;

describe("WatchFleet (live server)", () => {
  let s: TestServer;
  let agent: AgentDaemon;

  beforeAll(async () => {
    s = await startServer({ limits: { outputPerClient: 8 * MiB } });
  });
  afterAll(async () => {
    await agent?.close({ killProcesses: true });
    await s?.close();
    await cleanupTemp();
  });

  it("sends a snapshot first, then pushes agent, session, command and claim changes (R-F4, R-F5) with no further request", async () => {
    const w = watch(s.client, ["wf-a"]);
    try {
      await waitFor("snapshot", () => w.got.length >= 1);
      const snap = snapshotOf(w.got[0]);
      expect(snap.clients).toEqual([]);
      expect(snap.sessions).toEqual([]);
      expect(snap.commands).toEqual([]);

      // An agent connects: its client and its session arrive on the stream.
      agent = await startAgent(s.url, "wf-a", { killGraceMs: 1000 });
      const client = await waitFor("client connected", () => w.since(1, "client").find((c) => c.clientId === "wf-a" && c.connected));
      expect(client.instanceId).toBe(agent.state.instanceId);
      expect(client.outputBudgetBytes).toBe(BigInt(8 * MiB));
      const session = await waitFor("session ready", () => w.since(1, "session").find((x) => x.clientId === "wf-a" && x.phase === "ready"));
      expect(session.instanceId).toBe(agent.state.instanceId);

      // A command submitted elsewhere: its changes arrive, ending succeeded.
      const mark = w.got.length;
      const r = await s.client.submitCommand({ clientId: "wf-a", program: { case: "argv", value: { argv: ["echo", "streamed"] } } });
      const uuid = r.command!.issueUuid;
      const done = await waitFor("command succeeded", () => w.since(mark, "command").find((c) => c.issueUuid === uuid && c.state === L.SUCCEEDED));
      expect(done.storedThroughEventSeq).toBeGreaterThan(0n);
      expect(done.exitCode).toBe(0);
      // The committed view only, like the List calls: never a state before the submit was durable.
      expect(w.since(mark, "command").every((c) => c.state !== L.UNSPECIFIED)).toBe(true);
      // The retained output shows on the client record.
      await waitFor("retained bytes", () => w.since(mark, "client").some((c) => c.clientId === "wf-a" && c.retainedOutputBytes > 0n));

      // R-F4: another instance tries the live client id: its claim arrives.
      const claimMark = w.got.length;
      const second = await startAgent(s.url, "wf-a", {});
      try {
        const claim = await waitFor("claim", () => w.since(claimMark, "claim").find((c) => c.clientId === "wf-a"));
        expect(claim.instanceId).toBe(second.state.instanceId);
        expect(claim.currentInstanceId).toBe(agent.state.instanceId);
        // R-F5: authorized, the claimant takes over: the claim clears, the old session closes, the client changes instance.
        await s.client.authorizeInstance({ clientId: "wf-a", instanceId: claim.instanceId });
        // (The authorization itself may be consumed before the next push: coalescing may never show it.)
        // The claimant's claim goes away. The fenced old instance reconnects at once and may be
        // recorded as the next claimant in the same flush, so "gone" is either a claimCleared or a
        // claim by another instance, whichever the stream shows last for this client.
        const claimantGone = () => {
          const last = w.got
            .slice(claimMark)
            .filter((c) => (c.case === "claimCleared" && c.value === "wf-a") || (c.case === "claim" && c.value.clientId === "wf-a"))
            .at(-1);
          return last !== undefined && (last.case === "claimCleared" || (last.case === "claim" && last.value.instanceId !== claim.instanceId));
        };
        await waitFor("claim cleared", claimantGone, 60_000);
        await waitFor("old session closed", () => w.since(claimMark, "sessionClosed").includes(session.connection), 60_000);
        await waitFor("taken over", () => w.since(claimMark, "client").some((c) => c.instanceId === second.state.instanceId && c.connected), 60_000);
      } finally {
        await second.close({ killProcesses: true });
      }
      // Nothing but one snapshot on this stream: every later message was a change.
      expect(w.got.filter((c) => c.case === "snapshot")).toHaveLength(1);
    } finally {
      w.stop();
      await w.ended;
    }
  }, 120_000);

  it('streams only the commands of the watched clients; "*" watches all', async () => {
    const some = watch(s.client, ["wf-only"]);
    const all = watch(s.client, ["*"]);
    const none = watch(s.client, []);
    try {
      await waitFor("snapshots", () => some.got.length >= 1 && all.got.length >= 1 && none.got.length >= 1);
      const other = (await s.client.submitCommand({ clientId: "wf-other", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } }))
        .command!.issueUuid;
      const mine = (await s.client.submitCommand({ clientId: "wf-only", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } }))
        .command!.issueUuid;
      await waitFor("all", () => all.since(1, "command").some((c) => c.issueUuid === other) && all.since(1, "command").some((c) => c.issueUuid === mine));
      await waitFor("some", () => some.since(1, "command").some((c) => c.issueUuid === mine));
      expect(some.since(1, "command").map((c) => c.clientId)).not.toContain("wf-other");
      expect(none.since(1, "command")).toEqual([]);
      // The snapshot of a new watcher has them, newest first.
      const late = watch(s.client, ["wf-only", "wf-other"]);
      await waitFor("late snapshot", () => late.got.length >= 1);
      expect(snapshotOf(late.got[0]).commands.map((c) => c.issueUuid)).toEqual([mine, other]);
      late.stop();
    } finally {
      for (const w of [some, all, none]) w.stop();
    }
  });

  it("authenticates like every other call and refuses an empty client id", async () => {
    const bad = watch(controlClient(s.controlUrl, "not-the-token"), []);
    const err = await bad.ended;
    expect(ConnectError.from(err).code).toBe(ConnectCode.Unauthenticated);
    expect(bad.got).toEqual([]);
    const empty = watch(s.client, [""]);
    expect(ConnectError.from(await empty.ended).code).toBe(ConnectCode.InvalidArgument);
  });

  it("ListClients reports the per-client retained output and budget as well", async () => {
    const r = await s.client.listClients({});
    const c = r.clients.find((x) => x.clientId === "wf-a")!;
    expect(c.outputBudgetBytes).toBe(BigInt(8 * MiB));
    expect(c.retainedOutputBytes).toBe(BigInt(s.daemon.state.clientOutput.get("wf-a")?.bytes ?? -1));
  });

  it("R-F6: a forgotten client is pushed as client_removed, and a fresh snapshot no longer has it", async () => {
    const gone = await startAgent(s.url, "wf-forget");
    await waitFor("wf-forget connected", () => gone.connected);
    const w = watch(s.client, []);
    await waitFor("snapshot", () => w.got.length > 0);
    expect(snapshotOf(w.got[0]).clients.some((c) => c.clientId === "wf-forget")).toBe(true);
    await gone.close();
    await waitFor("wf-forget offline", async () => !(await s.client.listClients({})).clients.find((c) => c.clientId === "wf-forget")?.connected);
    const mark = w.got.length;
    await s.client.forgetClient({ clientId: "wf-forget" });
    await waitFor("client_removed pushed", () => w.since(mark, "clientRemoved").includes("wf-forget"));
    w.stop();
    const fresh = watch(s.client, []);
    await waitFor("fresh snapshot", () => fresh.got.length > 0);
    expect(snapshotOf(fresh.got[0]).clients.some((c) => c.clientId === "wf-forget")).toBe(false);
    fresh.stop();
  });
});

describe("WatchFleet coalescing and overflow", () => {
  let s: TestServer;

  beforeAll(async () => {
    // Flushes only when the test says so (the interval is far longer than the test), and a tiny queue.
    s = await startServer({ watch: { queueLimit: 2, flushMs: 600_000, maxWatchers: 2 } });
  });
  afterAll(async () => {
    await s?.close();
    await cleanupTemp();
  });

  it("the default queue bound is a named constant", () => {
    expect(WATCH_QUEUE_LIMIT).toBeGreaterThanOrEqual(1000);
    expect(s.daemon.watch.queueLimit).toBe(2);
  });

  it("the number of open streams is bounded: one more is refused with ResourceExhausted, and a closed stream frees its place", async () => {
    expect(MAX_WATCHERS).toBeGreaterThanOrEqual(16);
    expect(s.daemon.watch.maxWatchers).toBe(2);
    const a = watch(s.client, []);
    const b = watch(s.client, []);
    try {
      await waitFor("two snapshots", () => a.got.length >= 1 && b.got.length >= 1);
      const c = watch(s.client, []);
      const err = await c.ended;
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(ConnectCode.ResourceExhausted);
      expect((err as ConnectError).message).toContain("at most 2");
      expect(c.got).toEqual([]);
      a.stop();
      await a.ended;
      await waitFor("a's place freed", () => s.daemon.watch.watcherCount === 1);
      const d = watch(s.client, []);
      await waitFor("a new stream after one closed", () => d.got.length >= 1);
      expect(snapshotOf(d.got[0])).toBeDefined();
      d.stop();
      await d.ended;
    } finally {
      a.stop();
      b.stop();
      await Promise.all([a.ended, b.ended]);
      await waitFor("all streams closed", () => s.daemon.watch.watcherCount === 0);
    }
  });

  it("a record changed many times between two pushes is sent once, as it stands", async () => {
    const w = watch(s.client, ["*"]);
    try {
      await waitFor("snapshot", () => w.got.length >= 1);
      const uuid = (
        await s.client.submitCommand({ clientId: "nobody", allowUnknownClient: true, program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true })
      ).command!.issueUuid;
      // Three more durable changes of the same command before anything is pushed.
      await s.client.writeStdin({ issueUuid: uuid, data: new TextEncoder().encode("a"), appendNewline: true });
      await s.client.writeStdin({ issueUuid: uuid, data: new TextEncoder().encode("b"), appendNewline: true });
      await s.client.signalCommand({ issueUuid: uuid, signal: SignalKind.CANCEL });
      expect(w.since(1, "command")).toEqual([]);
      s.daemon.watch.flush();
      await waitFor("pushed", () => w.since(1, "command").length >= 1);
      await new Promise((r) => setTimeout(r, 100));
      const sent = w.since(1, "command").filter((c) => c.issueUuid === uuid);
      expect(sent).toHaveLength(1);
      const now = (await s.client.getCommand({ issueUuid: uuid })).command!;
      expect(now.state).toBe(L.CANCELLED);
      expect(sent[0]!.state).toBe(now.state);
      expect(sent[0]!.revision).toBe(now.revision);
      expect(w.got.filter((c) => c.case === "snapshot")).toHaveLength(1);
    } finally {
      w.stop();
    }
  });

  it("a watcher whose queue overflows gets a fresh snapshot instead of its backlog, then changes again", async () => {
    const w = watch(s.client, ["*"]);
    try {
      await waitFor("snapshot", () => w.got.length >= 1);
      const before = snapshotOf(w.got[0]).commands.length;
      // Three new commands in one push: more than the queue's bound of 2.
      const uuids: string[] = [];
      for (let i = 0; i < 3; i++)
        uuids.push(
          (await s.client.submitCommand({ clientId: "burst", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } })).command!
            .issueUuid,
        );
      s.daemon.watch.flush();
      await waitFor("second snapshot", () => w.got.length >= 2);
      const snap = snapshotOf(w.got[1]);
      expect(w.since(1, "command")).toEqual([]); // the backlog was dropped, not sent
      expect(snap.commands.length).toBe(before + 3);
      for (const u of uuids) expect(snap.commands.map((c) => c.issueUuid)).toContain(u);
      // Within the bound, changes flow again.
      const one = (await s.client.submitCommand({ clientId: "burst", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } })).command!
        .issueUuid;
      s.daemon.watch.flush();
      await waitFor("change after the snapshot", () => w.since(2, "command").some((c) => c.issueUuid === one));
      expect(w.got.filter((c) => c.case === "snapshot")).toHaveLength(2);
    } finally {
      w.stop();
    }
  });
});
