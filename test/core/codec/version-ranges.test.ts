// Exact-behaviour tests of codec/version.ts: the
// boundaries and branches the end-to-end tests only touch in aggregate
// (targets taken from the mutation report, docs/MUTATION.md).
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ProtocolRangeSchema, ProtocolVersionSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { compareVersion, negotiate, rangeFromWire, rangeToWire, versionInRange, type VersionRange } from "../../../core/codec/version.js";
import { Code } from "../../../core/errors.js";

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
