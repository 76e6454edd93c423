import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { acquireDirLock } from "../../../shells/store/fs-util.js";

describe("the store's directory lock", () => {
  it("a lock held by a live process names that process and both ways out: stop a daemon left running, or remove a stale LOCK (issue 41)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "rvbox-lock-"));
    const holder = spawn("sleep", ["30"], { stdio: "ignore" });
    const exited = new Promise((r) => holder.once("exit", r));
    try {
      await new Promise((r) => holder.once("spawn", r));
      writeFileSync(join(dir, "LOCK"), `${holder.pid}\n`);
      const refused = acquireDirLock(dir);
      await expect(refused).rejects.toMatchObject({ code: "STORE_LOCKED" });
      const msg = ((await refused.catch((e: unknown) => e)) as Error).message;
      expect(msg).toContain(`is locked by live process ${holder.pid} (sleep 30)`);
      expect(msg).toContain(`stop it (kill ${holder.pid})`);
      expect(msg).toContain(`remove ${join(dir, "LOCK")}`);
    } finally {
      holder.kill("SIGKILL");
      await exited;
    }
    // Its owner gone, the lock is taken over.
    const release = await acquireDirLock(dir);
    await release();
  });
});
