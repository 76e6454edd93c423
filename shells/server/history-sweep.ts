/**
 * The history's retention in a store that keeps it (ServerStore.keepsHistory):
 * every `everyMs`, ended commands that ended more than `limits.historyMs`
 * ago are deleted with their events and output, oldest first, in batches of
 * HISTORY_SWEEP_BATCH until none is left. The core has long let go of them
 * (it holds at most `historyHeld` ended commands, and prunes by the same
 * age); historyMs 0 keeps every command. A failed sweep is logged and tried
 * again at the next turn: retention never stops the server.
 */
import type { ServerStore } from "../storage/server-store.js";
import type { Logger } from "../runtime/log.js";

/** Commands one sweep transaction deletes at most. */
export const HISTORY_SWEEP_BATCH = 1_000;
/** How often the sweep runs (ms). */
export const HISTORY_SWEEP_EVERY_MS = 60_000;

export class HistorySweep {
  private readonly timer: NodeJS.Timeout | null;
  private running: Promise<void> | null = null;
  /** Commands deleted since the start. */
  deleted = 0;

  constructor(
    private readonly store: ServerStore,
    private readonly historyMs: () => number,
    private readonly now: () => number,
    private readonly log: Logger,
    everyMs = HISTORY_SWEEP_EVERY_MS,
  ) {
    this.timer = store.keepsHistory ? setInterval(() => void this.run(), everyMs) : null;
    this.timer?.unref();
  }

  /** One sweep (the timer's turn; tests call it). Resolves when it is done; a turn that finds one running joins it. */
  run(): Promise<void> {
    this.running ??= this.sweep().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async sweep(): Promise<void> {
    const age = this.historyMs();
    if (!this.store.keepsHistory || age <= 0) return;
    const before = this.now() - age;
    try {
      let n = HISTORY_SWEEP_BATCH;
      let total = 0;
      while (n === HISTORY_SWEEP_BATCH) {
        n = await this.store.sweepHistory(before, HISTORY_SWEEP_BATCH);
        total += n;
      }
      this.deleted += total;
      if (total > 0) this.log.info("history swept", { deleted: total, olderThanMs: age });
    } catch (err) {
      this.log.warn("history sweep failed; trying again later", { error: String((err as Error)?.message ?? err) });
    }
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
