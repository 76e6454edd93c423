import { create } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ClientHelloSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { negotiate, PROTOCOL_1_0, SUPPORTED_PROTOCOL, speaksTerminal, type VersionRange } from "../../../core/codec/version.js";
import { Code } from "../../../core/errors.js";

encodeEnvelope(null, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "host-a", clientInstanceId: "i1" }) });

describe("version negotiation", () => {
  const r = (a: number, b: number, c: number, d: number): VersionRange => ({ min: { major: a, minor: b }, max: { major: c, minor: d } });

  it("R-T4: the highest shared minor is chosen", () => {
    const v = negotiate(r(1, 0, 1, 5), r(1, 2, 1, 3));
    expect(v).toEqual({ ok: true, value: { major: 1, minor: 3 } });
    expect(negotiate(SUPPORTED_PROTOCOL, SUPPORTED_PROTOCOL)).toEqual({ ok: true, value: { major: 1, minor: 1 } });
    // A 1.0 peer (either side) and this build meet at 1.0, where no terminal is sent.
    expect(negotiate(SUPPORTED_PROTOCOL, PROTOCOL_1_0)).toEqual({ ok: true, value: { major: 1, minor: 0 } });
    expect(negotiate(PROTOCOL_1_0, SUPPORTED_PROTOCOL)).toEqual({ ok: true, value: { major: 1, minor: 0 } });
    expect(speaksTerminal({ major: 1, minor: 0 })).toBe(false);
    expect(speaksTerminal({ major: 1, minor: 1 })).toBe(true);
    expect(speaksTerminal({ major: 2, minor: 1 })).toBe(false);
    expect(speaksTerminal(null)).toBe(false);
  });

  it("R-T4: incompatible majors are rejected", () => {
    const v = negotiate(r(1, 0, 1, 9), r(2, 0, 2, 1));
    expect(!v.ok && v.error.code).toBe(Code.INCOMPATIBLE_VERSION);
  });

  it("R-T4: the result is always inside both ranges, or a rejection when they are disjoint", () => {
    const ver = fc.record({ major: fc.integer({ min: 0, max: 3 }), minor: fc.integer({ min: 0, max: 5 }) });
    const range = fc.tuple(ver, ver).map(([a, b]) => (a.major * 10 + a.minor <= b.major * 10 + b.minor ? { min: a, max: b } : { min: b, max: a }));
    const key = (v: { major: number; minor: number }): number => v.major * 10 + v.minor;
    fc.assert(
      fc.property(range, range, (a, b) => {
        const v = negotiate(a, b);
        const lo = Math.max(key(a.min), key(b.min));
        const hi = Math.min(key(a.max), key(b.max));
        if (lo > hi) expect(v.ok).toBe(false);
        else expect(v.ok && key(v.value)).toBe(hi);
      }),
    );
  });
});
