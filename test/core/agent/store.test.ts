// The agent's durable schema (core/agent/store.ts): every field of an
// AgentCommand survives record -> disk -> restore, the key codecs keep the
// stored format, and decoding refuses a value that is not a row.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle, ExecutionSpecSchema, ShellType } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { applyRecord, defaultAgentConfig, newAgent, restoreAgent, type AgentCommand } from "../../../core/index.js";
import { newCommandOutbox, outboxHeader } from "../../../core/window/outbox.js";
import {
  agentRow,
  chunkKey,
  chunkRecord,
  commandFromRow,
  commandRecord,
  decodeAgentRow,
  entryKey,
  eventKey,
  keyUuid,
  pad,
  parseKey,
  stdinKey,
  stdinRecord,
  tombstoneRecord,
} from "../../../core/agent/store.js";
import { InvariantViolation } from "../../../core/errors.js";

/** A command with every field away from its default, so a dropped field shows. */
function fullCommand(): AgentCommand {
  return {
    uuid: "u-1",
    hash: "ab".repeat(32),
    revision: 7,
    spec: create(ExecutionSpecSchema, { program: { case: "shell", value: { shell: ShellType.BASH, commandLine: "cat" } }, cwd: "/tmp", stdinOpen: true }),
    queueExpiry: 1_700_000_123_000,
    acceptedAt: 1_700_000_000_001,
    phase: "running",
    lifecycle: CommandLifecycle.RUNNING,
    pid: 4242,
    script: {
      size: 6,
      sha256: "cd".repeat(32),
      received: 6,
      chunks: [new Uint8Array([1, 2, 3]), new Uint8Array([4, 5, 6])],
      committed: true,
      path: "/var/rvbox/u-1.sh",
    },
    stdin: {
      next: 4,
      pending: [
        { seq: 2, data: new Uint8Array([9, 9]), close: false },
        { seq: 3, data: new Uint8Array(0), close: true },
      ],
      pendingBytes: 2,
      inFlight: true,
      closed: true,
    },
    lastSignalRevision: 5,
    cancelRevision: 6,
  };
}

describe("agent store schema", () => {
  it("round-trips every field of an AgentCommand through record and restore (R-F1: state after a restart comes only from durable rows)", () => {
    const c = fullCommand();
    const tables = new Map<string, Map<string, unknown>>();
    const records = [
      commandRecord(c),
      outboxHeader(newCommandOutbox(c.uuid)),
      chunkRecord(c.uuid, 0, c.script!.chunks[0]!),
      chunkRecord(c.uuid, 3, c.script!.chunks[1]!),
      ...c.stdin.pending.map((item) => stdinRecord(c.uuid, item)),
    ];
    for (const r of records) applyRecord(tables, r, (v) => structuredClone(v));
    const back = restoreAgent(defaultAgentConfig("a"), { get: (t) => tables.get(t) }, 1).commands.get(c.uuid)!;
    expect(back).toBeDefined();
    // Every field, one by one, so the failure names the dropped one.
    for (const k of Object.keys(c) as Array<keyof AgentCommand>) {
      if (k === "stdin") continue;
      expect(back[k], `field ${k}`).toEqual(c[k]);
    }
    // A write in flight is never durable: the restarted agent has no process to write to.
    expect(back.stdin).toEqual({ ...c.stdin, inFlight: false });
    expect(Object.keys(back).sort()).toEqual(Object.keys(c).sort());
  });

  it("stores a command without its transient parts, in the stored field order", () => {
    const c = fullCommand();
    const row = decodeAgentRow("command", commandRecord(c).value);
    expect(Object.keys(row)).toEqual([
      "uuid",
      "hash",
      "revision",
      "spec",
      "queueExpiry",
      "acceptedAt",
      "phase",
      "lifecycle",
      "pid",
      "lastSignalRevision",
      "cancelRevision",
      "script",
      "stdin",
    ]);
    expect(row.script).toEqual({ ...c.script, chunks: [] });
    expect(row.stdin).toEqual({ next: 4, pending: [], pendingBytes: 0, inFlight: false, closed: true });
    // Restoring a row gives fresh arrays, never the row's own.
    const back = commandFromRow(row);
    back.stdin.pending.push({ seq: 9, data: new Uint8Array(0), close: false });
    expect(row.stdin.pending).toEqual([]);
  });

  it("keeps the key formats of existing stores", () => {
    expect(pad(42, 5)).toBe("00042");
    expect(stdinKey("c1", 1)).toBe("c1/0000000000000001");
    expect(chunkKey("c1", 65536)).toBe("c1/0000000000065536");
    expect(entryKey("u", 5)).toBe("u/000000000005");
    expect(eventKey("cmd", 123456789012)).toBe("cmd/123456789012");
    expect(keyUuid("a/b/000000000007")).toBe("a/b");
    expect(parseKey(eventKey("a/b", 7))).toEqual({ uuid: "a/b", n: 7 });
    expect(parseKey(stdinKey("x", 12))).toEqual({ uuid: "x", n: 12 });
    expect(tombstoneRecord("t", { hash: "h", order: 3 })).toEqual({ table: "tombstone", key: "t", value: { hash: "h", order: 3 } });
  });

  it("decodes rows through their table and refuses what is not a row", () => {
    const tables = new Map<string, Map<string, unknown>>([["command", new Map<string, unknown>([["bad", 3]])]]);
    expect(agentRow(tables, "command", "missing")).toBeUndefined();
    expect(() => agentRow(tables, "command", "bad")).toThrow(InvariantViolation);
    expect(() => decodeAgentRow("meta", { id: 1 })).toThrow(InvariantViolation);
    expect(decodeAgentRow("meta", "abc")).toBe("abc");
    expect(newAgent(defaultAgentConfig("a"), 1).commands.size).toBe(0);
  });
});
