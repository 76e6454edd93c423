// Protocol version negotiation (R-T4). Versions are ordered (major, minor);
// each peer states an inclusive range; the highest version in both ranges
// wins. Disjoint ranges (in particular different majors) are
// CODE_INCOMPATIBLE_VERSION.

import { create } from "@bufbuild/protobuf";
import { ProtocolRangeSchema, ProtocolVersionSchema, type ProtocolRange } from "../../protos/gen/rvbox/v1/common_pb.js";
import { Code, fail, ok, type Result } from "../errors.js";

export interface Version {
  major: number;
  minor: number;
}

export interface VersionRange {
  min: Version;
  max: Version;
}

/**
 * The range this build speaks. 1.0 is the spec's first version; 1.1 adds
 * terminals (`rvbox run -t`): ExecutionSpec.terminal and StdinWrite.resize,
 * which a peer sends only on a session that negotiated 1.1 (TERMINAL_VERSION).
 */
export const SUPPORTED_PROTOCOL: VersionRange = { min: { major: 1, minor: 0 }, max: { major: 1, minor: 1 } };

/** The spec's first version, the range an older peer states. */
export const PROTOCOL_1_0: VersionRange = { min: { major: 1, minor: 0 }, max: { major: 1, minor: 0 } };

/** The first version with terminals: ExecutionSpec.terminal and StdinWrite.resize (R-T4/R-T5). */
export const TERMINAL_VERSION: Version = { major: 1, minor: 1 };

/** Whether a session that negotiated `v` may carry a terminal command and its resizes. */
export function speaksTerminal(v: Version | null | undefined): boolean {
  return v !== null && v !== undefined && v.major === TERMINAL_VERSION.major && v.minor >= TERMINAL_VERSION.minor;
}

/** "1.0" */
export function versionText(v: Version): string {
  return `${v.major}.${v.minor}`;
}

export function compareVersion(a: Version, b: Version): number {
  return a.major !== b.major ? a.major - b.major : a.minor - b.minor;
}

export function rangeFromWire(r: ProtocolRange | undefined): Result<VersionRange> {
  if (!r || !r.min || !r.max) return fail(Code.INCOMPATIBLE_VERSION, "protocol range missing");
  const range = { min: { major: r.min.major, minor: r.min.minor }, max: { major: r.max.major, minor: r.max.minor } };
  if (compareVersion(range.min, range.max) > 0) return fail(Code.INCOMPATIBLE_VERSION, "protocol range min > max");
  return ok(range);
}

export function rangeToWire(r: VersionRange): ProtocolRange {
  return create(ProtocolRangeSchema, {
    min: create(ProtocolVersionSchema, r.min),
    max: create(ProtocolVersionSchema, r.max),
  });
}

export function negotiate(ours: VersionRange, theirs: VersionRange): Result<Version> {
  const hi = compareVersion(ours.max, theirs.max) <= 0 ? ours.max : theirs.max;
  const lo = compareVersion(ours.min, theirs.min) >= 0 ? ours.min : theirs.min;
  if (compareVersion(hi, lo) < 0) {
    return fail(Code.INCOMPATIBLE_VERSION, `no shared protocol version: ours ${fmt(ours)}, theirs ${fmt(theirs)}`);
  }
  return ok({ major: hi.major, minor: hi.minor });
}

export function versionInRange(v: Version, r: VersionRange): boolean {
  return compareVersion(v, r.min) >= 0 && compareVersion(v, r.max) <= 0;
}

function fmt(r: VersionRange): string {
  return `${r.min.major}.${r.min.minor}-${r.max.major}.${r.max.minor}`;
}
