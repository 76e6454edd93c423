// Exact-behaviour tests of codec/version.ts and codec/frame-codec.ts: the
// boundaries and branches the end-to-end tests only touch in aggregate
// (targets taken from the mutation report, docs/MUTATION.md).
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { AgentEnvelopeSchema, ClientHelloSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandEventSchema, ProtocolRangeSchema, ProtocolVersionSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  compareVersion,
  negotiate,
  rangeFromWire,
  rangeToWire,
  versionInRange,
  type VersionRange,
} from "../../core/codec/version.js";
import { decodeFrame, encodeEnvelope, encodeEventEnvelope, safeNumber } from "../../core/codec/frame-codec.js";
import { Code } from "../../core/errors.js";
import { MAX_ENVELOPE_BYTES } from "../../core/limits.js";

const v = (major: number, minor: number) => ({ major, minor });
const r = (a: number, b: number, c: number, d: number): VersionRange => ({ min: v(a, b), max: v(c, d) });
const wireVersion = (major: number, minor: number) => create(ProtocolVersionSchema, { major, minor });

describe("protocol range from the wire", () => {
  it("R-T4: a missing range, or one missing min or max, is INCOMPATIBLE_VERSION naming the missing range", () => {
    const cases = [
      undefined,
      create(ProtocolRangeSchema, {}),
      create(ProtocolRangeSchema, { min: wireVersion(1, 0) }),
      create(ProtocolRangeSchema, { max: wireVersion(1, 0) }),
    ];
    for (const c of cases) {
      const res = rangeFromWire(c);
      expect(res.ok).toBe(false);
      expect(!res.ok && res.error.code).toBe(Code.INCOMPATIBLE_VERSION);
      expect(!res.ok && res.error.message).toMatch(/range missing/);
    }
  });

  it("R-T4: a complete range comes back as plain numbers; min == max is a valid one-version range", () => {
    expect(rangeFromWire(create(ProtocolRangeSchema, { min: wireVersion(1, 2), max: wireVersion(3, 4) }))).toEqual({
      ok: true,
      value: { min: { major: 1, minor: 2 }, max: { major: 3, minor: 4 } },
    });
    expect(rangeFromWire(create(ProtocolRangeSchema, { min: wireVersion(2, 5), max: wireVersion(2, 5) }))).toEqual({
      ok: true,
      value: { min: { major: 2, minor: 5 }, max: { major: 2, minor: 5 } },
    });
    // Round trip through the wire form.
    expect(rangeFromWire(rangeToWire(r(1, 0, 1, 7)))).toEqual({ ok: true, value: r(1, 0, 1, 7) });
  });

  it("R-T4: a range with min above max (by one minor, or by major) is INCOMPATIBLE_VERSION", () => {
    for (const [min, max] of [
      [wireVersion(1, 1), wireVersion(1, 0)],
      [wireVersion(2, 0), wireVersion(1, 9)],
    ] as const) {
      const res = rangeFromWire(create(ProtocolRangeSchema, { min, max }));
      expect(!res.ok && res.error.code).toBe(Code.INCOMPATIBLE_VERSION);
      expect(!res.ok && res.error.message).toMatch(/min > max/);
    }
  });
});

describe("version comparison and negotiation", () => {
  it("R-T4: versions order by major first, then minor", () => {
    expect(compareVersion(v(1, 9), v(2, 0))).toBeLessThan(0);
    expect(compareVersion(v(2, 0), v(1, 9))).toBeGreaterThan(0);
    expect(compareVersion(v(1, 3), v(1, 4))).toBeLessThan(0);
    expect(compareVersion(v(1, 4), v(1, 4))).toBe(0);
  });

  it("R-T4: versionInRange holds exactly from min through max, inclusive", () => {
    const range = r(1, 2, 1, 5);
    expect(versionInRange(v(1, 1), range)).toBe(false);
    expect(versionInRange(v(1, 2), range)).toBe(true);
    expect(versionInRange(v(1, 3), range)).toBe(true);
    expect(versionInRange(v(1, 5), range)).toBe(true);
    expect(versionInRange(v(1, 6), range)).toBe(false);
    expect(versionInRange(v(0, 9), range)).toBe(false);
    expect(versionInRange(v(2, 0), range)).toBe(false);
  });

  it("R-T4: touching ranges share exactly one version; the rejection names both ranges", () => {
    expect(negotiate(r(1, 0, 1, 3), r(1, 3, 1, 8))).toEqual({ ok: true, value: v(1, 3) });
    expect(negotiate(r(1, 3, 1, 8), r(1, 0, 1, 3))).toEqual({ ok: true, value: v(1, 3) });
    const res = negotiate(r(1, 0, 1, 2), r(1, 3, 2, 1));
    expect(!res.ok && res.error.code).toBe(Code.INCOMPATIBLE_VERSION);
    expect(!res.ok && res.error.message).toContain("1.0-1.2");
    expect(!res.ok && res.error.message).toContain("1.3-2.1");
  });
});

const hello = (): Uint8Array =>
  encodeEnvelope(null, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "host-a", clientInstanceId: "i1" }) });

describe("frame decoding refusals", () => {
  it("R-T1: a text frame is PROTOCOL_ERROR and the message says it was text", () => {
    const d = decodeFrame(hello(), false);
    expect(!d.ok && d.error.code).toBe(Code.PROTOCOL_ERROR);
    expect(!d.ok && d.error.message).toMatch(/text frame/);
  });

  it("R-T2: an oversize frame is PAYLOAD_TOO_LARGE and the message names its size and the limit", () => {
    const d = decodeFrame(new Uint8Array(MAX_ENVELOPE_BYTES + 1));
    expect(!d.ok && d.error.code).toBe(Code.PAYLOAD_TOO_LARGE);
    expect(!d.ok && d.error.message).toContain(String(MAX_ENVELOPE_BYTES + 1));
    expect(!d.ok && d.error.message).toContain(String(MAX_ENVELOPE_BYTES));
  });

  it("R-W10: malformed protobuf is PROTOCOL_ERROR saying so", () => {
    // Field 1 (session_id), length-delimited, claims 5 bytes but none follow.
    const d = decodeFrame(new Uint8Array([0x0a, 0x05]));
    expect(!d.ok && d.error.code).toBe(Code.PROTOCOL_ERROR);
    expect(!d.ok && d.error.message).toMatch(/^malformed protobuf: ./);
  });

  it("R-T5: an envelope without a payload is PROTOCOL_ERROR naming the missing payload", () => {
    const d = decodeFrame(new Uint8Array(0));
    expect(!d.ok && d.error.code).toBe(Code.PROTOCOL_ERROR);
    expect(!d.ok && d.error.message).toMatch(/payload/);
  });
});

describe("frame encoding", () => {
  it("R-F2: an envelope encoded before the welcome carries an empty session id and generation 0", () => {
    const d = decodeFrame(hello());
    expect(d.ok).toBe(true);
    expect(d.ok && d.envelope.sessionId).toBe("");
    expect(d.ok && d.envelope.sessionGeneration).toBe(0n);
    const fenced = decodeFrame(encodeEnvelope({ sessionId: "s9", generation: 4 }, { case: "clientHello", value: create(ClientHelloSchema, {}) }));
    expect(fenced.ok && [fenced.envelope.sessionId, fenced.envelope.sessionGeneration]).toEqual(["s9", 4n]);
  });

  it("R-O2: a spliced event envelope is byte-identical to the canonical encoding at every varint length boundary", () => {
    const fence = { sessionId: "sess", generation: 3 };
    // A CommandEvent holding only issue_uuid of k chars encodes to k + 2 bytes (k < 128),
    // k + 3 bytes (128 <= k < 16384).
    for (const k of [0, 1, 125, 126, 16380, 16381]) {
      const payload = k === 0 ? new Uint8Array(0) : toBinary(CommandEventSchema, create(CommandEventSchema, { issueUuid: "x".repeat(k) }));
      const ev = fromBinary(CommandEventSchema, payload);
      const canonical = encodeEnvelope(fence, { case: "commandEvent", value: ev });
      const spliced = encodeEventEnvelope(fence, payload);
      expect(Buffer.from(spliced).equals(Buffer.from(canonical)), `payload of ${payload.length} bytes`).toBe(true);
    }
    // The boundaries really were hit: 127 needs one length byte, 128 two, 16383 two, 16384 three.
    const len = (k: number) => toBinary(CommandEventSchema, create(CommandEventSchema, { issueUuid: "x".repeat(k) })).length;
    expect([len(125), len(126), len(16380), len(16381)]).toEqual([127, 128, 16383, 16384]);
    const head = toBinary(AgentEnvelopeSchema, create(AgentEnvelopeSchema, { sessionId: "sess", sessionGeneration: 3n })).length;
    const p127 = toBinary(CommandEventSchema, create(CommandEventSchema, { issueUuid: "x".repeat(125) }));
    const w127 = encodeEventEnvelope(fence, p127);
    expect(w127.length).toBe(head + 1 + 1 + 127);
    expect([w127[head], w127[head + 1]]).toEqual([0x3a, 0x7f]);
    const p128 = toBinary(CommandEventSchema, create(CommandEventSchema, { issueUuid: "x".repeat(126) }));
    const w128 = encodeEventEnvelope(fence, p128);
    expect(w128.length).toBe(head + 1 + 2 + 128);
    expect([w128[head], w128[head + 1], w128[head + 2]]).toEqual([0x3a, 0x80, 0x01]);
  });
});

describe("safeNumber", () => {
  it("R-W10: a uint64 becomes a number exactly from 0 through MAX_SAFE_INTEGER, else null", () => {
    expect(safeNumber(-1n)).toBeNull();
    expect(safeNumber(0n)).toBe(0);
    expect(safeNumber(1n)).toBe(1);
    expect(safeNumber(BigInt(Number.MAX_SAFE_INTEGER))).toBe(Number.MAX_SAFE_INTEGER);
    expect(safeNumber(BigInt(Number.MAX_SAFE_INTEGER) + 1n)).toBeNull();
    expect(safeNumber(2n ** 64n - 1n)).toBeNull();
  });
});
