// The group-commit loop shared by the agent's spill store and the server's
// storage (shells/storage/group-commit.ts).
import { describe, expect, it } from "vitest";
import { GroupCommitter } from "../../../shells/storage/group-commit.js";

function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

describe("GroupCommitter", () => {
  it("items pushed in one synchronous run form one group; items pushed during a commit form the next", async () => {
    const groups: number[][] = [];
    const g = gate();
    const c = new GroupCommitter<number>(
      async (group) => {
        groups.push(group);
        if (groups.length === 1) await g.wait;
      },
      () => {},
    );
    c.push(1);
    c.push(2, 3);
    await Promise.resolve();
    await Promise.resolve();
    expect(groups).toEqual([[1, 2, 3]]);
    c.push(4);
    c.push(5);
    expect(groups).toHaveLength(1); // the first commit is still in flight
    g.open();
    await c.whenIdle();
    expect(groups).toEqual([
      [1, 2, 3],
      [4, 5],
    ]);
    expect(c.groups).toBe(2);
  });

  it("whenIdle resolves only after every queued item is committed", async () => {
    const done: number[] = [];
    const c = new GroupCommitter<number>(
      async (group) => {
        await new Promise((r) => setTimeout(r, 5));
        done.push(...group);
      },
      () => {},
    );
    await c.whenIdle(); // idle at rest
    c.push(1);
    c.push(2);
    await c.whenIdle();
    expect(done).toEqual([1, 2]);
  });

  it("a failed commit stops the committer: nothing later is written, pushes are refused, onError is told once", async () => {
    const written: number[][] = [];
    const errors: unknown[] = [];
    const g = gate();
    const c = new GroupCommitter<number>(
      async (group) => {
        if (group.includes(1)) {
          await g.wait;
          throw new Error("EIO");
        }
        written.push(group);
      },
      (e) => errors.push(e),
    );
    c.push(1);
    await Promise.resolve();
    c.push(2); // queued behind the failing group
    g.open();
    await c.whenIdle();
    expect(written).toEqual([]);
    expect(errors.map((e) => (e as Error).message)).toEqual(["EIO"]);
    expect(c.failed).toBe(true);
    expect(c.push(3)).toBe(false);
    await c.whenIdle();
    expect(written).toEqual([]);
  });

  it("close waits for queued groups and then refuses pushes without calling onError", async () => {
    const written: number[][] = [];
    const errors: unknown[] = [];
    const c = new GroupCommitter<number>(
      async (group) => {
        await new Promise((r) => setTimeout(r, 2));
        written.push(group);
      },
      (e) => errors.push(e),
    );
    c.push(1);
    await c.close();
    expect(written).toEqual([[1]]);
    expect(c.push(2)).toBe(false);
    expect(c.failed).toBe(false);
    expect(errors).toEqual([]);
  });
});
