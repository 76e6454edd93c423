/**
 * Which process group a recorded pid really is. The core asks the shell to
 * kill a command's process group left over from before a crash
 * (`kill_orphan {pid}`); after a reboot, or once the group is gone, that pid
 * may belong to an unrelated process. So at spawn the agent writes
 * `<state>/procs/<uuid>` with the boot id and the process's start time (Linux:
 * /proc/sys/kernel/random/boot_id and field 22 of /proc/<pid>/stat), and an
 * orphan is killed only if both still match. Elsewhere (no /proc) the pid
 * alone is used.
 */
import { readFileSync, writeFileSync, mkdirSync, unlinkSync } from "node:fs";
import * as path from "node:path";

export interface ProcIdentity {
  pid: number;
  bootId: string;
  startTicks: string;
}

function bootId(): string {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    return "";
  }
}

function startTicks(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may contain spaces: split after its ')'.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "";
  } catch {
    return "";
  }
}

const safe = (uuid: string): string => uuid.replace(/[^A-Za-z0-9._-]/g, "_");

export class ProcRegistry {
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  record(uuid: string, pid: number): void {
    const id: ProcIdentity = { pid, bootId: bootId(), startTicks: startTicks(pid) };
    try {
      writeFileSync(path.join(this.dir, safe(uuid)), JSON.stringify(id), { mode: 0o600 });
    } catch {
      // best effort: without it an orphan is not killed (see confirm)
    }
  }

  forget(uuid: string): void {
    try {
      unlinkSync(path.join(this.dir, safe(uuid)));
    } catch {
      // gone already
    }
  }

  /** The pid recorded at spawn for `uuid`, if any (used when the core's pid never became durable). */
  recordedPid(uuid: string): number | null {
    try {
      const id = JSON.parse(readFileSync(path.join(this.dir, safe(uuid)), "utf8")) as ProcIdentity;
      return Number.isSafeInteger(id.pid) && id.pid > 0 ? id.pid : null;
    } catch {
      return null;
    }
  }

  /** Is `pid` still the process group this agent started for `uuid`? `gone`: no process has that pid now. */
  confirm(uuid: string, pid: number): { ok: boolean; why: string; gone?: true } {
    let id: ProcIdentity;
    try {
      id = JSON.parse(readFileSync(path.join(this.dir, safe(uuid)), "utf8")) as ProcIdentity;
    } catch {
      return process.platform === "linux" ? { ok: false, why: "no identity record" } : { ok: true, why: "no /proc: pid only" };
    }
    if (id.pid !== pid) return { ok: false, why: `recorded pid ${id.pid} != ${pid}` };
    if (id.bootId !== bootId()) return { ok: false, why: "the host rebooted since" };
    const now = startTicks(pid);
    if (now === "") return { ok: false, why: "no such process", gone: true };
    if (id.startTicks !== "" && now !== id.startTicks) return { ok: false, why: "pid reused by another process" };
    return { ok: true, why: "" };
  }
}

/**
 * What the agent logs when it does not kill a recorded process group: a
 * process that has simply exited already is the common case after a
 * restart and nothing to worry about; an identity that no longer matches is
 * worth a warning (the pid may be someone else's now).
 */
export function orphanNotKilled(who: { why: string; gone?: true }): { level: "info" | "warn"; msg: string } {
  if (who.gone) return { level: "info", msg: "a command's process group from before the restart has already exited; nothing to kill" };
  return { level: "warn", msg: "not killing a recorded process group: its identity cannot be confirmed" };
}
