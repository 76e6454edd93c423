// Command history through real daemons: with a small reserved metadata tier
// the server prunes its oldest settled commands from memory and answers for
// them as pruned (never runs one again), across a restart. On the embedded
// store pruning deletes them and their output (segment files); PostgreSQL
// keeps the history, so there the server reads a pruned command back from
// the database (GetCommand, ListCommands, FollowOutput) instead.
import { afterAll, expect, it } from "vitest";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, describeStores, startAgent, startServer, storedOutputBytes, waitFor, type TestServer } from "./helpers.js";

/** Output bytes the store holds once what is queued is written (segment files, or output rows). */
const stored = async (s: TestServer) => {
  await s.daemon.storage.whenIdle();
  return storedOutputBytes(s);
};

async function run(s: TestServer, uuid: string, argv: string[]): Promise<void> {
  await s.client.submitCommand({ clientId: "hist-a", issueUuid: uuid, program: { case: "argv", value: { argv } } });
  await waitFor(`${uuid} terminal`, async () => (await s.client.getCommand({ issueUuid: uuid })).command!.state === L.SUCCEEDED);
}

async function refusal(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected a refusal");
}

afterAll(cleanupTemp);

describeStores("e2e: command history within the server's metadata tier", (st) => {
  it("prunes the oldest settled commands and their output, answers for them as pruned, and keeps that across a restart", async () => {
    // ~1.6 KiB charged per finished `true`: about five of them fit.
    const limits = { metadataBudget: 8 * 1024 };
    const where = await st.fresh();
    let s = await startServer({ ...where, limits });
    const a = await startAgent(s.url, "hist-a");
    const abort = new AbortController();
    const removed: string[] = [];
    const watching = (async () => {
      try {
        for await (const m of s.client.watchFleet({ commandClients: ["hist-a"] }, { signal: abort.signal }))
          if (m.change.case === "commandRemoved") removed.push(m.change.value);
      } catch {
        // aborted
      }
    })();
    try {
      await waitFor("agent connected", () => a.connected);
      await run(s, "first", ["echo", "the first command's output"]);
      expect(await stored(s)).toBeGreaterThan(0);
      for (let i = 0; i < 8; i++) await run(s, `t-${i}`, ["true"]);
      await waitFor("first pruned", () => s.daemon.state.pruned.has("first"));
      expect(s.daemon.state.metaBytes).toBeLessThanOrEqual(limits.metadataBudget);
      const keeps = st.kind === "postgres";
      if (keeps) expect(await stored(s)).toBeGreaterThan(0);
      else await waitFor("its stored output deleted", async () => (await stored(s)) === 0);
      // WatchFleet tells a watcher of the client that it is gone (on PostgreSQL it is not: it is still history).
      if (!keeps) await waitFor("commandRemoved streamed", () => removed.includes("first"));
      abort.abort();
      await watching;
      if (keeps) expect(removed).not.toContain("first");

      // Gone from memory; on PostgreSQL still in the database, read back whole.
      const readBack = async () => {
        if (keeps) {
          expect((await s.client.getCommand({ issueUuid: "first" })).command!.state).toBe(L.SUCCEEDED);
          return;
        }
        const gone = await refusal(s.client.getCommand({ issueUuid: "first" }));
        expect(gone.code).toBe(ConnectCode.NotFound);
        expect(gone.rawMessage).toMatch(/command first ended succeeded and was pruned from history/);
      };
      await readBack();
      const again = await refusal(
        s.client.submitCommand({ clientId: "hist-a", issueUuid: "first", program: { case: "argv", value: { argv: ["echo", "the first command's output"] } } }),
      );
      expect(again.code).toBe(ConnectCode.AlreadyExists);
      expect(again.rawMessage).toMatch(/ALREADY_EXECUTED/);
      const newest = (await s.client.getCommand({ issueUuid: "t-7" })).command!;
      expect(newest.state).toBe(L.SUCCEEDED);
      const listed = (await s.client.listCommands({ clientId: "hist-a" })).commands.map((c) => c.issueUuid);
      expect(listed).toContain("t-7");
      if (keeps) expect(listed).toContain("first");
      else expect(listed).not.toContain("first");

      await a.close();
      const kept = [...s.daemon.state.commands.keys()].sort();
      const pruned = [...s.daemon.state.pruned.keys()];
      await s.close();
      s = await startServer({ ...where, limits, dataDir: s.dataDir });
      if (keeps) {
        // internal: a restart holds no ended command; each is a ledger entry (newest last)
        expect([...s.daemon.state.commands.keys()]).toEqual([]);
        expect([...s.daemon.state.pruned.keys()].sort()).toEqual([...kept, ...pruned].sort());
      } else {
        expect([...s.daemon.state.commands.keys()].sort()).toEqual(kept);
        expect([...s.daemon.state.pruned.keys()]).toEqual(pruned);
      }
      await readBack();
    } finally {
      abort.abort();
      await a.close().catch(() => {});
      await s.close();
    }
  }, 60_000);

  it("a follower reading a command that is pruned meanwhile gets NOT_FOUND saying so, never a silently short stream (PostgreSQL: reads it to the end from the database)", async () => {
    // "big" alone is charged 19-35 KiB (512-1,024+ events, by how the pipe was read);
    // some 20 finished `true`s more push it out.
    const s = await startServer({ ...(await st.fresh()), limits: { metadataBudget: 64 * 1024 } });
    const a = await startAgent(s.url, "hist-a");
    try {
      await waitFor("agent connected", () => a.connected);
      await run(s, "big", ["head", "-c", String(32 * 1024 * 1024), "/dev/urandom"]);
      const it = s.client.followOutput({ issueUuid: "big", follow: false })[Symbol.asyncIterator]();
      const first = await it.next();
      expect(first.value?.item.case).toBe("lifecycle"); // running
      for (let i = 0; !s.daemon.state.pruned.has("big"); i++) {
        expect(i).toBeLessThan(60);
        await run(s, `p-${i}`, ["true"]);
      }
      let bytes = 0;
      let finished = false;
      const end = await (async () => {
        try {
          for (let r = await it.next(); !r.done; r = await it.next()) {
            if (r.value.item.case === "output") bytes += r.value.item.value.data.length;
            if (r.value.item.case === "finished") finished = true;
          }
          return null;
        } catch (err) {
          return ConnectError.from(err);
        }
      })();
      if (st.kind === "postgres") {
        // PostgreSQL keeps the history: the reader goes on from the database, to the end.
        expect([end, finished, bytes]).toEqual([null, true, 32 * 1024 * 1024]);
        return;
      }
      expect(finished).toBe(false);
      expect(bytes).toBeLessThan(32 * 1024 * 1024);
      expect(end?.code).toBe(ConnectCode.NotFound);
      expect(end?.rawMessage).toMatch(/command big ended succeeded and was pruned from history while being read \(through event \d+\)/);
    } finally {
      await a.close().catch(() => {});
      await s.close();
    }
  }, 120_000);
});
