// Direct tests of window/outbox.ts edges that the end-to-end core tests
// exercise only in aggregate (targets taken from the mutation report).
import { create, fromBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { defaultAgentConfig } from "../../../core/index.js";
import type { PersistRecord } from "../../../core/effects.js";
import {
  admit,
  appendMeta,
  appendOutput,
  checkOutboxLimits,
  newCommandOutbox,
  newOutbox,
  outboxInvariants,
  type OutboxLimits,
} from "../../../core/window/outbox.js";
import {
  CommandEventSchema,
  CommandLifecycle as L,
  LifecycleTransitionSchema,
  SignalResultSchema,
  TruncationCause,
} from "../../../protos/gen/rvbox/v1/common_pb.js";
import { MAX_CHUNK_BYTES } from "../../../core/limits.js";
import { testPorts } from "../../support/ports.js";

const KiB = 1024;
const base = (): OutboxLimits => ({ ...defaultAgentConfig("x").limits });
const bytes = (n: number, c = 120) => new Uint8Array(n).fill(c);

describe("outbox limits", () => {
  it("R-W9 R-W3: refuses every unworkable limit and accepts the smallest workable one", () => {
    const chunk = MAX_CHUNK_BYTES + 256;
    const ok: OutboxLimits = {
      ...base(),
      windowPerCommand: chunk + 4096,
      windowPerSession: chunk + 4096,
      metadataReserve: 4096,
      rawLow: 10,
      rawHigh: 10,
      outputPerCommand: MAX_CHUNK_BYTES,
      outputTotal: MAX_CHUNK_BYTES,
    };
    expect(checkOutboxLimits(ok)).toBeNull();
    expect(checkOutboxLimits({ ...ok, windowPerCommand: chunk + 4095 })).toMatch(/windowPerCommand/);
    expect(checkOutboxLimits({ ...ok, windowPerSession: chunk + 4095, windowPerCommand: chunk + 4095 })).toMatch(/windowPerCommand/);
    expect(checkOutboxLimits({ ...ok, windowPerCommand: chunk + 4096, windowPerSession: chunk + 4095 })).toMatch(/windowPerSession - metadataReserve/);
    expect(checkOutboxLimits({ ...ok, windowPerCommand: chunk + 5000, windowPerSession: chunk + 4096 })).toMatch(/at least windowPerCommand/);
    expect(checkOutboxLimits({ ...ok, metadataReserve: 4095, windowPerCommand: chunk + 4095, windowPerSession: chunk + 4095 })).toMatch(/at least 4 KiB/);
    expect(checkOutboxLimits({ ...ok, rawLow: 11 })).toMatch(/rawLow/);
    expect(checkOutboxLimits({ ...ok, outputPerCommand: MAX_CHUNK_BYTES - 1 })).toMatch(/output budgets/);
    expect(checkOutboxLimits({ ...ok, outputTotal: MAX_CHUNK_BYTES - 1 })).toMatch(/output budgets/);
    expect(() => newOutbox({ ...ok, rawLow: 11 })).toThrow(/invalid outbox limits/);
  });
});

describe("appending", () => {
  it("R-W6: output is kept until the high watermark is exceeded (not reached), then summarized; empty output is a no-op", () => {
    const ob = newOutbox({ ...base(), rawHigh: 100 * KiB, rawLow: 50 * KiB });
    expect(ob.summarizing).toBe(false);
    const cb = newCommandOutbox("u");
    ob.commands.set("u", cb);
    const r: PersistRecord[] = [];
    expect(appendOutput(ob, cb, "stdout", new Uint8Array(0), 1, 0, r)).toBe(true);
    expect(cb.entries).toHaveLength(0);
    expect(r).toHaveLength(0);
    expect(appendOutput(ob, cb, "stdout", bytes(100 * KiB), 1, 0, r)).toBe(true); // exactly at high: still kept
    expect(ob.summarizing).toBe(false);
    expect(appendOutput(ob, cb, "stdout", bytes(1), 1, 0, r)).toBe(true); // crosses high: kept, then summarizing
    expect(ob.summarizing).toBe(true);
    expect(appendOutput(ob, cb, "stderr", bytes(10), 1, 0, r)).toBe(false);
    expect(appendOutput(ob, cb, "stderr", bytes(5), 1, 0, r)).toBe(false);
    expect(appendOutput(ob, cb, "stdout", bytes(7), 1, 0, r)).toBe(false);
    // One watermark marker, extended in place: stderr 0..15 then stdout from where it stood.
    const t = cb.entries.at(-1)!;
    expect(t.kind === "truncation" && t.cause).toBe(TruncationCause.AGENT_WATERMARK);
    expect(t.kind === "truncation" && t.ranges).toEqual([
      { stream: "stderr", offset: 0, length: 15 },
      { stream: "stdout", offset: 100 * KiB + 1, length: 7 },
    ]);
    expect(cb.streamNext).toEqual({ stdout: 100 * KiB + 8, stderr: 15 });
    expect(cb.entries.filter((e) => e.kind === "truncation")).toHaveLength(1);
    outboxInvariants(ob);
  });

  it("R-W6: a metadata entry between two summarized runs starts a new marker", () => {
    const ob = newOutbox({ ...base(), rawHigh: 8 * KiB, rawLow: 4 * KiB });
    const cb = newCommandOutbox("u");
    ob.commands.set("u", cb);
    const r: PersistRecord[] = [];
    appendOutput(ob, cb, "stdout", bytes(9 * KiB), 1, 0, r);
    appendOutput(ob, cb, "stdout", bytes(3), 1, 0, r);
    appendMeta(ob, cb, { case: "signalResult", value: create(SignalResultSchema, { delivered: true }) }, 1, 0, r);
    appendOutput(ob, cb, "stdout", bytes(4), 1, 0, r);
    expect(cb.entries.map((e) => e.kind)).toEqual(["output", "truncation", "meta", "truncation"]);
  });

  it("R-O8: only a terminal lifecycle closes the window; nothing may follow it", () => {
    const ob = newOutbox(base());
    const cb = newCommandOutbox("u");
    ob.commands.set("u", cb);
    const r: PersistRecord[] = [];
    const life = (state: L) => ({ case: "lifecycle" as const, value: create(LifecycleTransitionSchema, { state }) });
    appendMeta(ob, cb, life(L.RUNNING), 1, 0, r);
    expect(cb.closed).toBe(false);
    appendMeta(ob, cb, { case: "signalResult", value: create(SignalResultSchema, {}) }, 1, 0, r);
    expect(cb.closed).toBe(false);
    appendMeta(ob, cb, life(L.SUCCEEDED), 1, 0, r);
    expect(cb.closed).toBe(true);
    expect(() => appendOutput(ob, cb, "stdout", bytes(1), 1, 0, r)).toThrow(/after terminal/);
    for (const s of [L.FAILED, L.REJECTED, L.CANCELLED, L.INTERRUPTED, L.EXPIRED]) {
      const c2 = newCommandOutbox(`v${s}`);
      ob.commands.set(c2.uuid, c2);
      appendMeta(ob, c2, life(s), 1, 0, r);
      expect(c2.closed, L[s]).toBe(true);
    }
  });

  it("R-O1 R-O2: admission encodes entries in local order with consecutive seqs and the recorded stream offsets", () => {
    const ob = newOutbox(base());
    const cb = newCommandOutbox("u");
    ob.commands.set("u", cb);
    const r: PersistRecord[] = [];
    appendOutput(ob, cb, "stdout", bytes(10, 65), 2, 1000, r);
    appendOutput(ob, cb, "stderr", bytes(3, 66), 2, 1001, r);
    appendOutput(ob, cb, "stdout", bytes(5, 67), 2, 1002, r);
    const admitted = admit(ob, testPorts, r);
    expect(admitted).toEqual([
      { uuid: "u", seq: 1 },
      { uuid: "u", seq: 2 },
      { uuid: "u", seq: 3 },
    ]);
    const evs = cb.pinned.map((p) => fromBinary(CommandEventSchema, p.bytes));
    expect(
      evs.map((e) => [Number(e.eventSeq), e.event.case, Number((e.event.value as { streamOffset: bigint }).streamOffset), Number(e.commandRevision)]),
    ).toEqual([
      [1, "output", 0, 2],
      [2, "output", 0, 2],
      [3, "output", 10, 2],
    ]);
    expect(ob.rawTotal).toBe(0);
    expect(cb.entries).toHaveLength(0);
    expect(r.filter((x) => x.table === "entry" && x.value === null)).toHaveLength(3);
    outboxInvariants(ob);
  });
});
