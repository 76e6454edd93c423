// core/codec/hot-codec.ts against protobuf-es: the hand-written reader and
// writers must give exactly what fromBinary/toBinary give (values, key order,
// bytes), and step aside (null) for everything they do not handle.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeFrame, encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { decodeHotEnvelope, encodeEventAckEnvelope, encodeOutputEvent, type HotOutputEvent } from "../../../core/codec/hot-codec.js";
import { AgentEnvelopeSchema, EventAckSchema, StdinWriteSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandEventSchema, LifecycleTransitionSchema, OutputChunkSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { runs } from "../../support/runs.js";

/** A value with its object keys in order: equal canon means equal values and the same key order. */
function canon(v: unknown): unknown {
  if (typeof v === "bigint") return { bigint: v.toString() };
  if (v instanceof Uint8Array) return { bytes: [...v] };
  if (Array.isArray(v)) return v.map(canon);
  if (v !== null && typeof v === "object") return Object.entries(v).map(([k, x]) => [k, canon(x)]);
  return v;
}

function reference(b: Uint8Array): unknown {
  try {
    return canon(fromBinary(AgentEnvelopeSchema, b));
  } catch (e) {
    return { threw: (e as Error).message };
  }
}

const MAX = Number.MAX_SAFE_INTEGER;
const num = fc.oneof(
  fc.constantFrom(0, 1, 127, 128, 16_383, 16_384, 2 ** 28, 2 ** 31 - 1, 2 ** 32, 2 ** 49 - 1, 2 ** 49, MAX),
  fc.nat(),
  fc.integer({ min: 0, max: MAX }),
);
const asciiId = fc.oneof(fc.uuid(), fc.string({ unit: "binary-ascii", maxLength: 40 }));
const anyId = fc.oneof(asciiId, fc.string({ maxLength: 12 }), fc.string({ unit: "grapheme", maxLength: 6 }));
const outputEvent: fc.Arbitrary<HotOutputEvent> = fc.record({
  uuid: anyId,
  seq: num,
  revision: num,
  timeMs: fc.oneof(num, fc.constantFrom(1_764_900_000_123, -1, 0.5, -1500)),
  stream: fc.oneof(fc.constantFrom(0, 1, 2), fc.integer({ min: -5, max: 2 ** 32 })),
  offset: fc.oneof(num, fc.constant(-1)),
  originalSize: fc.oneof(fc.nat({ max: 1 << 20 }), fc.constantFrom(2 ** 32 - 1, 2 ** 32)),
  zstdData: fc.uint8Array({ maxLength: 300 }),
});

function referenceEvent(e: HotOutputEvent): Uint8Array {
  return toBinary(
    CommandEventSchema,
    create(CommandEventSchema, {
      issueUuid: e.uuid,
      eventSeq: BigInt(e.seq),
      commandRevision: BigInt(e.revision),
      time: timestampFromMs(e.timeMs),
      event: {
        case: "output",
        value: create(OutputChunkSchema, { stream: e.stream, streamOffset: BigInt(e.offset), originalSize: e.originalSize, zstdData: e.zstdData }),
      },
    }),
  );
}

const handled = (e: HotOutputEvent): boolean =>
  /^[\x00-\x7f]*$/.test(e.uuid) &&
  [e.seq, e.revision, e.timeMs, e.offset, e.originalSize, e.stream].every((n) => Number.isSafeInteger(n) && n >= 0) &&
  e.stream <= 2 ** 31 - 1 &&
  e.originalSize <= 2 ** 32 - 1;

function envelopeOf(sessionId: string, generation: bigint, ev: Uint8Array): Uint8Array {
  return toBinary(
    AgentEnvelopeSchema,
    create(AgentEnvelopeSchema, { sessionId, sessionGeneration: generation, payload: { case: "commandEvent", value: fromBinary(CommandEventSchema, ev) } }),
  );
}

describe("hot codec: CommandEvent with output, as the agent pins it (R-O2)", () => {
  it("R-O2: writes the bytes protobuf-es writes, for every value it takes, and takes every ASCII id and non-negative safe integer", () => {
    fc.assert(
      fc.property(outputEvent, (e) => {
        const hot = encodeOutputEvent(e);
        if (handled(e)) {
          expect(hot).not.toBeNull();
          expect([...hot!]).toEqual([...referenceEvent(e)]);
        } else expect(hot).toBeNull();
      }),
      { numRuns: runs(3000) },
    );
  });

  it("R-T1: an envelope of such an event decodes to what fromBinary gives, keys in the same order", () => {
    fc.assert(
      fc.property(outputEvent.filter(handled), asciiId, num, (e, sid, gen) => {
        const b = envelopeOf(sid, BigInt(gen), referenceEvent(e));
        const hot = decodeHotEnvelope(b);
        expect(hot).not.toBeNull();
        expect(canon(hot)).toEqual(reference(b));
      }),
      { numRuns: runs(2000) },
    );
  });
});

describe("hot codec: EventAck", () => {
  it("R-O3: an ack envelope is written as protobuf-es writes it and read back as fromBinary reads it", () => {
    fc.assert(
      fc.property(
        fc.option(fc.record({ sessionId: anyId, generation: fc.oneof(num, fc.constant(-1)) })),
        anyId,
        fc.bigInt({ min: -1n, max: 2n ** 64n - 1n }),
        (fence, uuid, through) => {
          const hot = encodeEventAckEnvelope(fence, uuid, through);
          const ref = () =>
            toBinary(
              AgentEnvelopeSchema,
              create(AgentEnvelopeSchema, {
                sessionId: fence?.sessionId ?? "",
                sessionGeneration: BigInt(fence?.generation ?? 0),
                payload: { case: "eventAck", value: create(EventAckSchema, { issueUuid: uuid, throughEventSeq: through }) },
              }),
            );
          const ok = /^[\x00-\x7f]*$/.test(uuid + (fence?.sessionId ?? "")) && (fence?.generation ?? 0) >= 0 && through >= 0n && through <= BigInt(MAX);
          if (!ok) {
            expect(hot).toBeNull();
            return;
          }
          expect(hot).not.toBeNull();
          expect([...hot!]).toEqual([...ref()]);
          expect(canon(decodeHotEnvelope(hot!))).toEqual(reference(hot!));
          // And encodeEnvelope, which takes this path, still writes the same bytes.
          expect([...encodeEnvelope(fence, { case: "eventAck", value: create(EventAckSchema, { issueUuid: uuid, throughEventSeq: through }) })]).toEqual([
            ...ref(),
          ]);
        },
      ),
      { numRuns: runs(3000) },
    );
  });
});

describe("hot codec: steps aside for anything else", () => {
  const base = (): Uint8Array =>
    envelopeOf(
      "s-1",
      7n,
      referenceEvent({
        uuid: "0b3e",
        seq: 3,
        revision: 1,
        timeMs: 1_764_900_000_123,
        stream: 1,
        offset: 5,
        originalSize: 4,
        zstdData: new Uint8Array([1, 2, 3]),
      }),
    );

  it("R-T5: other payloads, no payload, unknown fields and repeated fields are left to protobuf-es", () => {
    const other = [
      create(AgentEnvelopeSchema, { payload: { case: "stdinWrite", value: create(StdinWriteSchema, { issueUuid: "u", writeSeq: 1n }) } }),
      create(AgentEnvelopeSchema, {
        payload: {
          case: "commandEvent",
          value: create(CommandEventSchema, { issueUuid: "u", event: { case: "lifecycle", value: create(LifecycleTransitionSchema, { state: 2 }) } }),
        },
      }),
      create(AgentEnvelopeSchema, { sessionId: "s" }),
    ].map((m) => toBinary(AgentEnvelopeSchema, m));
    const b = base();
    const unknownTop = Uint8Array.from([...b, 0xa0, 0x06, 0x01]); // field 100, varint
    const repeatedGen = Uint8Array.from([...b, 0x10, 0x09]); // session_generation again: the last wins in protobuf
    const twoPayloads = Uint8Array.from([...b, 0x42, 0x00]); // an event_ack after the event: the last wins
    for (const x of [...other, unknownTop, repeatedGen, twoPayloads]) {
      expect(decodeHotEnvelope(x)).toBeNull();
      // decodeFrame still gives protobuf-es's answer for them.
      const d = decodeFrame(x);
      const ref = reference(x);
      if (d.ok) expect(canon(d.envelope)).toEqual(ref);
      else expect(x === other[2] || (ref as { threw?: string }).threw !== undefined).toBe(true);
    }
  });

  it("R-T1: 32-bit fields at and past their range read as protobuf-es reads them (int32 wraps negative, uint32 wraps)", () => {
    const varint = (n: number): number[] => {
      const out: number[] = [];
      while (n >= 128) {
        out.push((n % 128) | 0x80);
        n = Math.floor(n / 128);
      }
      out.push(n);
      return out;
    };
    const ld = (field: number, body: number[]): number[] => [(field << 3) | 2, ...varint(body.length), ...body];
    const frame = (ts: number[], chunk: number[]): Uint8Array => Uint8Array.from(ld(7, [...ld(4, ts), ...ld(5, chunk)]));
    let checked = 0;
    for (const n of [2 ** 28 - 1, 2 ** 28, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 35 - 1, 2 ** 35]) {
      for (const x of [frame([0x10, ...varint(n)], []), frame([], [0x08, ...varint(n)]), frame([], [0x18, ...varint(n)])]) {
        const hot = decodeHotEnvelope(x);
        if (hot !== null) {
          checked++;
          expect(canon(hot)).toEqual(reference(x));
        }
      }
    }
    expect(checked).toBeGreaterThan(6);
  });

  it("R-T1, R-T3: a mutated or random frame decodes to exactly what fromBinary gives, or is left to it", () => {
    const b = base();
    const mutated = fc.oneof(
      fc.tuple(fc.nat({ max: b.length - 1 }), fc.integer({ min: 0, max: 255 })).map(([i, x]) => {
        const c = b.slice();
        c[i] = x;
        return c;
      }),
      fc.nat({ max: b.length - 1 }).map((i) => Uint8Array.from([...b.subarray(0, i), ...b.subarray(i + 1)])),
      fc
        .tuple(fc.nat({ max: b.length }), fc.uint8Array({ minLength: 1, maxLength: 4 }))
        .map(([i, x]) => Uint8Array.from([...b.subarray(0, i), ...x, ...b.subarray(i)])),
      fc.nat({ max: b.length }).map((n) => b.subarray(0, n)),
      fc.uint8Array({ maxLength: 80 }),
    );
    let taken = 0;
    fc.assert(
      fc.property(mutated, (x) => {
        const hot = decodeHotEnvelope(x);
        if (hot === null) return;
        taken++;
        expect(canon(hot)).toEqual(reference(x));
        const d = decodeFrame(x);
        expect(d.ok && canon(d.envelope)).toEqual(reference(x));
      }),
      { numRuns: runs(5000) },
    );
    // The generator reaches the hand-written path often enough to mean something.
    expect(taken).toBeGreaterThan(runs(5000) / 20);
  });
});
