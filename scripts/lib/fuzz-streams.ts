// The control fuzzer's stream floods (many FollowOutput / WatchFleet streams
// left open, stalled or abandoned), floods of calls the caller's role
// refuses, and two identities racing with one request_id.
import type { ControlClient } from "../../client/control-client.js";
import { SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { Who } from "./fuzz-fleet.js";
import type { Rng, Tally } from "./fuzz-tally.js";

/** Streams a run holds open at once (the oldest is abandoned past it). */
export const MAX_OPEN_STREAMS = 64;

export interface HostileCtx {
  controlUrl: string;
  tokens: Record<Who, string>;
  tally: Tally;
  rng: Rng;
  clients: Record<Who, ControlClient>;
  web: string;
  other: string;
  streams: StreamPool;
  /** Issue UUIDs to aim at: the web agent's newest commands (refreshed by `aim`) and the racers'. */
  shared: { recent: string[]; refreshed: number };
  /** The admin's accepted SubmitCommands (issue UUIDs) that the audit log must keep. */
  adminAccepted: string[];
  seed: number;
  next: () => number;
}

interface Held {
  ac: AbortController;
  done: Promise<void>;
}

export class StreamPool {
  private held: Held[] = [];

  /** Runs `read` until it ends or the pool closes it; at most MAX_OPEN_STREAMS at once. */
  hold(tally: Tally, read: (signal: AbortSignal) => Promise<void>): void {
    if (this.held.length >= MAX_OPEN_STREAMS) this.held.shift()!.ac.abort();
    const ac = new AbortController();
    const h: Held = { ac, done: Promise.resolve() };
    h.done = read(ac.signal).then(
      () => tally.ok(),
      (err) => tally.error(err),
    );
    void h.done.finally(() => (this.held = this.held.filter((x) => x !== h)));
    this.held.push(h);
  }

  get open(): number {
    return this.held.length;
  }

  async closeAll(): Promise<void> {
    const all = this.held.splice(0);
    for (const h of all) h.ac.abort();
    await Promise.all(all.map((h) => h.done));
  }
}

/** Recent issue UUIDs kept for the floods to aim at. */
export const RECENT_UUIDS = 64;

export function remember(recent: string[], uuid: string): void {
  recent.push(uuid);
  if (recent.length > RECENT_UUIDS) recent.shift();
}

const untilAborted = (signal: AbortSignal) => new Promise<void>((r) => (signal.aborted ? r() : signal.addEventListener("abort", () => r(), { once: true })));

/** Aims the floods at real commands: the web agent's newest as the viewer lists them (at most once a second; not counted as a hostile call). */
async function aim(c: HostileCtx): Promise<string[]> {
  if (Date.now() - c.shared.refreshed >= 1000) {
    c.shared.refreshed = Date.now();
    const r = await c.clients.viewer.listCommands({ clientId: c.web, pageSize: RECENT_UUIDS }, c.tally.opts()).catch(() => undefined);
    if (r) c.shared.recent = r.commands.map((x) => x.issueUuid);
  }
  return c.shared.recent;
}

/** Opens 4..16 streams: followed to the end and left open, stalled after their first message, or abandoned within 300 ms. */
export async function streamFlood(c: HostileCtx): Promise<void> {
  const recent = await aim(c);
  const n = c.rng.int(4, 16);
  if (!c.tally.take("stream flood", n)) return;
  for (let i = 0; i < n; i++) {
    const who: Who = c.rng.pick(["viewer", "operator"] as const);
    const mode = c.rng.pick(["left open", "stalled", "abandoned"] as const);
    const watch = c.rng.chance(0.4);
    const uuid = recent.length > 0 && c.rng.chance(0.8) ? c.rng.pick(recent) : `no-such-${c.next()}`;
    const abandonMs = c.rng.int(0, 300);
    const watched = c.rng.chance(0.5) ? ["*"] : [c.web];
    c.streams.hold(c.tally, async (signal) => {
      const ac = new AbortController();
      const both = AbortSignal.any([signal, ac.signal]);
      const t = mode === "abandoned" ? setTimeout(() => ac.abort(), abandonMs) : undefined;
      try {
        const it = watch
          ? c.clients[who].watchFleet({ commandClients: watched }, { signal: both })
          : c.clients[who].followOutput({ issueUuid: uuid, follow: true, fromEventSeq: 1n }, { signal: both });
        for await (const _ of it) {
          if (mode === "stalled") return await untilAborted(both);
        }
        if (mode === "left open") await untilAborted(both);
      } finally {
        clearTimeout(t);
      }
    });
  }
}

/** 10..50 concurrent calls each refused by the caller's role or selector (audited refusals). */
export async function refusedFlood(c: HostileCtx): Promise<void> {
  const recent = await aim(c);
  const n = c.rng.int(10, 50);
  if (!c.tally.take("refused flood", n)) return;
  const calls: Array<() => Promise<unknown>> = [];
  for (let i = 0; i < n; i++) {
    const uuid = recent.length > 0 ? c.rng.pick(recent) : `no-such-${c.next()}`;
    const argv = { case: "argv" as const, value: { argv: ["echo", "refused"] } };
    calls.push(
      c.rng.pick([
        () => c.clients.viewer.submitCommand({ clientId: c.web, program: argv }, c.tally.opts()),
        () => c.clients.viewer.signalCommand({ issueUuid: uuid, signal: SignalKind.CANCEL }, c.tally.opts()),
        () => c.clients.viewer.setClientLabels({ clientId: c.web, set: { role: "db" } }, c.tally.opts()),
        () => c.clients.operator.submitCommand({ clientId: c.other, program: argv }, c.tally.opts()),
        () => c.clients.operator.listAudit({}, c.tally.opts()),
      ]),
    );
  }
  await Promise.all(calls.map((f) => c.tally.call(f)));
}

/** Two identities submit at once with the same request_id, each its own issue UUID: each must get its own command. */
export async function requestIdRace(c: HostileCtx): Promise<void> {
  if (!c.tally.take("request-id race", 2)) return;
  const pair = c.rng.pick([
    ["operator", "operator2"],
    ["operator", "admin"],
    ["operator2", "admin"],
  ] as const);
  const rid = `race-${c.seed}-${c.next()}`;
  await Promise.all(
    pair.map(async (who) => {
      const own = `${rid}-${who}`;
      const r = (await c.tally.call(() =>
        c.clients[who].submitCommand({ clientId: c.web, issueUuid: own, requestId: rid, program: { case: "argv", value: { argv: ["true"] } } }, c.tally.opts()),
      )) as { command?: { issueUuid: string } } | undefined;
      if (!r) return;
      const got = r.command?.issueUuid ?? "";
      if (got !== own) c.tally.anomaly("request_id crossed", `${who} submitted ${own} with request_id ${rid} and was answered with command ${got}`);
      else {
        remember(c.shared.recent, own);
        if (who === "admin") c.adminAccepted.push(own);
      }
    }),
  );
}
