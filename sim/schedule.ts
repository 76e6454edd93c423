// The plan of one run: every operator action and every fault, with its time,
// drawn up front from the seed and the swarm. The world executes the plan;
// the shrinker deletes entries from it. Entries refer to commands by submit
// index, so deleting a submit quietly voids the actions on it.

import { SignalKind } from "../protos/gen/rvbox/v1/common_pb.js";
import { drawBehaviour, type Behaviour } from "./behaviour.js";
import { Rng } from "./rng.js";
import { FAULT_KINDS, type FaultKind, type Swarm } from "./swarm.js";

export type Prog = "argv" | "shell" | "script" | "bad_argv" | "bad_shell";

export type Action =
  | {
      at: number;
      k: "submit";
      i: number;
      uuid: string;
      client: number;
      prog: Prog;
      b: Behaviour;
      stdinOpen: boolean;
      timeoutMs: number;
      /** Queue expiry relative to submit time (0 = default). */
      expiryMs: number;
      /** Extra script bytes after the behaviour line. */
      pad: number;
      /** Run on a terminal of this size (`run -t`, protocol 1.1); absent for the rest. */
      tty?: { rows: number; cols: number };
    }
  | { at: number; k: "resubmit"; i: number; conflict: boolean }
  /** A job (core/server/jobs.ts) over these clients, in this order; `conc` / `errs` as an operator types them. */
  | { at: number; k: "job"; j: number; jobId: string; clients: number[]; prog: "argv" | "shell"; b: Behaviour; conc: string; errs: string }
  | { at: number; k: "stdin"; i: number; n: number; nl: boolean; s: number; resize?: { rows: number; cols: number } }
  | { at: number; k: "close_stdin"; i: number }
  | { at: number; k: "signal"; i: number; sig: SignalKind }
  | { at: number; k: "authorize"; client: number }
  | { at: number; k: "ack_incidents" }
  | { at: number; k: "repair"; client: number }
  | { at: number; k: "fault"; f: FaultKind; target: number; dur: number; variant: number };

export interface Schedule {
  actions: Action[];
}

export function planSchedule(seed: number, sw: Swarm): Schedule {
  const root = new Rng(seed);
  const r = root.fork("schedule");
  const actions: Action[] = [];
  const T = sw.faultPhaseMs;
  for (let i = 0; i < sw.submits; i++) {
    const cr = root.fork(`cmd/${i}`);
    const at = cr.range(0, Math.floor(T * 0.9));
    let prog: Prog = "argv";
    if (cr.chance(sw.pInvalid)) prog = cr.chance(0.5) ? "bad_argv" : "bad_shell";
    else if (cr.chance(sw.pScript)) prog = "script";
    else if (cr.chance(sw.pShell)) prog = "shell";
    const b = drawBehaviour(cr, sw.mix);
    const stdinOpen = b.echo === true || cr.chance(sw.pStdin);
    actions.push({
      at,
      k: "submit",
      i,
      uuid: cr.uuid(),
      client: cr.int(sw.agents),
      prog,
      b,
      stdinOpen,
      timeoutMs: cr.chance(0.1) ? cr.range(100, 120_000) : 0,
      expiryMs: cr.chance(sw.pShortExpiry) ? cr.range(10, 60_000) : 0,
      pad: prog === "script" ? cr.logUniform(1, 600 * 1024) : 0,
    });
    let t = at;
    if (cr.chance(sw.pDuplicate)) actions.push({ at: at + cr.range(0, 30_000), k: "resubmit", i, conflict: cr.chance(0.3) });
    if (stdinOpen && cr.chance(Math.max(sw.pStdin, b.echo ? 0.8 : 0))) {
      const writes = cr.range(1, 6);
      for (let w = 0; w < writes; w++) {
        t += cr.range(0, 20_000);
        actions.push({ at: t, k: "stdin", i, n: cr.logUniform(1, 70_000), nl: cr.chance(0.5), s: cr.u32() });
      }
      if (cr.chance(0.8)) actions.push({ at: t + cr.range(0, 20_000), k: "close_stdin", i });
    }
    if (cr.chance(sw.pSignal)) {
      const sig = cr.pick([SignalKind.CANCEL, SignalKind.CANCEL, SignalKind.TERMINATE, SignalKind.KILL, SignalKind.INTERRUPT, SignalKind.USER1]);
      actions.push({ at: at + cr.range(0, 60_000), k: "signal", i, sig });
    }
  }
  planJobs(root, sw, actions);
  planTerminals(root, sw, actions);
  for (const f of FAULT_KINDS) {
    const n = sw.faults[f] ?? 0;
    if (n <= 0 || f === "clock_skew") continue;
    const fr = root.fork(`fault/${f}`);
    const count = Math.max(1, Math.round(n * (0.5 + fr.float())));
    for (let j = 0; j < count; j++) {
      const at = fr.range(0, T);
      const target = f === "disk_slow" || f === "disk_full" || f === "ingress_full" ? fr.range(-1, sw.agents - 1) : fr.int(sw.agents);
      const dur =
        f === "partition"
          ? fr.range(1_000, 120_000)
          : f === "disk_slow"
            ? fr.range(1_000, 60_000)
            : f === "clone" || f === "impostor"
              ? fr.range(5_000, 180_000)
              : fr.range(sw.downMinMs, sw.downMaxMs);
      actions.push({ at, k: "fault", f, target, dur, variant: fr.int(16) });
      if (f === "disk_corrupt") actions.push({ at: at + dur + fr.range(1_000, 120_000), k: "repair", client: target });
      if (f === "impostor" && fr.chance(0.5)) actions.push({ at: at + fr.range(100, 60_000), k: "authorize", client: target });
    }
  }
  if (sw.faults.server_crash || sw.faults.clone || sw.faults.impostor || sw.faults.stale_inject) {
    const n = r.range(1, 4);
    for (let j = 0; j < n; j++) actions.push({ at: r.range(0, T), k: "ack_incidents" });
  }
  actions.sort((a, b) => a.at - b.at);
  return { actions };
}

/**
 * Terminals (`run -t`, protocol 1.1), from their own stream (fork
 * "terminals"): some argv or shell submits ask for one (stdin open, as the
 * CLI has it), and get keystrokes and resizes; on a 1.0 agent they must end
 * without running. Seeds with pTerminal 0 are planned exactly as before.
 */
function planTerminals(root: Rng, sw: Swarm, actions: Action[]): void {
  if (sw.pTerminal <= 0) return;
  const tr = root.fork("terminals");
  const size = () => ({ rows: tr.range(1, 120), cols: tr.range(1, 300) });
  const submits = actions.filter((a): a is Extract<Action, { k: "submit" }> => a.k === "submit" && (a.prog === "argv" || a.prog === "shell"));
  for (const a of submits) {
    if (!tr.chance(sw.pTerminal)) continue;
    a.tty = size();
    a.stdinOpen = true;
    let t = a.at;
    for (let w = tr.range(1, 4); w > 0; w--) {
      t += tr.range(0, 20_000);
      const keys = tr.chance(0.5);
      actions.push({ at: t, k: "stdin", i: a.i, n: keys ? tr.range(1, 64) : 0, nl: false, s: tr.u32(), ...(keys && tr.chance(0.5) ? {} : { resize: size() }) });
    }
  }
}

/**
 * Jobs, from their own stream (fork "jobs"), so a seed's other actions are
 * drawn exactly as before; about half the seeds submit one to three jobs.
 * Their children fail on a seeded subset of the clients.
 */
function planJobs(root: Rng, sw: Swarm, actions: Action[]): void {
  const jr = root.fork("jobs");
  if (!jr.chance(0.5)) return;
  const n = jr.range(1, 3);
  for (let j = 0; j < n; j++) {
    const order = Array.from({ length: sw.agents }, (_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const k = jr.int(i + 1);
      [order[i], order[k]] = [order[k]!, order[i]!];
    }
    const clients = order.slice(0, jr.range(1, sw.agents));
    const b = drawBehaviour(jr, sw.mix);
    const codeOn: Record<string, number> = {};
    for (const c of clients) if (jr.chance(0.3)) codeOn[`agent-${c}`] = jr.range(1, 255);
    if (Object.keys(codeOn).length > 0) b.codeOn = codeOn;
    actions.push({
      at: jr.range(0, Math.floor(sw.faultPhaseMs * 0.9)),
      k: "job",
      j,
      jobId: `job-${jr.uuid().slice(0, 8)}-${j}`,
      clients,
      prog: jr.chance(0.3) ? "shell" : "argv",
      b,
      conc: jr.pick(["", "1", "2", "50%", "34%"]),
      errs: jr.pick(["", "0", "1", "2", "25%"]),
    });
  }
}

export function describeAction(a: Action): string {
  switch (a.k) {
    case "job":
      return `job ${a.jobId} -> ${a.clients.map((c) => `agent-${c}`).join(",")} conc=${a.conc || "all"} errs=${a.errs || "none"} code=${a.b.code}${a.b.codeOn ? ` codeOn=${JSON.stringify(a.b.codeOn)}` : ""}${a.b.hang ? " hang" : ""}`;
    case "submit":
      return `submit #${a.i} ${a.uuid.slice(0, 8)} -> agent-${a.client} ${a.prog} out=${a.b.out} err=${a.b.err} code=${a.b.code}${a.b.sig ? ` sig=${a.b.sig}` : ""}${a.b.hang ? " hang" : ""}${a.b.echo ? " echo" : ""}${a.b.ignTerm ? " ignTERM" : ""}${a.b.inc ? " incomplete" : ""}${a.b.nostart ? " nostart" : ""}${a.stdinOpen ? " stdin" : ""}${a.tty ? ` tty=${a.tty.cols}x${a.tty.rows}` : ""}${a.timeoutMs ? ` timeout=${a.timeoutMs}` : ""}${a.expiryMs ? ` expiry=${a.expiryMs}` : ""}`;
    case "resubmit":
      return `resubmit #${a.i}${a.conflict ? " (conflicting)" : ""}`;
    case "stdin":
      return `stdin #${a.i} ${a.n} bytes${a.nl ? " +newline" : ""}`;
    case "close_stdin":
      return `close_stdin #${a.i}`;
    case "signal":
      return `signal #${a.i} ${SignalKind[a.sig]}`;
    case "authorize":
      return `authorize pending claim of agent-${a.client}`;
    case "ack_incidents":
      return "acknowledge open incidents";
    case "repair":
      return `repair store of agent-${a.client}`;
    case "fault":
      return `FAULT ${a.f} target=${a.target < 0 ? "server" : `agent-${a.target}`} dur=${a.dur} v=${a.variant}`;
  }
}
