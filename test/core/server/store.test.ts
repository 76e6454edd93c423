// The server's storage schema (core/server/store.ts): key codecs, and the one
// field mapping a command record is written and restored by. A field of
// ServerCommand that the record drops (or a restart resets by mistake) fails
// the round trip below.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultServerConfig, restoreServer, serverInvariants, type ServerCommand } from "../../../core/index.js";
import {
  COMMAND_FIELDS,
  COMMAND_FIELD_PATHS,
  commandRecord,
  eventKey,
  eventPrefix,
  parseEventKey,
  restoreCommand,
  type CommandRow,
} from "../../../core/server/store.js";

/** A command in which every field holds a value no default or reset has. */
function sample(): ServerCommand {
  return {
    uuid: "u-1",
    clientId: "client-a",
    hash: "ab".repeat(32),
    revision: 4,
    spec: create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true }),
    script: { bytes: new Uint8Array([1, 2, 3]), acked: 2, sent: 3, commitSentOn: 6, committed: true },
    createdAt: 1_600_000_000_001,
    committed: { state: L.QUEUED, exitCode: 7, signalName: "x", reason: "y", storedThrough: 1, revision: 2, stdinAssigned: 1, startedTime: 3, endedTime: 4 },
    queueExpiry: 90_000,
    state: L.RUNNING,
    dispatch: { everDispatched: true, dispatchedOn: 6, dispatchedAt: 5_000, attempts: 3, nextAttemptAt: 4_000 },
    ingest: { storedThrough: 8, receivedThrough: 9, streamNext: { stdout: 100, stderr: 20 }, digests: { 8: 12345, 9: 6789 }, rowEvents: 5 },
    exit: { exitCode: 2, signalName: "SIGTERM", reason: "because", terminalSource: "agent" },
    stdin: {
      nextSeq: 4,
      ackedThrough: 1,
      sentThrough: 3,
      queue: [
        { seq: 2, data: new Uint8Array([65]), appendNewline: true, close: false, requestId: "r2" },
        { seq: 3, data: new Uint8Array(0), appendNewline: false, close: true, requestId: "r3" },
      ],
      queuedBytes: 1,
      closeRequested: true,
      // Both writes inline, as a record of an older server holds them (rows: restoreCommands).
      inlineThrough: 3,
    },
    signals: [{ revision: 4, signal: SignalKind.TERMINATE, requestId: "r4", sentOn: 6 }],
    output: {
      segments: [{ firstSeq: 2, lastSeq: 5, bytes: 50, ranges: [{ stream: "stdout", offset: 40, length: 60 }] }],
      storedOutputBytes: 50,
      retention: [{ firstSeq: 1, lastSeq: 1, ranges: [{ stream: "stdout", offset: 0, length: 40 }], at: 1_600_000_000_002 }],
    },
    requests: { r1: 1, r4: 4 },
    endedAt: 77,
    startedTime: 1_600_000_000_003,
    endedTime: 1_600_000_000_004,
    specBytes: 11,
    charged: 999,
  };
}

/**
 * What a restart gives each field that is not kept as it was: nothing is in
 * flight on a session, digests come back from the event table, and the record
 * claims what is durable with it. Every other field must come back equal.
 */
function afterRestart(c: ServerCommand): Partial<ServerCommand> {
  return {
    // The bytes come from their own row (table `script`); nothing is in flight on a session.
    script: { ...c.script, sent: c.script.acked, commitSentOn: 0 },
    dispatch: { ...c.dispatch, dispatchedOn: 0 },
    ingest: { ...c.ingest, storedThrough: c.ingest.receivedThrough, digests: {} },
    stdin: { ...c.stdin, sentThrough: c.stdin.ackedThrough },
    signals: c.signals.map((s) => ({ ...s, sentOn: 0 })),
    charged: 0,
    committed: {
      state: c.state,
      exitCode: c.exit.exitCode,
      signalName: c.exit.signalName,
      reason: c.exit.reason,
      storedThrough: c.ingest.receivedThrough,
      revision: c.revision,
      stdinAssigned: c.stdin.nextSeq - 1,
      startedTime: c.startedTime,
      endedTime: c.endedTime,
    },
  };
}

describe("server store: the command record", () => {
  it("names every field of a ServerCommand once, sub-structs field by field (the sample is complete)", () => {
    expect(Object.keys(COMMAND_FIELDS).sort()).toEqual(Object.keys(sample()).sort());
    const c = sample() as unknown as Record<string, Record<string, unknown>>;
    const leaves = COMMAND_FIELD_PATHS.map((f) => f.path.join("."));
    const want: string[] = [];
    for (const [k, v] of Object.entries(COMMAND_FIELDS)) {
      if (typeof (v as { load?: unknown }).load === "function") want.push(k);
      else for (const f of Object.keys(c[k]!)) want.push(`${k}.${f}`);
    }
    expect(leaves.sort()).toEqual(want.sort());
  });

  it("writes each column of the flat stored record from exactly one field", () => {
    const columns = COMMAND_FIELD_PATHS.flatMap((f) => (f.codec.column === null ? [] : [f.codec.column]));
    expect(new Set(columns).size).toBe(columns.length);
    expect(Object.keys(commandRecord(sample()).value as object).sort()).toEqual([...columns].sort());
  });

  it("round-trips every field through record and restore; only the documented ones are reset", () => {
    const c = sample();
    const rec = commandRecord(c);
    expect(rec.table).toBe("command");
    expect(rec.key).toBe(c.uuid);
    const back = restoreCommand(rec.value as CommandRow, { data: c.script.bytes! });
    const reset = afterRestart(c);
    expect(Object.keys(back).sort()).toEqual(Object.keys(c).sort());
    for (const k of Object.keys(c) as Array<keyof ServerCommand>) {
      const want = k in reset ? reset[k] : c[k];
      expect({ field: k, value: back[k] }).toEqual({ field: k, value: want });
    }
  });

  it("stores no in-memory-only field, and copies what it stores (a later change does not reach the record)", () => {
    const c = sample();
    const v = commandRecord(c).value as unknown as Record<string, unknown>;
    expect("script" in v || "committed" in v || "charged" in v).toBe(false);
    c.stdin.queue[0]!.seq = 99;
    c.ingest.streamNext.stdout = 1;
    c.output.segments[0]!.ranges[0]!.length = 1;
    c.requests.r9 = 9;
    const s = v.stdin as ServerCommand["stdin"];
    expect(s.queue[0]!.seq).toBe(2);
    expect((v.streamNext as CommandRow["streamNext"]).stdout).toBe(100);
    expect((v.segments as CommandRow["segments"])[0]!.ranges[0]!.length).toBe(60);
    expect(v.requests).toEqual({ r1: 1, r4: 4 });
  });

  it("restores a record written before history pruning and command times (legacy fields filled in)", () => {
    const c = sample();
    c.state = L.SUCCEEDED;
    c.signals = [];
    c.stdin.queue = [];
    c.stdin.queuedBytes = 0;
    const v = { ...(commandRecord(c).value as CommandRow) };
    delete v.endedAt;
    delete v.startedTime;
    delete v.endedTime;
    delete v.specBytes;
    delete v.rowEvents;
    const back = restoreCommand(v, undefined);
    expect(back.endedAt).toBe(c.createdAt); // terminal: ordered by its creation
    expect([back.startedTime, back.endedTime, back.ingest.rowEvents]).toEqual([0, 0, 0]);
    expect(back.specBytes).toBeGreaterThan(0);
    expect(back.script.bytes).toBeNull();
  });

  it("a restored server holds the command as recorded (through restoreServer)", () => {
    const c = sample();
    c.clientId = "a";
    c.script.acked = 0; // an argv command uploads no script
    const tables = new Map<string, Map<string, unknown>>([
      ["command", new Map([[c.uuid, commandRecord(c).value]])],
      ["script", new Map([[c.uuid, { data: c.script.bytes }]])],
    ]);
    const st = restoreServer(defaultServerConfig(), { get: (t) => tables.get(t) }, 1);
    const back = st.commands.get(c.uuid)!;
    expect(back.stdin.queue).toEqual(c.stdin.queue);
    expect(back.output.retention).toEqual(c.output.retention);
    expect(back.committed.storedThrough).toBe(c.ingest.receivedThrough);
    expect(st.active.has(c.uuid)).toBe(true);
    expect(() => serverInvariants(st)).not.toThrow();
  });
});

describe("server store: keys", () => {
  it("event keys pad the sequence to 12 digits so they sort in seq order, and parse back", () => {
    expect(eventKey("c1", 2)).toBe("c1/000000000002");
    expect(eventKey("c1", 10) > eventKey("c1", 9)).toBe(true);
    expect(eventKey("c1", 5).startsWith(eventPrefix("c1"))).toBe(true);
    expect(parseEventKey(eventKey("a.b:c", 123456))).toEqual({ uuid: "a.b:c", seq: 123456 });
    expect(parseEventKey("no-slash")).toBeNull();
  });
});
