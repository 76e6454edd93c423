import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { orphanNotKilled, ProcRegistry } from "../../../shells/agent/proc-identity.js";

describe("spawn-time process records (kill_orphan)", () => {
  it("a kill_orphan without a durable pid finds the process group from the spawn record, and refuses a reused pid", async () => {
    const reg = new ProcRegistry(join(mkdtempSync(join(tmpdir(), "rvbox-procs-")), "procs"));
    const child = spawn("sleep", ["30"], { detached: true, stdio: "ignore" });
    await new Promise((r) => child.once("spawn", r));
    reg.record("cmd-1", child.pid!);
    expect(reg.recordedPid("cmd-1")).toBe(child.pid);
    expect(reg.recordedPid("never-spawned")).toBeNull();
    expect(reg.confirm("cmd-1", child.pid!)).toEqual({ ok: true, why: "" });
    expect(reg.confirm("cmd-1", child.pid! + 1).ok).toBe(false);
    process.kill(-child.pid!, "SIGKILL");
    await new Promise((r) => child.once("exit", r));
    reg.forget("cmd-1");
    expect(reg.recordedPid("cmd-1")).toBeNull();
  });

  it("a recorded process that has already exited is said as such, at info; a pid whose identity does not match still warns (issue 41)", async () => {
    const reg = new ProcRegistry(join(mkdtempSync(join(tmpdir(), "rvbox-procs-")), "procs"));
    const child = spawn("sleep", ["30"], { detached: true, stdio: "ignore" });
    await new Promise((r) => child.once("spawn", r));
    reg.record("cmd-2", child.pid!);
    const exited = new Promise((r) => child.once("exit", r));
    try {
      expect(orphanNotKilled(reg.confirm("cmd-2", child.pid! + 1))).toEqual({
        level: "warn",
        msg: "not killing a recorded process group: its identity cannot be confirmed",
      });
    } finally {
      process.kill(-child.pid!, "SIGKILL");
      await exited;
    }
    const who = reg.confirm("cmd-2", child.pid!);
    expect(who).toMatchObject({ ok: false, why: "no such process", gone: true });
    expect(orphanNotKilled(who)).toEqual({ level: "info", msg: "a command's process group from before the restart has already exited; nothing to kill" });
  });
});
