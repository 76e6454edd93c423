// Exact-behaviour tests of dispatch/lifecycle.ts: the lifecycle table: every branch, at its edges
// (targets taken from the mutation report, docs/MUTATION.md).
import { describe, expect, it } from "vitest";
import { canTransition, isTerminal, lifecycleName, progressRank, TERMINAL } from "../../../core/dispatch/lifecycle.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";

const ALL = [L.UNSPECIFIED, L.QUEUED, L.DISPATCHED, L.ACCEPTED, L.RUNNING, L.SUCCEEDED, L.FAILED, L.REJECTED, L.CANCELLED, L.INTERRUPTED, L.EXPIRED];
const TERMINALS = [L.SUCCEEDED, L.FAILED, L.REJECTED, L.CANCELLED, L.INTERRUPTED, L.EXPIRED];

describe("command lifecycle table", () => {
  it("R-D1 R-D4 R-D9: exactly the documented transitions are allowed; nothing leaves a terminal state", () => {
    const allowed: Record<number, L[]> = {
      [L.QUEUED]: [L.DISPATCHED, L.ACCEPTED, L.RUNNING, L.REJECTED, L.EXPIRED, L.CANCELLED, L.INTERRUPTED],
      [L.DISPATCHED]: [L.QUEUED, L.ACCEPTED, L.RUNNING, L.REJECTED, L.EXPIRED, L.CANCELLED, L.INTERRUPTED],
      [L.ACCEPTED]: [L.RUNNING, L.REJECTED, L.EXPIRED, L.CANCELLED, L.INTERRUPTED],
      [L.RUNNING]: [L.SUCCEEDED, L.FAILED, L.CANCELLED, L.INTERRUPTED],
    };
    for (const from of ALL) {
      for (const to of ALL) {
        expect(canTransition(from, to), `${L[from]} -> ${L[to]}`).toBe((allowed[from] ?? []).includes(to));
      }
    }
    expect(canTransition(99 as L, L.QUEUED)).toBe(false);
  });

  it("R-D9: terminal states are exactly succeeded, failed, rejected, cancelled, interrupted, expired", () => {
    expect([...TERMINAL].sort((a, b) => a - b)).toEqual(TERMINALS);
    for (const s of ALL) expect(isTerminal(s), L[s]).toBe(TERMINALS.includes(s));
  });

  it("R-D11: progress rank orders queued < dispatched < accepted < running < any terminal; unknown is -1", () => {
    expect(ALL.map(progressRank)).toEqual([-1, 0, 1, 2, 3, 4, 4, 4, 4, 4, 4]);
    expect(progressRank(99 as L)).toBe(-1);
  });

  it("lifecycleName is the lowercase enum name, or the number when unknown", () => {
    expect(lifecycleName(L.RUNNING)).toBe("running");
    expect(lifecycleName(L.INTERRUPTED)).toBe("interrupted");
    expect(lifecycleName(L.UNSPECIFIED)).toBe("unspecified");
    expect(lifecycleName(99 as L)).toBe("99");
  });
});
