/**
 * The history's retention in a store that keeps it (ServerStore.keepsHistory):
 * every `everyMs`, ended commands that ended more than `limits.historyMs`
 * ago are deleted with their events and output, oldest first, in batches of
 * HISTORY_SWEEP_BATCH until none is left, and audit entries past the newest
 * `limits.auditMax` likewise (counted: ListAudit says how many). The core
 * has long let go of them (it holds at most `historyHeld` ended commands,
 * prunes by the same age, and holds no audit entry); historyMs 0 keeps
 * every command. A failed sweep is logged and tried again at the next turn:
 * retention never stops the server.
 */
import type { ServerStore } from "../storage/server-store.js";
import type { Logger } from "../runtime/log.js";

/** Commands one sweep transaction deletes at most. */
export const HISTORY_SWEEP_BATCH = 1_000;
/** How often the sweep runs (ms). */
export const HISTORY_SWEEP_EVERY_MS = 60_000;

/** Run one batch after another until a batch finds less than a full one; the total. */
async function drain(batch: (limit: number) => Promise<number>): Promise<number> {
  let total = 0;
  for (let n = HISTORY_SWEEP_BATCH; n === HISTORY_SWEEP_BATCH; total += n) n = await batch(HISTORY_SWEEP_BATCH);
  return total;
}

export class HistorySweep {
  private readonly timer: NodeJS.Timeout | null;
  private running: Promise<void> | null = null;
  /** Commands deleted since the start. */
  deleted = 0;

  constructor(
    private readonly store: ServerStore,
    private readonly limits: () => { historyMs: number; auditMax: number },
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
    if (!this.store.keepsHistory) return;
    const { historyMs, auditMax } = this.limits();
    const before = this.now() - historyMs;
    try {
      const commands = historyMs > 0 ? await drain((n) => this.store.sweepHistory(before, n)) : 0;
      const audit = await drain((n) => this.store.sweepAudit(auditMax, n));
      this.deleted += commands;
      if (commands > 0 || audit > 0) this.log.info("history swept", { commands, auditEntries: audit, olderThanMs: historyMs, auditMax });
    } catch (err) {
      this.log.warn("history sweep failed; trying again later", { error: String((err as Error)?.message ?? err) });
    }
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
