// Reconcile classification (R-D9, R-D10, R-D11, R-D12): given what the server
// asked about and the agent's complete snapshot, decide per command. Pure and
// total: every input yields exactly one verdict per UUID involved.
//
//   snapshot entry a, server record s:
//   a.tombstoned, s non-terminal          -> already_executed (s interrupted, incident)
//   a.tombstoned, otherwise               -> none (a tombstone always suppresses replay)
//   no s                                  -> terminate_local (+ incident)
//   s.hash != a.hash                      -> terminate_local (+ incident)
//   s terminal, a terminal                -> discard (+ incident if the server, not the agent, ended it)
//   s terminal, a active                  -> terminate_local (+ incident)
//   s non-terminal, a has fewer events than s stored
//                                         -> diverged: terminate_local, s interrupted (+ incident);
//                                            events came from another copy of this instance
//   s non-terminal, a further along       -> adopt (server moves to accepted/running)
//   s non-terminal, otherwise             -> keep
//   requested s absent from the snapshot:
//   s queued|dispatched                   -> requeue
//   s accepted|running                    -> interrupt (+ incident: healthy storage never forgets)

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal, progressRank } from "../dispatch/lifecycle.js";

export interface ServerView {
  uuid: string;
  state: L;
  terminalSource: "agent" | "server" | "";
  hash: string;
  /** Events of this command the server stored durably. */
  storedThrough: number;
}

export interface AgentView {
  uuid: string;
  lifecycle: L;
  tombstoned: boolean;
  hash: string;
  /** Last event_seq the agent assigned. */
  lastEventSeq: number;
}

export type Action = "requeue" | "interrupt" | "already_executed" | "diverged" | "terminate_local" | "discard" | "adopt" | "keep" | "none";

export interface Verdict {
  uuid: string;
  action: Action;
  /** For adopt: the state the server moves to. */
  adopt?: L;
  /** Set when the verdict must also open a recovery incident. */
  incident?: string;
}

export interface Classification {
  verdicts: Verdict[];
  terminate: string[];
  discard: string[];
}

export function classify(requested: readonly ServerView[], lookup: (uuid: string) => ServerView | undefined, snapshot: readonly AgentView[]): Classification {
  const verdicts: Verdict[] = [];
  const seen = new Set<string>();
  for (const a of snapshot) {
    if (seen.has(a.uuid)) continue; // a duplicate entry adds nothing
    seen.add(a.uuid);
    verdicts.push(judge(a, lookup(a.uuid)));
  }
  for (const s of requested) {
    if (seen.has(s.uuid)) continue;
    seen.add(s.uuid);
    if (s.state === L.QUEUED || s.state === L.DISPATCHED) verdicts.push({ uuid: s.uuid, action: "requeue" });
    else if (s.state === L.ACCEPTED || s.state === L.RUNNING)
      verdicts.push({ uuid: s.uuid, action: "interrupt", incident: "agent no longer has a command it accepted (invariant failure)" });
    else verdicts.push({ uuid: s.uuid, action: "keep" });
  }
  return {
    verdicts,
    terminate: verdicts.filter((v) => v.action === "terminate_local" || v.action === "diverged").map((v) => v.uuid),
    discard: verdicts.filter((v) => v.action === "discard").map((v) => v.uuid),
  };
}

function judge(a: AgentView, s: ServerView | undefined): Verdict {
  const uuid = a.uuid;
  if (a.tombstoned) {
    if (s && !isTerminal(s.state) && s.hash === a.hash)
      return { uuid, action: "already_executed", incident: "agent tombstone says this command already ran; server state was stale" };
    return { uuid, action: "none" };
  }
  if (!s) return { uuid, action: "terminate_local", incident: "agent holds a command the server does not know" };
  if (s.hash !== a.hash) return { uuid, action: "terminate_local", incident: "agent holds a different request under this issue_uuid" };
  if (isTerminal(s.state)) {
    if (isTerminal(a.lifecycle)) {
      return s.terminalSource === "agent"
        ? { uuid, action: "discard" }
        : { uuid, action: "discard", incident: "agent finished a command the server had already ended itself" };
    }
    return { uuid, action: "terminate_local", incident: "agent still runs a command that is terminal at the server" };
  }
  if (a.lastEventSeq < s.storedThrough)
    return {
      uuid,
      action: "diverged",
      incident: `agent assigned ${a.lastEventSeq} events but the server stored ${s.storedThrough}: another copy of this instance ran it`,
    };
  const target = isTerminal(a.lifecycle) ? L.ACCEPTED : a.lifecycle;
  if (progressRank(target) > progressRank(s.state) && (target === L.ACCEPTED || target === L.RUNNING)) return { uuid, action: "adopt", adopt: target };
  return { uuid, action: "keep" };
}
