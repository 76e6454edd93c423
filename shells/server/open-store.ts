/**
 * Opening the server's store at start. The embedded store opens or fails.
 * A PostgreSQL store that cannot be reached, or takes no writes, is waited
 * for (the same backoff as the writer's reconnects, store-group.ts), logged
 * once when the wait starts and once when it ends; a failure waiting cannot
 * mend (a schema newer than this server, a bad URL) is thrown at once.
 * `status` is told what the start waits for, for /readyz.
 */
import type { ServerLimits } from "../../core/index.js";
import type { Logger } from "../runtime/log.js";
import { PgServerStore } from "../storage/pg-store.js";
import { describeDbError, transientDbError } from "../storage/pg-writer.js";
import { ServerStorage } from "../storage/server-storage.js";
import type { ServerStore } from "../storage/server-store.js";
import { DEFAULT_STORE_WRITE_LIMITS, type StoreWriteLimits } from "../storage/store-group.js";

export interface OpenStoreOptions {
  dataDir: string;
  /** A checked postgres:// URL, or undefined for the embedded store. */
  store?: string;
  repairStore?: boolean;
  checkpointEveryBytes?: number;
  storeLimits?: Partial<StoreWriteLimits>;
  /** Aborted (the daemon is told to stop while it waits): the wait ends with an error. */
  signal?: AbortSignal;
}

export async function openServerStore(o: OpenStoreOptions, limits: ServerLimits, log: Logger, status: (why: string) => void): Promise<ServerStore> {
  const writeLimits = { ...DEFAULT_STORE_WRITE_LIMITS, ...o.storeLimits };
  if (!o.store) {
    status("restoring: opening the embedded store");
    const s = await ServerStorage.open({
      dir: o.dataDir,
      segmentBytes: limits.segmentBytes,
      repair: o.repairStore,
      checkpointEveryBytes: o.checkpointEveryBytes,
    });
    s.writeLimits = writeLimits;
    return s;
  }
  let since = 0;
  for (let wait = writeLimits.retryMinMs; ; wait = Math.min(writeLimits.retryMaxMs, wait * 2)) {
    // Once waiting, each new attempt is still the wait (/readyz and refused calls keep saying why).
    if (since === 0) status("restoring: loading the state from PostgreSQL");
    try {
      const s = await PgServerStore.open(o.store, { ledgerRows: limits.prunedMax, writeLimits });
      if (since > 0) log.info("store available again", { after_s: Math.round((Date.now() - since) / 100) / 10 });
      return s;
    } catch (err) {
      if (!transientDbError(err) || o.signal?.aborted) throw err;
      const reason = describeDbError(err);
      if (since === 0) {
        since = Date.now();
        log.warn("store unavailable at start: waiting for it", { reason });
      }
      status(`waiting for the store: ${reason}`);
      await pause(wait, o.signal);
    }
  }
}

function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const stop = (): void => {
      clearTimeout(t);
      reject(new Error("stopped while waiting for the store"));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", stop);
      resolve();
    }, ms);
    if (signal?.aborted) return stop();
    signal?.addEventListener("abort", stop, { once: true });
  });
}
