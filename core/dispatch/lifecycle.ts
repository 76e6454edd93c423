// Command lifecycle (architecture.md) as a transition table, h11-style:
//
//   queued -> dispatched -> accepted -> running -> succeeded | failed | cancelled | interrupted
//      ^          |            |                                  (running, as above)
//      +----------+ (reconcile: absent, or transient rejection)
//   queued|dispatched -> rejected | expired | cancelled | interrupted
//   accepted -> rejected (script/preparation) | cancelled | expired | interrupted
//
// A terminal state never changes (asserted). Transitions not in the table are
// refused: from the agent they are a CODE_SEQUENCE_VIOLATION, inside the core
// they are an invariant failure.

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";

export { L as Lifecycle };

export const TERMINAL: ReadonlySet<L> = new Set<L>([L.SUCCEEDED, L.FAILED, L.REJECTED, L.CANCELLED, L.INTERRUPTED, L.EXPIRED]);

export function isTerminal(s: L): boolean {
  return TERMINAL.has(s);
}

const T: ReadonlyMap<L, ReadonlySet<L>> = new Map<L, ReadonlySet<L>>([
  [L.QUEUED, new Set<L>([L.DISPATCHED, L.ACCEPTED, L.RUNNING, L.REJECTED, L.EXPIRED, L.CANCELLED, L.INTERRUPTED])],
  [L.DISPATCHED, new Set<L>([L.QUEUED, L.ACCEPTED, L.RUNNING, L.REJECTED, L.EXPIRED, L.CANCELLED, L.INTERRUPTED])],
  [L.ACCEPTED, new Set<L>([L.RUNNING, L.REJECTED, L.EXPIRED, L.CANCELLED, L.INTERRUPTED])],
  [L.RUNNING, new Set<L>([L.SUCCEEDED, L.FAILED, L.CANCELLED, L.INTERRUPTED])],
]);

/** May a command go from `from` to `to`? Staying put is not a transition. */
export function canTransition(from: L, to: L): boolean {
  return T.get(from)?.has(to) ?? false;
}

/** Where a state stands in the forward order, for "did the agent get further" comparisons. */
export function progressRank(s: L): number {
  switch (s) {
    case L.QUEUED:
      return 0;
    case L.DISPATCHED:
      return 1;
    case L.ACCEPTED:
      return 2;
    case L.RUNNING:
      return 3;
    default:
      return isTerminal(s) ? 4 : -1;
  }
}

export function lifecycleName(s: L): string {
  return (L[s] ?? String(s)).toLowerCase();
}
