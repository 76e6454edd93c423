// The server stores' shared write side (shells/storage/store-group.ts): the
// health it reports (a commit waiting past slowCommitMs, a writer reporting
// failures) once per change, and the backlog bound on writes queued while
// the database takes none.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { PersistEffect } from "../../../core/index.js";
import { GroupCommittedStore, STORE_RECORD_OVERHEAD, type StoreHealth, type StoreOp, storeOpBytes } from "../../../shells/storage/store-group.js";

class TestStore extends GroupCommittedStore {
  groups: StoreOp[][] = [];
  connected = true;
  protected override takingWrites(): boolean {
    return this.connected;
  }
  private release: Array<() => void> = [];
  hold = false;
  protected async commitGroup(group: StoreOp[]): Promise<void> {
    this.groups.push(group);
    if (this.hold) await new Promise<void>((r) => this.release.push(r));
  }
  open(): void {
    this.hold = false;
    for (const r of this.release.splice(0)) r();
  }
  down(reason: string): void {
    this.markDown(reason);
  }
}

/** A persist of one output event whose frame is `bytes` long (key "u/1": 3 characters). */
const persistOf = (id: number, bytes: number): PersistEffect => ({
  type: "persist",
  id,
  records: [{ table: "event", key: "u/1", value: { kind: "output", seq: 1, zstd: new Uint8Array(bytes) } }],
});
const tick = () => new Promise((r) => setImmediate(r));

describe("GroupCommittedStore health and backlog", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("counts a queued op as its byte fields plus a fixed overhead per record", () => {
    expect(storeOpBytes({ kind: "persist", effect: persistOf(1, 1000) })).toBe(1000 + 3 + STORE_RECORD_OVERHEAD);
    expect(storeOpBytes({ kind: "drop", uuid: "u", throughSeq: 3 })).toBe(STORE_RECORD_OVERHEAD);
  });

  it("a backlog of backlogMaxBytes is within the bound, one byte more is past it; told once each way", async () => {
    const s = new TestStore();
    const per = storeOpBytes({ kind: "persist", effect: persistOf(1, 1000) });
    s.writeLimits = { ...s.writeLimits, backlogMaxBytes: 2 * per };
    const told: boolean[] = [];
    s.onBacklog = (over) => told.push(over);
    s.hold = true;
    s.persist(persistOf(1, 1000));
    s.persist(persistOf(2, 1000));
    expect(s.backlogBytes).toBe(2 * per);
    expect(told).toEqual([]);
    s.persist(persistOf(3, 1)); // per - 999 bytes more: past the bound
    expect(told).toEqual([true]);
    s.persist(persistOf(4, 1));
    expect(told).toEqual([true]);
    await tick();
    s.open();
    await s.whenIdle();
    expect(s.backlogBytes).toBe(0);
    expect(told).toEqual([true, false]);
  });

  it("a commit may wait slowCommitMs and the store stays healthy; one ms more and it is reported down, once; the commit's end brings it back", async () => {
    const s = new TestStore();
    s.writeLimits = { ...s.writeLimits, slowCommitMs: 1000 };
    const seen: Array<[StoreHealth, StoreHealth]> = [];
    s.onHealth = (now, was) => seen.push([now, was]);
    s.hold = true;
    s.persist(persistOf(1, 10));
    await tick();
    await vi.advanceTimersByTimeAsync(1000);
    expect(s.health).toEqual({ ok: true });
    await vi.advanceTimersByTimeAsync(1);
    expect(s.health).toMatchObject({ ok: false, reason: "a commit has waited more than 1000 ms (database slow, or a lock held)" });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(seen).toHaveLength(1);
    s.open();
    await s.whenIdle();
    expect(s.health).toEqual({ ok: true });
    expect(seen).toHaveLength(2);
    expect(seen[1]![1]).toMatchObject({ ok: false, since: expect.any(Number) });
  });

  it("a group that commits while its writer has no connection (lost right after the COMMIT) does not bring the store back", async () => {
    const s = new TestStore();
    s.down("terminating connection due to administrator command");
    s.connected = false;
    s.persist(persistOf(1, 10));
    await s.whenIdle();
    expect(s.health.ok).toBe(false);
    s.connected = true;
    s.persist(persistOf(2, 10));
    await s.whenIdle();
    expect(s.health).toEqual({ ok: true });
  });

  it("a writer's repeated failures are one transition: the latest reason replaces the first, without telling again", () => {
    const s = new TestStore();
    const seen: StoreHealth[] = [];
    s.onHealth = (now) => seen.push(now);
    s.down("connection refused");
    s.down("the database system is starting up");
    expect(seen).toHaveLength(1);
    expect(s.health).toMatchObject({ ok: false, reason: "the database system is starting up" });
  });
});
