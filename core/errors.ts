// Two kinds of failure, kept apart (TIGER_STYLE):
//  - expected failures (a peer's bad frame, a full queue) are values: CoreError
//    with a wire error code, returned or sent, never thrown;
//  - broken invariants are programming errors: assert() throws
//    InvariantViolation, which crashes the test or the simulator run.

import { Code } from "../protos/gen/rvbox/v1/common_pb.js";

export { Code };

export interface CoreError {
  readonly code: Code;
  readonly message: string;
  readonly issueUuid?: string;
}

export function coreError(code: Code, message: string, issueUuid?: string): CoreError {
  return issueUuid === undefined ? { code, message } : { code, message, issueUuid };
}

export type Result<T> = { ok: true; value: T } | { ok: false; error: CoreError };

export function ok<T>(value: T): Result<T> {
  return { ok: true, value };
}

export function fail<T = never>(code: Code, message: string, issueUuid?: string): Result<T> {
  return { ok: false, error: coreError(code, message, issueUuid) };
}

export class InvariantViolation extends Error {
  override name = "InvariantViolation";
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new InvariantViolation(message);
}

export function unreachable(x: never, what: string): never {
  throw new InvariantViolation(`unreachable ${what}: ${JSON.stringify(x)}`);
}

/** Codes a rejection can carry, by how the server must treat them. */
export function isTransientRejection(code: Code): boolean {
  return code === Code.CAPACITY || code === Code.STORE_INCIDENT;
}

export function isPermanentRejection(code: Code): boolean {
  return code === Code.VALIDATION || code === Code.UNSUPPORTED_PLATFORM || code === Code.CONFLICT;
}

export function codeName(code: Code): string {
  return Code[code] ?? `CODE_${code}`;
}
