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
    const ids = ["", "s1", "0123456789abcdef0123456789abcdef", "é-non-ascii", "x".repeat(127), "y".repeat(128), "z".repeat(300)];
    const gens = [0, 1, 127, 128, 300, 16_383, 16_384, 2 ** 31, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER];
    for (const sessionId of ids)
      for (const generation of gens) {
        const want = toBinary(AgentEnvelopeSchema, create(AgentEnvelopeSchema, { sessionId, sessionGeneration: BigInt(generation) }));
        expect(Buffer.from(envelopeHead({ sessionId, generation })).equals(Buffer.from(want))).toBe(true);
      }
  });
});
