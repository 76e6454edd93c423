import { create, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { runs } from "../../support/runs.js";
import { describe, expect, it } from "vitest";
import { AgentEnvelopeSchema, ClientHelloSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { decodeFrame, encodeEnvelope, encodeEventEnvelope, envelopeHead, singleFieldBytes } from "../../../core/codec/frame-codec.js";
import { CommandEventSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { MAX_ENVELOPE_BYTES } from "../../../core/limits.js";

const hello = (): Uint8Array => encodeEnvelope(null, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "host-a", clientInstanceId: "i1" }) });

describe("frame codec", () => {
  it("R-T1: one binary message decodes to one envelope; a text frame is a protocol error", () => {
    const d = decodeFrame(hello());
    expect(d.ok && d.envelope.payload.case).toBe("clientHello");
    const t = decodeFrame(hello(), false);
    expect(t.ok).toBe(false);
    expect(!t.ok && t.error.code).toBe(Code.PROTOCOL_ERROR);
  });

  it("R-T1: a length prefix (or any trailing garbage) is not part of the framing", () => {
    const body = hello();
    const prefixed = new Uint8Array(body.length + 4);
    new DataView(prefixed.buffer).setUint32(0, body.length);
    prefixed.set(body, 4);
    const d = decodeFrame(prefixed);
    // Either malformed, or decodes to something without the hello: never the hello itself.
    expect(d.ok && d.envelope.payload.case === "clientHello" && d.envelope.payload.value.clientId === "host-a").toBe(false);
  });

  it("R-T2: a frame over 1 MiB is refused before decoding", () => {
    const big = new Uint8Array(MAX_ENVELOPE_BYTES + 1); // all zeros: would be a valid (empty) protobuf if decoded
    const d = decodeFrame(big);
    expect(!d.ok && d.error.code).toBe(Code.PAYLOAD_TOO_LARGE);
    const exact = decodeFrame(new Uint8Array(MAX_ENVELOPE_BYTES).fill(0));
    expect(!exact.ok && exact.error.code).not.toBe(Code.PAYLOAD_TOO_LARGE);
  });

  it("R-T5: unknown fields are ignored; an envelope with no recognized payload is PROTOCOL_ERROR", () => {
    // Field 99 (varint) appended to a valid hello: still a hello.
    const withUnknown = new Uint8Array([...hello(), 0x98, 0x06, 0x01]);
    const d = decodeFrame(withUnknown);
    expect(d.ok && d.envelope.payload.case).toBe("clientHello");
    // Only session fields: no payload.
    const empty = toBinary(AgentEnvelopeSchema, create(AgentEnvelopeSchema, { sessionId: "s", sessionGeneration: 3n }));
    const e = decodeFrame(empty);
    expect(!e.ok && e.error.code).toBe(Code.PROTOCOL_ERROR);
    // A payload field this version does not know (field 40, length-delimited).
    const future = new Uint8Array([0xc2, 0x02, 0x00]);
    const f = decodeFrame(future);
    expect(!f.ok && f.error.code).toBe(Code.PROTOCOL_ERROR);
  });

  it("R-W10: arbitrary bytes never throw from the decoder", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2048 }), (b) => {
        const d = decodeFrame(b);
        if (!d.ok) expect([Code.PROTOCOL_ERROR, Code.PAYLOAD_TOO_LARGE]).toContain(d.error.code);
      }),
      { numRuns: runs(2000) },
    );
  });
});

describe("event envelopes", () => {
  it("R-O2: a pinned CommandEvent is spliced into its envelope byte for byte", () => {
    const event = toBinary(
      CommandEventSchema,
      create(CommandEventSchema, { issueUuid: "u", eventSeq: 7n, event: { case: "stdinAck", value: { writeSeq: 3n } } }),
    );
    const big = toBinary(
      CommandEventSchema,
      create(CommandEventSchema, {
        issueUuid: "u",
        eventSeq: 8n,
        event: { case: "output", value: { originalSize: 70000, zstdData: new Uint8Array(70000).fill(5) } },
      }),
    );
    for (const payload of [event, big]) {
      const wire = encodeEventEnvelope({ sessionId: "s1", generation: 9 }, payload);
      const d = decodeFrame(wire);
      expect(d.ok && d.envelope.sessionGeneration).toBe(9n);
      expect(d.ok && d.envelope.payload.case).toBe("commandEvent");
      // The last bytes on the wire are exactly the pinned bytes.
      expect(Buffer.from(wire.subarray(wire.length - payload.length)).equals(Buffer.from(payload))).toBe(true);
    }
  });

  it("singleFieldBytes: the received CommandEvent bytes are the re-encoded event (the server digests them); anything odd is null", () => {
    const ev = create(CommandEventSchema, { issueUuid: "u", eventSeq: 7n, commandRevision: 2n, event: { case: "stdinAck", value: { writeSeq: 3n } } });
    const out = create(CommandEventSchema, {
      issueUuid: "u",
      eventSeq: 8n,
      event: { case: "output", value: { originalSize: 70000, zstdData: new Uint8Array(70000).fill(5) } },
    });
    for (const e of [ev, out]) {
      const viaEnvelope = encodeEnvelope({ sessionId: "s1", generation: 300 }, { case: "commandEvent", value: e });
      expect(Buffer.from(singleFieldBytes(viaEnvelope, 7)!).equals(Buffer.from(toBinary(CommandEventSchema, e)))).toBe(true);
      const pinned = encodeEventEnvelope({ sessionId: "s1", generation: 300 }, toBinary(CommandEventSchema, e));
      expect(Buffer.from(singleFieldBytes(pinned, 7)!).equals(Buffer.from(toBinary(CommandEventSchema, e)))).toBe(true);
      // Twice (protobuf merges the two), truncated, trailing garbage: null, the caller re-encodes.
      const field7Alone = encodeEventEnvelope({ sessionId: "", generation: 0 }, toBinary(CommandEventSchema, e));
      const twice = new Uint8Array([...viaEnvelope, ...field7Alone]);
      expect(decodeFrame(twice).ok).toBe(true);
      expect(singleFieldBytes(twice, 7)).toBeNull();
      expect(singleFieldBytes(viaEnvelope.subarray(0, viaEnvelope.length - 1), 7)).toBeNull();
      expect(singleFieldBytes(new Uint8Array([...viaEnvelope, 0x80]), 7)).toBeNull();
    }
    expect(singleFieldBytes(hello(), 7)).toBeNull();
  });

  it("envelopeHead writes the fence fields exactly as protobuf-es does", () => {
    const ids = ["", "s1", "0123456789abcdef0123456789abcdef", "é-non-ascii", "ééé", "日本語", "\u007f", "x".repeat(127), "y".repeat(128), "z".repeat(300)];
    const gens = [0, 1, 127, 128, 300, 16_383, 16_384, 2 ** 31, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER];
    for (const sessionId of ids)
      for (const generation of gens) {
        const want = toBinary(AgentEnvelopeSchema, create(AgentEnvelopeSchema, { sessionId, sessionGeneration: BigInt(generation) }));
        expect(Buffer.from(envelopeHead({ sessionId, generation })).equals(Buffer.from(want))).toBe(true);
      }
  });

  describe("singleFieldBytes against a message of any fields", () => {
    /** A varint of `v`, padded with continuation bytes to `width` bytes (protobuf parsers accept them). */
    const varint = (v: number, width = 0): number[] => {
      const out: number[] = [];
      do {
        out.push(v % 128);
        v = Math.floor(v / 128);
      } while (v > 0);
      while (out.length < width) out.push(0);
      return out.map((b, i) => (i < out.length - 1 ? b | 0x80 : b));
    };
    type Field = { f: number; wt: 0 | 1 | 2 | 5; body: number[]; tagWidth: number; lenWidth: number };
    const encodeFields = (fields: Field[]): Uint8Array =>
      Uint8Array.from(fields.flatMap((x) => [...varint(x.f * 8 + x.wt, x.tagWidth), ...(x.wt === 2 ? varint(x.body.length, x.lenWidth) : []), ...x.body]));
    const field = fc.oneof(
      fc.record({ f: fc.integer({ min: 1, max: 9 }), wt: fc.constant(0 as const), body: fc.integer({ min: 0, max: 2 ** 40 }).map((v) => varint(v)) }),
      fc.record({ f: fc.integer({ min: 1, max: 9 }), wt: fc.constant(0 as const), body: fc.integer({ min: 0, max: 9 }).map((w) => varint(1, w)) }),
      fc.record({ f: fc.integer({ min: 1, max: 9 }), wt: fc.constant(1 as const), body: fc.array(fc.nat(255), { minLength: 8, maxLength: 8 }) }),
      fc.record({ f: fc.integer({ min: 1, max: 9 }), wt: fc.constant(5 as const), body: fc.array(fc.nat(255), { minLength: 4, maxLength: 4 }) }),
      fc.record({
        f: fc.oneof(fc.integer({ min: 1, max: 9 }), fc.integer({ min: 1, max: 2 ** 29 - 1 })),
        wt: fc.constant(2 as const),
        body: fc.array(fc.nat(255), { maxLength: 300 }),
      }),
    );
    const fields = fc.array(
      fc
        .record({ x: field, tagWidth: fc.integer({ min: 0, max: 5 }), lenWidth: fc.integer({ min: 0, max: 5 }) })
        .map(({ x, tagWidth, lenWidth }) => ({ ...x, tagWidth, lenWidth })),
      { maxLength: 8 },
    );

    it("the payload of the one length-delimited occurrence of the field, byte for byte; none or two: null; cut anywhere: null", () => {
      fc.assert(
        fc.property(fields, fc.integer({ min: 1, max: 9 }), (list, target) => {
          const bytes = encodeFields(list);
          const hits = list.filter((x) => x.f === target && x.wt === 2);
          const got = singleFieldBytes(bytes, target);
          if (hits.length === 1) expect(got && [...got]).toEqual(hits[0]!.body);
          else expect(got).toBeNull();
          // Any proper prefix that cuts into a field is not a message: null (a cut between fields is a shorter message).
          const ends = new Set<number>([0]);
          let at = 0;
          for (const x of list) ends.add((at += encodeFields([x]).length));
          for (let cut = 1; cut < bytes.length; cut++) if (!ends.has(cut)) expect(singleFieldBytes(bytes.subarray(0, cut), target)).toBeNull();
        }),
        { numRuns: runs(300) },
      );
    });

    it("the widths at their bounds: a 5-byte tag or length is read, a 6-byte one is not; a varint of 10 bytes is read, of 11 not; other wire types are not", () => {
      const payload = [1, 2, 3];
      const withTag = (tag: number[], len: number[] = varint(3)) => Uint8Array.from([...tag, ...len, ...payload]);
      expect([...singleFieldBytes(withTag(varint(7 * 8 + 2, 5)), 7)!]).toEqual(payload);
      expect(singleFieldBytes(withTag(varint(7 * 8 + 2, 6)), 7)).toBeNull();
      expect([...singleFieldBytes(withTag(varint(2 ** 28 * 8 + 2)), 2 ** 28)!]).toEqual(payload);
      expect([...singleFieldBytes(withTag(varint(7 * 8 + 2), varint(3, 5)), 7)!]).toEqual(payload);
      expect(singleFieldBytes(withTag(varint(7 * 8 + 2), varint(3, 6)), 7)).toBeNull();
      const varintFirst = (v: number[]) => Uint8Array.from([...varint(1 * 8 + 0), ...v, ...varint(7 * 8 + 2), 3, ...payload]);
      expect([...singleFieldBytes(varintFirst(varint(5, 10)), 7)!]).toEqual(payload);
      expect(singleFieldBytes(varintFirst(varint(5, 11)), 7)).toBeNull();
      // Wire types 3, 4, 6 and 7 are refused even where a length would fit.
      for (const wt of [3, 4, 6, 7]) expect(singleFieldBytes(Uint8Array.from([...varint(1 * 8 + wt), 0, ...varint(7 * 8 + 2), 3, ...payload]), 7)).toBeNull();
      // A fixed64 or fixed32 field cut short, or a length beyond the end.
      expect(singleFieldBytes(Uint8Array.from([...varint(7 * 8 + 2), 3, ...payload, ...varint(1 * 8 + 1), 0, 0, 0, 0, 0, 0, 0]), 7)).toBeNull();
      expect(singleFieldBytes(Uint8Array.from([...varint(7 * 8 + 2), 3, ...payload, ...varint(1 * 8 + 5), 0, 0, 0]), 7)).toBeNull();
      expect(singleFieldBytes(Uint8Array.from([...varint(7 * 8 + 2), 4, ...payload]), 7)).toBeNull();
    });
  });
});
