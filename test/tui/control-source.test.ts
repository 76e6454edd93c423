// ControlSource (the TUI's live data source) against a REAL server and agent on loopback.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { CommandSchema, FollowOutputResponseSchema, GetCommandResponseSchema } from "../../protos/gen/rvbox/v1/control_pb.js";
import type { ControlClient } from "../../client/control-client.js";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { ControlSource, TAIL_EVENTS } from "../../tui/sources/control-source.js";
import { PANE_MAX_LINES } from "../../tui/output-buffer.js";
import { RefreshFeed, WatchFeed } from "../../tui/sources/fleet-feed.js";
import { cleanupTemp, controlClient, OPERATOR_TOKEN, startAgent, startServer, waitFor, type TestServer } from "../shells/e2e/helpers.js";

let s: TestServer;
let agent: AgentDaemon;

beforeAll(async () => {
  s = await startServer({ limits: { outputPerCommand: 256 * 1024, segmentBytes: 64 * 1024 } });
  agent = await startAgent(s.url, "tui-a", { killGraceMs: 1000 });
  await waitFor("agent", () => agent.connected);
});
afterAll(async () => {
  await agent?.close({ killProcesses: true });
  await s?.close();
  await cleanupTemp();
});

/** A client that counts calls per method (optionally replacing some methods). */
function counting(url = s.controlUrl, replace: Record<string, (...a: unknown[]) => unknown> = {}): { client: ControlClient; calls: Map<string, number> } {
  const inner = controlClient(url);
  const calls = new Map<string, number>();
  const client = new Proxy(inner, {
    get(t, k: string) {
      const f = replace[k] ?? (t as unknown as Record<string, unknown>)[k];
      if (typeof f !== "function") return f;
      return (...a: unknown[]) => {
        calls.set(k, (calls.get(k) ?? 0) + 1);
        return (f as (...x: unknown[]) => unknown).apply(t, a);
      };
    },
  }) as ControlClient;
  return { client, calls };
}

describe("control source (live server)", () => {
  it("shows the connected agent as a session and marks itself connected", async () => {
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN, refreshMs: 200 });
    try {
      // The row can appear while the session is still reconciling: wait for it to be connected.
      await waitFor("fleet", () => src.fleet().sessions.find((x) => x.clientId === "tui-a" && x.link === "connected"));
      const row = src.fleet().sessions.find((x) => x.clientId === "tui-a")!;
      expect(row).toMatchObject({ link: "connected", instanceId: agent.state.instanceId, kind: "agent" });
      expect(row.generation).toBeGreaterThan(0);
      expect(src.fleet().status).toMatchObject({ mode: "live", connected: true, error: null, feed: "stream" });
    } finally {
      src.close();
    }
  });

  it("streams the fleet over WatchFleet: changes arrive by themselves and no List call is made over several seconds", async () => {
    const { client, calls } = counting();
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN, client });
    const releases = [src.watchCommands("tui-a"), src.watchCommands(null)];
    try {
      await waitFor("fleet", () => src.fleet().sessions.find((x) => x.clientId === "tui-a" && x.link === "connected"));
      expect(src.fleet().status).toMatchObject({ connected: true, error: null, feed: "stream" });
      // The sessions view's budget column: the server's per-client retention and budget.
      expect(src.fleet().sessions.find((x) => x.clientId === "tui-a")!.budget).toMatchObject({ limit: s.daemon.state.config.limits.outputPerClient });
      // Someone else submits: the command and its end show in both lists.
      const uuid = (await s.client.submitCommand({ clientId: "tui-a", program: { case: "argv", value: { argv: ["echo", "pushed"] } } })).command!.issueUuid;
      await waitFor("client list", () => src.commands("tui-a").find((c) => c.uuid === uuid)?.state === "succeeded");
      await waitFor("all list", () => src.commands(null).find((c) => c.uuid === uuid)?.state === "succeeded");
      // A refresher (1 s) would have listed the fleet several times by now.
      await new Promise((r) => setTimeout(r, 3000));
      for (const m of ["listClients", "listSessions", "listClaims", "listIncidents", "listCommands"]) expect(calls.get(m) ?? 0, m).toBe(0);
      // One stream, reopened at most once when the views said which command lists they want.
      expect(calls.get("watchFleet")).toBeGreaterThanOrEqual(1);
      expect(calls.get("watchFleet")).toBeLessThanOrEqual(2);
    } finally {
      for (const r of releases) r();
      src.close();
    }
  });

  it("falls back to the refresher only when the server answers Unimplemented (a server older than WatchFleet)", async () => {
    const unimplemented = () =>
      (async function* () {
        throw new ConnectError("HTTP 404 Not Found", ConnectCode.Unimplemented);
      })();
    const { client, calls } = counting(s.controlUrl, { watchFleet: unimplemented });
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN, client, refreshMs: 200 });
    try {
      await waitFor("fleet", () => src.fleet().sessions.find((x) => x.clientId === "tui-a"));
      expect(src.fleet().status).toMatchObject({ connected: true, error: null, feed: "refresh 200ms (server has no WatchFleet)" });
      expect(calls.get("watchFleet")).toBe(1);
      expect(calls.get("listClients")).toBeGreaterThanOrEqual(1);
    } finally {
      src.close();
    }
  });

  it("a broken stream shows in the status, is retried with backoff (not replaced by polling), and resumes with a fresh snapshot", async () => {
    const s2 = await startServer();
    const port = s2.daemon.controlAddress.port;
    const { client, calls } = counting(s2.controlUrl);
    const feed = new WatchFeed(client, { retryMs: 50, maxRetryMs: 400 });
    const src = new ControlSource({ baseUrl: s2.controlUrl, token: OPERATOR_TOKEN, client, feed });
    let s3: TestServer | undefined;
    try {
      await waitFor("connected", () => src.fleet().status.connected);
      await s2.close();
      // First the cut stream, then the refused reconnects.
      await waitFor("error shown", () => src.fleet().status.error?.includes("cannot reach the server"));
      expect(src.fleet().status.connected).toBe(false);
      // It keeps trying, with growing waits that stay bounded.
      const tries = calls.get("watchFleet")!;
      await new Promise((r) => setTimeout(r, 1500));
      expect(calls.get("watchFleet")!).toBeGreaterThan(tries);
      expect(calls.get("watchFleet")!).toBeLessThan(tries + 15);
      // The server comes back (same address and data): the stream resumes, the error clears.
      s3 = await startServer({ dataDir: s2.dataDir, control: { host: "127.0.0.1", port } });
      const a = await startAgent(s3.url, "tui-back", {});
      try {
        await waitFor("resumed", () => src.fleet().status.connected && src.fleet().sessions.find((x) => x.clientId === "tui-back" && x.link === "connected"));
        expect(src.fleet().status.error).toBeNull();
        expect(feed.fellBack).toBe(false);
        expect(calls.get("listClients") ?? 0).toBe(0);
      } finally {
        await a.close();
      }
    } finally {
      src.close();
      await s3?.close();
    }
  });

  it("the fallback refresher: one for the fleet however many views watch; command lists only while watched", async () => {
    const { client, calls } = counting();
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN, client, feed: new RefreshFeed(client, 250) });
    try {
      const releases = [src.watchCommands("tui-a"), src.watchCommands("tui-a"), src.watchCommands(null)];
      await new Promise((r) => setTimeout(r, 1300));
      const fleetCalls = calls.get("listClients") ?? 0;
      expect(fleetCalls).toBeGreaterThanOrEqual(3);
      expect(fleetCalls).toBeLessThanOrEqual(9); // ~1300/250 plus the pokes of new interests
      const lists = calls.get("listCommands") ?? 0;
      expect(lists).toBeLessThanOrEqual(2 * fleetCalls); // two distinct interests, not three
      for (const r of releases) r();
      calls.set("listCommands", 0);
      await new Promise((r) => setTimeout(r, 600));
      expect(calls.get("listCommands")).toBe(0);
    } finally {
      src.close();
    }
  });

  it("submit, then stream the command's output live through FollowOutput; the list reflects the end", async () => {
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN, refreshMs: 200 });
    try {
      const release = src.watchCommands("tui-a");
      const uuid = await src.submit({ clientId: "tui-a", program: { kind: "shell", line: "echo one; sleep 0.3; echo two >&2; exit 2" } });
      const stop = src.watchOutput(uuid);
      await waitFor("finished", () => src.output(uuid).finished);
      const out = src.output(uuid);
      expect(out.lines.filter((l) => l.kind === "stdout" || l.kind === "stderr").map((l) => `${l.kind}:${l.text}`)).toEqual(["stdout:one", "stderr:two"]);
      expect(out.command).toMatchObject({ state: "failed", exitCode: 2 });
      expect(out.lines[out.lines.length - 1]!.text).toContain("failed (exit 2)");
      await waitFor("list", () => src.commands("tui-a").find((c) => c.uuid === uuid)?.state === "failed");
      stop();
      release();
    } finally {
      src.close();
    }
  });

  it("R-S2: stdin written from the TUI source reaches the process (newline appended), close ends it", async () => {
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN });
    try {
      const uuid = await src.submit({ clientId: "tui-a", program: { kind: "argv", argv: ["cat"] }, stdinOpen: true });
      src.watchOutput(uuid);
      await src.writeStdin(uuid, "typed", true);
      await src.writeStdin(uuid, "raw", false);
      await src.closeStdin(uuid);
      await waitFor("finished", () => src.output(uuid).finished);
      expect(
        src
          .output(uuid)
          .lines.filter((l) => l.kind === "stdout")
          .map((l) => l.text),
      ).toEqual(["typed", "raw"]);
    } finally {
      src.close();
    }
  });

  it("signal and cancel from the source end the command cancelled", async () => {
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN });
    try {
      const uuid = await src.submit({ clientId: "tui-a", program: { kind: "argv", argv: ["sleep", "30"] } });
      await waitFor("running", async () => (await s.client.getCommand({ issueUuid: uuid })).command?.state === L.RUNNING);
      expect(await src.signal(uuid, "CANCEL")).toBe(2);
      src.watchOutput(uuid);
      await waitFor("finished", () => src.output(uuid).finished);
      expect(src.output(uuid).command?.state).toBe("cancelled");
    } finally {
      src.close();
    }
  });

  it("R-O5: the output pane of a command whose old output was removed shows the retention marker", async () => {
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN });
    try {
      const uuid = await src.submit({ clientId: "tui-a", program: { kind: "shell", line: "head -c 750000 /dev/urandom | base64 -w 0; echo; echo done" } });
      await waitFor("done", async () => (await s.client.getCommand({ issueUuid: uuid })).command?.state === L.SUCCEEDED);
      src.watchOutput(uuid);
      await waitFor("finished", () => src.output(uuid).finished);
      // The pane opens at the end; what it did not read is said at its top. From the start, the marker.
      const top = src.output(uuid).lines[0]!;
      if (top.kind === "viewer") {
        expect(top.text).toMatch(/^\[… \d+ earlier events? not loaded \(press g \/ Home to load from the start/);
        src.followOutput(uuid, false);
        src.moveOutput(uuid, "start");
        await waitFor("from the start", () => src.output(uuid).finished && src.output(uuid).window?.before === 0);
      }
      const markers = src
        .output(uuid)
        .lines.filter((l) => l.kind === "marker")
        .map((l) => l.text);
      expect(markers.some((m) => /removed by server retention: events \d+–\d+; stdout bytes 0–\d+/.test(m))).toBe(true);
      expect(src.output(uuid).lines.some((l) => l.text === "done")).toBe(true);
    } finally {
      src.close();
    }
  });

  it("a large finished command opens at its end; from the start the reader stops at the pane's bound and reads on only when asked", async () => {
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN });
    try {
      const uuid = await src.submit({ clientId: "tui-a", program: { kind: "argv", argv: ["seq", "1", "900000"] } });
      const c = await waitFor("done", async () =>
        (await s.client.getCommand({ issueUuid: uuid })).command?.state === L.SUCCEEDED ? (await s.client.getCommand({ issueUuid: uuid })).command : null,
      );
      const events = Number(c.storedThroughEventSeq);
      expect(events).toBeGreaterThan(3 * TAIL_EVENTS);
      src.watchOutput(uuid);
      await waitFor("the end", () => src.output(uuid).finished);
      let o = src.output(uuid);
      expect(o.window!.next).toBe(events + 1);
      expect(o.window!.before).toBeGreaterThanOrEqual(events - TAIL_EVENTS);
      expect(o.lines.at(-2)!.text).toBe("900000");
      // From the start, not following: it stops pulling at the bound, and stays stopped.
      src.followOutput(uuid, false);
      src.moveOutput(uuid, "start");
      await waitFor("paused", () => src.output(uuid).window?.paused);
      o = src.output(uuid);
      const next = o.window!.next;
      expect(o.window!.before).toBe(0);
      expect(o.window!.held.lines).toBeGreaterThanOrEqual(PANE_MAX_LINES);
      expect(o.window!.held.lines).toBeLessThanOrEqual(PANE_MAX_LINES + 65_536);
      // (This server keeps 256 KiB per command: the events its retention removed cost nothing to pass.)
      const removed = o.items.find((i) => i.kind === "truncation" && i.events);
      const removedThrough = removed && removed.kind === "truncation" ? (removed.events?.last ?? 0) : 0;
      // Stopped well short of the end. (Its bound is in lines, checked above; how many events that is
      // depends on how the agent's reads cut seq's output, so this is half, not a tighter share.)
      expect(next - removedThrough).toBeLessThan((events - removedThrough) / 2);
      await new Promise((r) => setTimeout(r, 500));
      expect(src.output(uuid).window!.next).toBe(next);
      // Read on: half a pane more, letting as much go from the front; then stopped again.
      src.moveOutput(uuid, "later");
      await waitFor("read on, then paused", () => src.output(uuid).window!.next > next && src.output(uuid).window!.paused);
      o = src.output(uuid);
      expect(o.window!.held.lines).toBeLessThanOrEqual(PANE_MAX_LINES + 65_536);
      expect(o.offset).toBeGreaterThan(0);
      // The end again, without reading what lies between: a new window over the last events, or, when
      // that read-on already stopped within TAIL_EVENTS of the end (batches are large, and retention
      // removed most of this command's events), simply reading on from there.
      const wasNear = o.window!.next > events - TAIL_EVENTS;
      const beforeThen = o.window!.before;
      src.followOutput(uuid, true);
      src.moveOutput(uuid, "end");
      await waitFor("the end again", () => src.output(uuid).finished && src.output(uuid).window!.next === events + 1);
      // Settled: a reader that was near the end is not replaced afterwards by a window opened in parallel.
      await new Promise((r) => setTimeout(r, 300));
      expect(src.output(uuid).finished).toBe(true);
      expect(src.output(uuid).window!.before).toBeGreaterThanOrEqual(wasNear ? beforeThen : events - TAIL_EVENTS);
      expect(src.output(uuid).lines.at(-2)!.text).toBe("900000");
    } finally {
      src.close();
    }
  });

  it("End on a reader paused within TAIL_EVENTS of the end reads on from there: no second window, no refetch", async () => {
    // A made-up finished command of 100 events of 1,000 lines each, served by a fake FollowOutput that
    // honours fromEventSeq: from the start the pane holds PANE_MAX_LINES (20 events) and pauses; each
    // "later" reads on half a pane (10 events) until the reader pauses within TAIL_EVENTS of the end.
    const uuid = "fake-near-end";
    const events = 100;
    const linesPerEvent = 1000;
    const enc = new TextEncoder();
    const command = create(CommandSchema, { issueUuid: uuid, clientId: "tui-a", state: L.SUCCEEDED, revision: 5n, storedThroughEventSeq: BigInt(events) });
    const follows: number[] = [];
    const { client, calls } = counting(s.controlUrl, {
      getCommand: async () => create(GetCommandResponseSchema, { command }),
      followOutput: async function* (...a: unknown[]) {
        const req = a[0] as { fromEventSeq: bigint };
        follows.push(Number(req.fromEventSeq));
        for (let seq = Math.max(1, Number(req.fromEventSeq)); seq <= events; seq++) {
          const text = `${Array.from({ length: linesPerEvent }, (_, i) => `e${seq} l${i}`).join("\n")}\n`;
          yield create(FollowOutputResponseSchema, {
            issueUuid: uuid,
            eventSeq: BigInt(seq),
            item: { case: "output", value: { stream: 1, streamOffset: BigInt((seq - 1) * text.length), data: enc.encode(text) } },
          });
        }
        yield create(FollowOutputResponseSchema, { issueUuid: uuid, eventSeq: BigInt(events), item: { case: "finished", value: command } });
      },
    });
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN, client });
    try {
      src.watchOutput(uuid);
      await waitFor("the end", () => src.output(uuid).finished);
      src.followOutput(uuid, false);
      src.moveOutput(uuid, "start");
      await waitFor("paused", () => src.output(uuid).window?.paused);
      for (let i = 0; i < 20 && src.output(uuid).window!.next + TAIL_EVENTS <= events; i++) {
        const next = src.output(uuid).window!.next;
        src.moveOutput(uuid, "later");
        await waitFor("read on, then paused", () => src.output(uuid).window!.next > next && src.output(uuid).window!.paused);
      }
      const o = src.output(uuid);
      expect(o.finished).toBe(false);
      expect(o.window!.paused).toBe(true);
      expect(o.window!.next + TAIL_EVENTS).toBeGreaterThan(events);
      const beforeThen = o.window!.before;
      const gets = calls.get("getCommand") ?? 0;
      const streams = follows.length;
      // The TUI's End key: follow, then move to the end.
      src.followOutput(uuid, true);
      src.moveOutput(uuid, "end");
      await waitFor("the end again", () => src.output(uuid).finished && src.output(uuid).window!.next === events + 1);
      await new Promise((r) => setTimeout(r, 200));
      expect(calls.get("getCommand") ?? 0).toBe(gets);
      expect(follows.length).toBe(streams);
      expect(src.output(uuid).finished).toBe(true);
      expect(src.output(uuid).window!.before).toBeGreaterThanOrEqual(beforeThen);
      expect(src.output(uuid).lines.at(-1)!.text).toBe(`e${events} l${linesPerEvent - 1}`);
    } finally {
      src.close();
    }
  });

  it("an unknown command's pane says so; a refused token and an unreachable server show in the status", async () => {
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN });
    const bad = new ControlSource({ baseUrl: s.controlUrl, token: "wrong-token-123" });
    const down = new ControlSource({ baseUrl: "http://127.0.0.1:1", token: OPERATOR_TOKEN });
    try {
      src.watchOutput("no-such-command");
      await waitFor("error", () => src.output("no-such-command").error);
      expect(src.output("no-such-command").error).toContain("no command no-such-command");
      await waitFor("bad", () => bad.fleet().status.error);
      expect(bad.fleet().status).toMatchObject({ connected: false });
      expect(bad.fleet().status.error).toContain("refused the operator token");
      await waitFor("down", () => down.fleet().status.error);
      expect(down.fleet().status.error).toContain("cannot reach the server at http://127.0.0.1:1");
      await expect(bad.ackIncident("x")).rejects.toThrow(/refused the operator token/);
    } finally {
      src.close();
      bad.close();
      down.close();
    }
  });

  it("R-F5: authorize from the source consumes a real pending claim", async () => {
    const first = await startAgent(s.url, "tui-claim", {});
    await waitFor("first", () => first.connected);
    const second = await startAgent(s.url, "tui-claim", {});
    const src = new ControlSource({ baseUrl: s.controlUrl, token: OPERATOR_TOKEN, refreshMs: 100 });
    try {
      const claim = await waitFor("claim", () => src.fleet().claims.find((c) => c.clientId === "tui-claim"));
      expect(claim.instanceId).toBe(second.state.instanceId);
      const msg = await src.authorize("tui-claim", claim.instanceId);
      expect(msg).toContain(`authorized instance ${claim.instanceId} for tui-claim once`);
      await waitFor("took over", () => src.fleet().sessions.find((x) => x.clientId === "tui-claim")?.instanceId === second.state.instanceId);
    } finally {
      src.close();
      await second.close();
      await first.close();
    }
  });
});
