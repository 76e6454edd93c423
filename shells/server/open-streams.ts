/**
 * The control API's open streams (FollowOutput, over connect-node or
 * follow-http.ts, and WatchFleet), each with the identity that opened it and
 * the Authorization header it presented.
 *
 * Two jobs:
 *  - Revocation. An identities reload (SIGHUP) checks every open stream
 *    again, as a new call would be checked: a header that no longer maps to
 *    an identity ends it with UNAUTHENTICATED; an identity whose role (or
 *    operator scope, for a rule with a target) no longer allows the call ends
 *    it with PERMISSION_DENIED and the access rule's message. Without this, a
 *    removed viewer kept receiving output and fleet changes until it hung up.
 *  - Bounds on FollowOutput (each holds up to one batch in the server):
 *    `maxFollowStreams` in all, `maxFollowStreamsPerIdentity` per identity,
 *    and the last `followStreamsAdminReserve` of the total only for admins,
 *    so an admin gets in when operators filled the shared part. Past a bound:
 *    RESOURCE_EXHAUSTED saying which. (WatchFleet has its own bound,
 *    fleet-watch.ts MAX_WATCHERS.)
 */
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { assert, type ServerLimits, type ServerState } from "../../core/index.js";
import { type MethodName, refusal, rpcName } from "./access.js";
import type { Identity } from "./operators.js";

export type StreamMethod = Extract<MethodName, "followOutput" | "watchFleet">;
export type StreamLimits = Pick<ServerLimits, "maxFollowStreams" | "maxFollowStreamsPerIdentity" | "followStreamsAdminReserve">;

export interface OpenStream {
  readonly method: StreamMethod;
  /** The identity it was opened as (its name is what the per-identity bound counts). */
  readonly who: Identity;
  /** The Authorization header it was opened with, identified again on a reload. */
  readonly auth: string;
  /** Its request (the access rules' targets read it). */
  readonly req: unknown;
  /** Aborted when a reload ends the stream; `ended` is the error the reader gets. */
  readonly signal: AbortSignal;
  ended: ConnectError | null;
}

interface Entry extends OpenStream {
  readonly abort: AbortController;
}

export class OpenStreams {
  private readonly open = new Set<Entry>();
  /** Open FollowOutput streams per identity name, and in all. */
  private readonly perIdentity = new Map<string, number>();
  private follows = 0;

  /** `checking`: check the counts against the open set and the bounds after every change (tests). */
  constructor(
    private readonly limits: () => StreamLimits,
    private readonly checking = false,
  ) {}

  get size(): number {
    return this.open.size;
  }

  /** Open FollowOutput streams (of one identity, or in all). */
  followCount(name?: string): number {
    return name === undefined ? this.follows : (this.perIdentity.get(name) ?? 0);
  }

  /** Register a stream; a FollowOutput over its bounds is refused (RESOURCE_EXHAUSTED). Call `close` when it ends. */
  add(method: StreamMethod, who: Identity, auth: string, req: unknown): OpenStream {
    if (method === "followOutput") {
      const why = this.followRefusal(who);
      if (why) throw new ConnectError(why, ConnectCode.ResourceExhausted);
      this.follows++;
      this.perIdentity.set(who.name, this.followCount(who.name) + 1);
    }
    const abort = new AbortController();
    const e: Entry = { method, who, auth, req, abort, signal: abort.signal, ended: null };
    this.open.add(e);
    if (this.checking) this.check();
    return e;
  }

  close(s: OpenStream): void {
    if (!this.open.delete(s as Entry) || s.method !== "followOutput") return;
    this.follows--;
    const n = this.followCount(s.who.name) - 1;
    if (n > 0) this.perIdentity.set(s.who.name, n);
    else this.perIdentity.delete(s.who.name);
    if (this.checking) this.check();
  }

  /** The counts match the open FollowOutput streams, and none is over its bound. */
  check(): void {
    const { maxFollowStreams, maxFollowStreamsPerIdentity } = this.limits();
    const mine = new Map<string, number>();
    for (const s of this.open) if (s.method === "followOutput") mine.set(s.who.name, (mine.get(s.who.name) ?? 0) + 1);
    let all = 0;
    for (const [name, n] of mine) {
      all += n;
      assert(this.perIdentity.get(name) === n, `open streams: ${name} counted ${this.perIdentity.get(name)}, has ${n}`);
      assert(n <= maxFollowStreamsPerIdentity, `open streams: ${name} holds ${n} > maxFollowStreamsPerIdentity`);
    }
    assert(this.perIdentity.size === mine.size && this.follows === all, `open streams: counted ${this.follows}, open ${all}`);
    assert(all <= maxFollowStreams, `open streams: ${all} > maxFollowStreams`);
  }

  private followRefusal(who: Identity): string | null {
    const { maxFollowStreams: max, maxFollowStreamsPerIdentity: mine, followStreamsAdminReserve: reserve } = this.limits();
    if (this.followCount(who.name) >= mine)
      return `too many FollowOutput streams open for ${who.name}: at most ${mine} per identity (limits.maxFollowStreamsPerIdentity); end one first`;
    const shared = Math.max(0, max - reserve);
    if (who.role !== "admin" && this.follows >= shared)
      return `too many FollowOutput streams open on this server: at most ${shared} for non-admin identities (limits.maxFollowStreams ${max}, of which ${reserve} are kept for admins); try again when one ends`;
    if (this.follows >= max) return `too many FollowOutput streams open on this server: at most ${max} (limits.maxFollowStreams); try again when one ends`;
    return null;
  }

  /**
   * After the identities were reloaded: end every stream whose header no
   * longer maps to an identity, or whose identity may no longer make its
   * call. Returns how many were ended.
   */
  recheck(identify: (auth: string) => Identity | null, st: ServerState): number {
    let n = 0;
    for (const s of this.open) {
      if (s.ended) continue;
      const now = identify(s.auth);
      const why =
        now === null
          ? new ConnectError(`${s.who.name}'s token is no longer valid (the identities were reloaded); ${rpcName(s.method)} ended`, ConnectCode.Unauthenticated)
          : denied(now, s, st);
      if (!why) continue;
      n++;
      s.ended = why;
      s.abort.abort();
    }
    return n;
  }
}

function denied(now: Identity, s: OpenStream, st: ServerState): ConnectError | null {
  const why = refusal(now, s.method, s.req, st);
  return why === null ? null : new ConnectError(`${why} (the identities were reloaded); ${rpcName(s.method)} ended`, ConnectCode.PermissionDenied);
}
