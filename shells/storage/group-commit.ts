/**
 * The group-commit loop shared by the agent's spill store and the server's
 * storage: items (persist effects, retention drops) queue up; one loop takes
 * everything queued as a group and hands it to `commit`, which makes it
 * durable (one fsync chain for the whole group). Items that arrive while a
 * commit is in flight form the next group, so N concurrent persists cost far
 * fewer than N fsyncs.
 *
 * The first group waits one microtask, so that every item pushed in the
 * current synchronous run (one worker-loop slice runs many reducer steps)
 * joins it.
 *
 * Fail-stop: when `commit` throws, the committer stops for good. Nothing after
 * the failed group is written (its durability could not be reported in
 * order), later pushes are refused, and `onError` is told once; the owner
 * turns that into a store incident or a fatal error.
 */
export class GroupCommitter<T> {
  private queue: T[] = [];
  private running = false;
  private stoppedBy: "close" | "error" | null = null;
  private idle: Array<() => void> = [];
  /** Groups committed, for stats and tests. */
  groups = 0;

  constructor(
    private readonly commit: (group: T[]) => Promise<void>,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** True once a commit failed: nothing more will be written. */
  get failed(): boolean {
    return this.stoppedBy === "error";
  }

  /** Queue items for the next group. Returns false (and drops them) once stopped. */
  push(...items: T[]): boolean {
    if (this.stoppedBy !== null) return false;
    for (const x of items) this.queue.push(x);
    if (!this.running) {
      this.running = true;
      void this.loop();
    }
    return true;
  }

  /** Resolves once everything queued so far is committed (or the committer stopped). */
  whenIdle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((r) => this.idle.push(r));
  }

  /** Wait for queued groups, then refuse further pushes. */
  async close(): Promise<void> {
    await this.whenIdle();
    if (this.stoppedBy === null) this.stoppedBy = "close";
  }

  private async loop(): Promise<void> {
    await Promise.resolve();
    try {
      while (this.queue.length > 0 && this.stoppedBy === null) {
        const group = this.queue;
        this.queue = [];
        try {
          await this.commit(group);
          this.groups++;
        } catch (err) {
          this.stoppedBy = "error";
          this.queue = [];
          this.onError(err);
          return;
        }
      }
    } finally {
      this.running = false;
      for (const r of this.idle.splice(0)) r();
    }
  }
}
