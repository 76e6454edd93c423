/**
 * Streaming a command's output to the CLI's stdout/stderr (`logs`,
 * `run --follow`). Output bytes go to the matching stream untouched; every
 * truncation and incomplete marker is printed on stderr as its own line, so a
 * shortened stream is never silent. A dropped connection is resumed from the
 * next event sequence (FollowOutput from_event_seq), so nothing is printed
 * twice and nothing is skipped.
 */
import { CommandLifecycle } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { Command } from "../../protos/gen/rvbox/v1/control_pb.js";
import { describeError, isTransient, type ControlClient } from "./control-client.js";
import { eventText } from "./markers.js";
import { StreamLedger } from "./ledger.js";
import { outputItem, type OutputItem, type StreamName } from "./model.js";

export interface FollowIO {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

export interface FollowOptions {
  uuid: string;
  follow: boolean;
  from?: number;
  /** Only this stream's bytes (markers that concern only the other stream are left out). */
  stream?: StreamName;
  /** Also print lifecycle, stdin and signal events on stderr. */
  events?: boolean;
  signal?: AbortSignal;
  /** Give up after the server has been unreachable this long (ms). */
  reconnectForMs?: number;
  server?: string;
  /** Called for every item (tests, `--json`). */
  onItem?: (it: OutputItem) => void;
  /**
   * While the command has not started, say on stderr why it waits (the
   * server's Command.waiting_reason), once and again whenever it changes;
   * polled every this many ms (0: never). Default 2 s when following.
   */
  waitingPollMs?: number;
}

const NOT_STARTED = new Set<number>([CommandLifecycle.QUEUED, CommandLifecycle.DISPATCHED, CommandLifecycle.ACCEPTED]);

/** One GetCommand per poll, only until the command starts: cheap, and silent when nothing holds it back. */
async function noteWaiting(client: ControlClient, io: FollowIO, uuid: string, everyMs: number, signal: AbortSignal): Promise<void> {
  let last = "";
  while (!signal.aborted) {
    try {
      const cmd = (await client.getCommand({ issueUuid: uuid }, { signal })).command;
      if (!cmd || !NOT_STARTED.has(cmd.state)) return;
      const why = cmd.waitingReason;
      if (why !== last && why !== "") await write(io.stderr, `rvbox: waiting: ${why}\n`);
      last = why;
    } catch (e) {
      if (e instanceof OutputClosedError || signal.aborted) return;
      // The output stream reports an unreachable server; this note is best effort.
    }
    await new Promise<void>((r) => {
      const t = setTimeout(r, everyMs);
      signal.addEventListener("abort", () => (clearTimeout(t), r()), { once: true });
    });
  }
}

export interface FollowResult {
  finished: Command | null;
  /** Output bytes written, per stream. */
  bytes: { stdout: number; stderr: number };
  markers: number;
  aborted: boolean;
}

/**
 * The reader of the CLI's stdout (or stderr) went away: `rvbox logs ID | head`.
 * Not a server problem, so never retried; the CLI ends at once, quietly, with
 * the exit status of a process killed by SIGPIPE (as `kubectl logs | head`).
 */
export class OutputClosedError extends Error {
  constructor(cause: unknown) {
    super("the output was closed by its reader", { cause });
  }
}

const closedStreams = new WeakMap<NodeJS.WritableStream, { error: unknown; waiters: Set<(e: unknown) => void> }>();

/** One 'error' listener per stream, whatever the number of writes or reconnects. */
function watch(s: NodeJS.WritableStream) {
  let w = closedStreams.get(s);
  if (!w) {
    const entry = { error: null as unknown, waiters: new Set<(e: unknown) => void>() };
    s.on("error", (e: unknown) => {
      entry.error ??= e;
      for (const f of entry.waiters) f(e);
      entry.waiters.clear();
    });
    closedStreams.set(s, entry);
    w = entry;
  }
  return w;
}

/** True for the errors a write gets once its pipe has no reader. */
export function isClosedOutput(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return code === "EPIPE" || code === "ERR_STREAM_DESTROYED" || code === "ERR_STREAM_WRITE_AFTER_END";
}

async function write(s: NodeJS.WritableStream, data: Uint8Array | string): Promise<void> {
  const w = watch(s);
  if (w.error !== null) throw new OutputClosedError(w.error);
  let failed: unknown = null;
  const ok = s.write(data, (e?: Error | null) => {
    if (e) failed = e;
  });
  if (!ok) {
    await new Promise<void>((resolve, reject) => {
      const onError = (e: unknown) => {
        s.removeListener("drain", onDrain);
        reject(new OutputClosedError(e));
      };
      const onDrain = () => {
        w.waiters.delete(onError);
        resolve();
      };
      w.waiters.add(onError);
      s.once("drain", onDrain);
    });
  }
  if (failed !== null || w.error !== null) throw new OutputClosedError(failed ?? w.error);
}

function concerns(it: OutputItem, stream: StreamName | undefined): boolean {
  if (!stream) return true;
  if (it.kind === "output") return it.stream === stream;
  if (it.kind === "truncation") return it.ranges.length === 0 || it.ranges.some((r) => r.stream === stream);
  if (it.kind === "incomplete") return it.streams.length === 0 || it.streams.includes(stream);
  if (it.kind === "gap") return it.stream === stream;
  return true;
}

/** The highest event sequence an item accounts for (a retention marker covers a range). */
function lastSeqOf(it: OutputItem): number {
  return it.kind === "truncation" && it.events ? Math.max(it.seq, it.events.last) : it.seq;
}

export async function followOutput(client: ControlClient, io: FollowIO, o: FollowOptions): Promise<FollowResult> {
  const res: FollowResult = { finished: null, bytes: { stdout: 0, stderr: 0 }, markers: 0, aborted: false };
  let next = Math.max(1, o.from ?? 1);
  const ledger = new StreamLedger(next === 1);
  let outageSince: number | null = null;
  let delay = 200;
  let warned = false;
  const budget = o.reconnectForMs ?? 5 * 60_000;
  const waitPoll = o.waitingPollMs ?? (o.follow ? 2000 : 0);
  const stopNotes = new AbortController();
  const stopOnAbort = () => stopNotes.abort();
  o.signal?.addEventListener("abort", stopOnAbort, { once: true });
  const notes = waitPoll > 0 ? noteWaiting(client, io, o.uuid, waitPoll, stopNotes.signal).catch(() => undefined) : Promise.resolve();
  try {
    return await followLoop();
  } finally {
    stopNotes.abort();
    o.signal?.removeEventListener("abort", stopOnAbort);
    await notes;
  }
  async function followLoop(): Promise<FollowResult> {
    for (;;) {
      try {
        for await (const m of client.followOutput({ issueUuid: o.uuid, fromEventSeq: BigInt(next), follow: o.follow }, { signal: o.signal })) {
          outageSince = null;
          delay = 200;
          if (warned) {
            warned = false;
            await write(io.stderr, `rvbox: reconnected; resuming at event ${next}\n`);
          }
          if (m.item.case === "finished") {
            res.finished = m.item.value;
            continue;
          }
          const it = outputItem(m);
          if (!it) continue;
          if (lastSeqOf(it) < next) continue; // already printed before a reconnect
          const shown = ledger.admit(it, next);
          next = Math.max(next, lastSeqOf(it) + 1);
          for (const x of shown) {
            o.onItem?.(x);
            if (!concerns(x, o.stream)) continue;
            if (x.kind === "output") {
              const s = x.stream === "stderr" ? "stderr" : "stdout";
              res.bytes[s] += x.data.length;
              await write(s === "stderr" ? io.stderr : io.stdout, x.data);
            } else if (x.kind === "truncation" || x.kind === "incomplete" || x.kind === "gap") {
              res.markers++;
              await write(io.stderr, `rvbox: ${eventText(x)}\n`);
            } else if (o.events) {
              await write(io.stderr, `rvbox: ${eventText(x)}\n`);
            }
          }
        }
        return res;
      } catch (err) {
        if (o.signal?.aborted) {
          res.aborted = true;
          return res;
        }
        if (err instanceof OutputClosedError) throw err;
        if (!isTransient(err)) throw describeError(err, { server: o.server, what: `command ${o.uuid}` });
        const now = Date.now();
        outageSince ??= now;
        if (now - outageSince > budget) throw describeError(err, { server: o.server });
        if (!warned) {
          warned = true;
          await write(io.stderr, `rvbox: lost the output stream (${describeError(err, { server: o.server }).message}); retrying from event ${next}\n`);
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }
}
