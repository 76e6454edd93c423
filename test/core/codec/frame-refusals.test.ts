// Exact-behaviour tests of codec/frame-codec.ts: the
// boundaries and branches the end-to-end tests only touch in aggregate
// (targets taken from the mutation report, docs/MUTATION.md).
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { AgentEnvelopeSchema, ClientHelloSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandEventSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { decodeFrame, encodeEnvelope, encodeEventEnvelope, safeNumber } from "../../../core/codec/frame-codec.js";
import { Code } from "../../../core/errors.js";
import { MAX_ENVELOPE_BYTES } from "../../../core/limits.js";

const hello = (): Uint8Array => encodeEnvelope(null, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "host-a", clientInstanceId: "i1" }) });

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
