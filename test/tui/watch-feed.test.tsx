// WatchFeed (the TUI's WatchFleet client) against a scripted stream: how it
// applies snapshots and changes, when it reopens the stream, and the sessions
// view staying responsive with 1,000 sessions fed by the stream.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterEach, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  ClientSchema,
  CommandSchema,
  FleetSnapshotSchema,
  IncidentSchema,
  PendingClaimSchema,
  SessionSchema,
  WatchFleetResponseSchema,
  type WatchFleetRequest,
  type WatchFleetResponse,
} from "../../protos/gen/rvbox/v1/control_pb.js";
import type { ControlClient } from "../../client/control-client.js";
import { ControlSource } from "../../tui/sources/control-source.js";
import { COMMAND_PAGE, RefreshFeed, WatchFeed } from "../../tui/sources/fleet-feed.js";
import { eventually, KEY, lineWith, mount, selectedRow, type Harness } from "./helpers.js";

type Change = WatchFleetResponse["change"];
type SnapshotInit = Parameters<typeof create<typeof FleetSnapshotSchema>>[1];

/** A control client whose WatchFleet streams what the test pushes; the other calls must not be used. */
class ScriptedRpc {
  readonly requests: string[][] = [];
  private queue: WatchFleetResponse[] = [];
  private wake: (() => void) | null = null;
  readonly others: string[] = [];

  push(...changes: Change[]): void {
    for (const change of changes) this.queue.push(create(WatchFleetResponseSchema, { change }));
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  snapshot(s: SnapshotInit): void {
    this.push({ case: "snapshot", value: create(FleetSnapshotSchema, s) });
  }

  client(): ControlClient {
    return new Proxy(
      {},
      {
        get: (_t, k: string) => {
          if (k === "watchFleet") return (req: Partial<WatchFleetRequest>, opts?: { signal?: AbortSignal }) => this.stream(req, opts?.signal);
          if (k === "then") return undefined;
          return () => {
            this.others.push(k);
            throw new Error(`unexpected call ${k}`);
          };
        },
      },
    ) as ControlClient;
  }

  private async *stream(req: Partial<WatchFleetRequest>, signal?: AbortSignal): AsyncGenerator<WatchFleetResponse> {
    this.requests.push([...(req.commandClients ?? [])]);
    this.queue = [];
    for (;;) {
      if (signal?.aborted) return;
      const m = this.queue.shift();
      if (m) {
        yield m;
        continue;
      }
      await new Promise<void>((r) => {
        this.wake = r;
        signal?.addEventListener("abort", () => r(), { once: true });
      });
    }
  }
}

const host = (i: number): string => `host-${String(i).padStart(4, "0")}`;
const clientMsg = (i: number, over: Record<string, unknown> = {}) =>
  create(ClientSchema, {
    clientId: host(i),
    instanceId: `inst${i}`,
    generation: 1n,
    connected: true,
    lastActivityTime: timestampFromMs(Date.now()),
    runningCommands: 1,
    queuedCommands: 0,
    maxRunningCommands: 4,
    maxQueuedCommands: 16,
    retainedOutputBytes: 1024n,
    outputBudgetBytes: 4096n,
    ...over,
  });
const sessionMsg = (i: number) =>
  create(SessionSchema, {
    connection: BigInt(i + 1),
    clientId: host(i),
    instanceId: `inst${i}`,
    generation: 1n,
    phase: "ready",
    openedTime: timestampFromMs(Date.now()),
  });
const commandMsg = (client: string, n: number, state = L.RUNNING) =>
  create(CommandSchema, {
    issueUuid: `${client}-cmd-${String(n).padStart(4, "0")}`,
    clientId: client,
    state,
    revision: 1n,
    createdTime: timestampFromMs(1_700_000_000_000 + n * 1000),
  });

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

let src: ControlSource | undefined;
let h: Harness | undefined;
afterEach(() => {
  h?.unmount();
  h = undefined;
  src?.close();
  src = undefined;
});

describe("WatchFeed", () => {
  it("applies the snapshot, then each kind of change; a new snapshot replaces everything", async () => {
    const rpc = new ScriptedRpc();
    src = new ControlSource({ baseUrl: "http://scripted", token: "t", client: rpc.client() });
    rpc.snapshot({
      clients: [clientMsg(0), clientMsg(1)],
      sessions: [sessionMsg(0), sessionMsg(1)],
      claims: [create(PendingClaimSchema, { clientId: host(1), instanceId: "intruder", currentInstanceId: "inst1", attempts: 1 })],
      incidents: [create(IncidentSchema, { incidentId: "inc-1", clientId: host(0), kind: "k", detail: "d" })],
    });
    await eventually(() => expect(src!.fleet().sessions).toHaveLength(2));
    const f = src.fleet();
    expect(f.status).toMatchObject({ connected: true, error: null, feed: "stream" });
    expect(f.claims.map((c) => c.instanceId)).toEqual(["intruder"]);
    expect(f.incidents.map((i) => i.id)).toEqual(["inc-1"]);
    expect(f.sessions[0]!.budget).toEqual({ used: 1024, limit: 4096 });

    rpc.push(
      { case: "client", value: clientMsg(2, { connected: false }) },
      { case: "client", value: clientMsg(0, { runningCommands: 3 }) },
      { case: "sessionClosed", value: 2n },
      { case: "client", value: clientMsg(1, { connected: false }) },
      { case: "claimCleared", value: host(1) },
      { case: "incident", value: create(IncidentSchema, { incidentId: "inc-1", clientId: host(0), kind: "k", detail: "d", acknowledged: true }) },
      { case: "incident", value: create(IncidentSchema, { incidentId: "inc-2", clientId: host(1), kind: "k2" }) },
      { case: "incidentRemoved", value: "inc-2" },
    );
    await eventually(() => expect(src!.fleet().sessions).toHaveLength(3));
    const g = src.fleet();
    expect(g.sessions.find((s) => s.clientId === host(0))).toMatchObject({ running: 3, link: "connected", detail: "ready" });
    expect(g.sessions.find((s) => s.clientId === host(1))).toMatchObject({ link: "offline", detail: "" });
    expect(g.claims).toEqual([]);
    expect(g.incidents).toEqual([expect.objectContaining({ id: "inc-1", acknowledged: true })]);

    // R-F6: a forgotten client leaves the list; a client's dropped incidents are carried.
    rpc.push({ case: "client", value: clientMsg(0, { runningCommands: 3, incidentsDropped: 7n }) }, { case: "clientRemoved", value: host(2) });
    await eventually(() => expect(src!.fleet().sessions).toHaveLength(2));
    expect(src.fleet().sessions.find((s) => s.clientId === host(0))?.incidentsDropped).toBe(7);

    // The server lost track (overflow): its fresh snapshot is the whole truth.
    rpc.snapshot({ clients: [clientMsg(7)] });
    await eventually(() => expect(src!.fleet().sessions.map((s) => s.clientId)).toEqual([host(7)]));
    expect(src.fleet().incidents).toEqual([]);
    expect(rpc.others).toEqual([]);
  });

  it("asks for the command lists the views watch: a stream covering them, reopened only when one is missing", async () => {
    const rpc = new ScriptedRpc();
    const feed = new WatchFeed(rpc.client());
    src = new ControlSource({ baseUrl: "http://scripted", token: "t", client: rpc.client(), feed });
    await tick();
    expect(rpc.requests).toEqual([[]]);
    const a = src.watchCommands(host(0));
    const all = src.watchCommands(null);
    await eventually(() => expect(rpc.requests).toHaveLength(2));
    expect(rpc.requests[1]).toEqual(["*", host(0)].sort());
    rpc.snapshot({ clients: [clientMsg(0), clientMsg(1)], commands: [commandMsg(host(0), 1), commandMsg(host(1), 2)] });
    await eventually(() => expect(src!.commands(null)).toHaveLength(2));
    expect(src.commands(host(0)).map((c) => c.uuid)).toEqual([`${host(0)}-cmd-0001`]);
    expect(src.commands(null).map((c) => c.uuid)).toEqual([`${host(1)}-cmd-0002`, `${host(0)}-cmd-0001`]); // newest first

    // A change of a listed command, and a new one.
    rpc.push({ case: "command", value: commandMsg(host(0), 1, L.SUCCEEDED) }, { case: "command", value: commandMsg(host(0), 3) });
    await eventually(() =>
      expect(src!.commands(host(0)).map((c) => `${c.uuid}:${c.state}`)).toEqual([`${host(0)}-cmd-0003:running`, `${host(0)}-cmd-0001:succeeded`]),
    );
    // The server pruned a finished one from its history: it leaves the lists.
    rpc.push({ case: "commandRemoved", value: `${host(0)}-cmd-0001` });
    await eventually(() => expect(src!.commands(host(0)).map((c) => c.uuid)).toEqual([`${host(0)}-cmd-0003`]));
    expect(src.commands(null).map((c) => c.uuid)).toEqual([`${host(0)}-cmd-0003`, `${host(1)}-cmd-0002`]);

    // Watching again what is covered, or less: no new stream.
    const again = src.watchCommands(host(0));
    a();
    again();
    await tick();
    await tick();
    expect(rpc.requests).toHaveLength(2);
    // A client the stream does not cover: a new stream (whose snapshot has its list).
    const b = src.watchCommands(host(1));
    await eventually(() => expect(rpc.requests).toHaveLength(3));
    expect(rpc.requests[2]).toEqual(["*", host(1)].sort());
    expect(feed.opened).toBe(3);
    b();
    all();
    expect(rpc.others).toEqual([]);
  });

  it("a list watched again after nobody watched it (another view in between) is fetched again, not left empty", async () => {
    const rpc = new ScriptedRpc();
    const feed = new WatchFeed(rpc.client());
    src = new ControlSource({ baseUrl: "http://scripted", token: "t", client: rpc.client(), feed });
    const all = src.watchCommands(null);
    await eventually(() => expect(rpc.requests).toHaveLength(2));
    rpc.snapshot({ clients: [clientMsg(0)], commands: [commandMsg(host(0), 1), commandMsg(host(0), 2)] });
    await eventually(() => expect(src!.commands(null)).toHaveLength(2));
    // The operator switches to the sessions view: no list is watched, and the lists are forgotten.
    all();
    await tick();
    await tick();
    // Back to the commands view: the list comes back from a new stream's snapshot.
    const again = src.watchCommands(null);
    await eventually(() => expect(rpc.requests).toHaveLength(3));
    expect(rpc.requests[2]).toEqual(["*"]);
    rpc.snapshot({ clients: [clientMsg(0)], commands: [commandMsg(host(0), 1), commandMsg(host(0), 2)] });
    await eventually(() => expect(src!.commands(null).map((c) => c.uuid)).toEqual([`${host(0)}-cmd-0002`, `${host(0)}-cmd-0001`]));
    // The same for one client's list, opened, left, and opened again.
    const one = src.watchCommands(host(0));
    await eventually(() => expect(rpc.requests).toHaveLength(4));
    rpc.snapshot({ clients: [clientMsg(0)], commands: [commandMsg(host(0), 1), commandMsg(host(0), 2)] });
    await eventually(() => expect(src!.commands(host(0))).toHaveLength(2));
    one();
    await tick();
    await tick();
    const back = src.watchCommands(host(0));
    await eventually(() => expect(rpc.requests).toHaveLength(5));
    rpc.snapshot({ clients: [clientMsg(0)], commands: [commandMsg(host(0), 1), commandMsg(host(0), 2)] });
    await eventually(() => expect(src!.commands(host(0))).toHaveLength(2));
    back();
    again();
  });

  it("keeps each list to the newest COMMAND_PAGE commands", async () => {
    const rpc = new ScriptedRpc();
    src = new ControlSource({ baseUrl: "http://scripted", token: "t", client: rpc.client() });
    src.watchCommands(host(0));
    await eventually(() => expect(rpc.requests).toHaveLength(2));
    rpc.snapshot({ clients: [clientMsg(0)], commands: Array.from({ length: COMMAND_PAGE }, (_, n) => commandMsg(host(0), n)) });
    await eventually(() => expect(src!.commands(host(0))).toHaveLength(COMMAND_PAGE));
    rpc.push({ case: "command", value: commandMsg(host(0), 9999) });
    await eventually(() => expect(src!.commands(host(0))[0]!.uuid).toBe(`${host(0)}-cmd-9999`));
    expect(src.commands(host(0))).toHaveLength(COMMAND_PAGE);
    expect(src.commands(host(0)).some((c) => c.uuid === `${host(0)}-cmd-0000`)).toBe(false); // the oldest fell off
  });

  it("stays responsive with 1,000 sessions fed by the stream: a burst of 1,000 changes is one update, keys still move the selection", async () => {
    const rpc = new ScriptedRpc();
    src = new ControlSource({ baseUrl: "http://scripted", token: "t", client: rpc.client() });
    h = await mount(src, { columns: 120, rows: 40 });
    rpc.snapshot({ clients: Array.from({ length: 1000 }, (_, i) => clientMsg(i)), sessions: Array.from({ length: 1000 }, (_, i) => sessionMsg(i)) });
    await eventually(() => expect(h!.frame()).toContain("of 1000"));
    expect(h.frame()).toContain("stream");
    expect(
      h
        .frame()
        .split("\n")
        .filter((l) => /host-\d{4}/.test(l)).length,
    ).toBeLessThan(40); // only the visible rows render

    // Every client changes at once (one server push): the source re-reads the fleet once, not 1,000 times.
    const before = src.version;
    rpc.push(...Array.from({ length: 1000 }, (_, i): Change => ({ case: "client", value: clientMsg(i, { runningCommands: i === 999 ? 3 : 2 }) })));
    await eventually(() => expect(src!.fleet().sessions.find((s) => s.clientId === host(999))?.running).toBe(3));
    expect(src.version - before).toBeLessThanOrEqual(2);

    await h.press("j", KEY.pageDown, "G");
    expect(selectedRow(h.frame())).toContain(host(999));
    await eventually(() => expect(lineWith(h!.frame(), host(999))).toMatch(/3\/4/));
    // A later single change still shows.
    rpc.push({ case: "client", value: clientMsg(999, { runningCommands: 4 }) });
    await eventually(() => expect(lineWith(h!.frame(), host(999))).toMatch(/4\/4/));
    expect(rpc.others).toEqual([]);
  });
});

describe("RefreshFeed", () => {
  it("lists only the clients still watched: one released while an earlier list is awaited is not listed", async () => {
    const listed: string[] = [];
    let answerFirst: (() => void) | null = null;
    const rpc = {
      listClients: async () => ({ clients: [] }),
      listSessions: async () => ({ sessions: [] }),
      listClaims: async () => ({ claims: [] }),
      listIncidents: async () => ({ incidents: [] }),
      listCommands: (req: { clientId: string }) => {
        listed.push(req.clientId);
        if (listed.length > 1) return Promise.resolve({ commands: [] });
        return new Promise<{ commands: never[] }>((resolve) => (answerFirst = () => resolve({ commands: [] })));
      },
    } as unknown as ConstructorParameters<typeof RefreshFeed>[0];
    const feed = new RefreshFeed(rpc, 60_000);
    const lists: Array<string | null> = [];
    feed.setInterest(new Set(["a", "b"]));
    feed.start({ fleet: () => {}, commands: (c) => lists.push(c), error: (e) => expect.unreachable(String(e)) });
    try {
      await eventually(() => expect(listed).toEqual(["a"]));
      // "b" is released while the list of "a" is awaited; "c" is new (a poke, a cycle of its own after this one).
      feed.setInterest(new Set(["a", "c"]));
      answerFirst!();
      await eventually(() => expect(listed).toEqual(["a", "a", "c"]));
      expect(lists).toEqual(["a", "a", "c"]);
    } finally {
      feed.stop();
    }
  });
});
