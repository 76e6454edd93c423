// A short real-chaos run (scripts/chaos.ts, `npm run chaos`): the compiled
// daemons, one server and 4 agents behind TCP proxies on loopback, a minute of
// kill -9, link cuts and stalls and a full disk while commands of every kind
// run; then faults stop and everything must settle. The script checks its own
// ledger (launches written by the commands themselves, output read back
// through FollowOutput against what each process printed) and exits non-zero
// on any violation.
import { execFile, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { ROOT } from "./helpers.js";

const run = promisify(execFile);

/**
 * Whether this machine lets the chaos script mount the small tmpfs its
 * disk-full fault needs (scripts/chaos.ts mountTmpfs: root, or a container
 * that allows it): then that fault must have run. Asked the same way, once.
 */
function tmpfsMountable(): { ok: boolean; why: string } {
  const dir = mkdtempSync(path.join(tmpdir(), "rvbox-chaos-probe-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", dir], { stdio: ["ignore", "ignore", "pipe"] });
    execFileSync("umount", [dir], { stdio: "ignore" });
    return { ok: true, why: "" };
  } catch (err) {
    return { ok: false, why: String((err as Error).message).split("\n")[0]! };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const DISK_FULL = tmpfsMountable();
if (!DISK_FULL.ok) console.warn(`chaos.test.ts: the disk-full fault is NOT CHECKED: this machine cannot mount a tmpfs (${DISK_FULL.why})`);
const SCRIPT = path.join(ROOT, "scripts/chaos.ts");
const TSX = ["--import", "tsx"];

interface Summary {
  commands: number;
  acknowledged: number;
  byKind: Record<string, number>;
  byState: Record<string, number>;
  faults: Record<string, number>;
  faultTotal: number;
  diskFull: string;
  wireEvents: number;
  resends: number;
  bytesVerified: number;
  violations: number;
}

describe("real chaos (npm run chaos)", () => {
  it("R-D1 R-D2 R-H6 R-O2 R-O3 R-O5 R-O8 R-S1 R-W11: a minute of kill -9, cuts, stalls and a full disk against the compiled daemons: every command terminal, none launched twice, every byte read back exact and in order or covered by a marker, interrupted commands marked incomplete, resends identical", async () => {
    const child = spawn(
      process.execPath,
      [...TSX, SCRIPT, "--minutes", "1", "--light", "--seed", "20261201", "--drain-minutes", "3", "--dist", "dist/chaos-test"],
      { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((r) => child.on("exit", (c) => r(c)));
    const line = out.split("\n").find((l) => l.startsWith("CHAOS-SUMMARY "));
    expect(line, out.slice(-4000)).toBeDefined();
    const s = JSON.parse(line!.slice("CHAOS-SUMMARY ".length)) as Summary;
    expect(s.violations, out.slice(-4000)).toBe(0);
    expect(code, out.slice(-4000)).toBe(0);
    // The run did what it says: a real stream of commands and of faults.
    expect(s.commands).toBeGreaterThanOrEqual(25);
    expect(s.acknowledged).toBe(s.commands);
    expect(Object.keys(s.byKind).length).toBeGreaterThanOrEqual(6);
    expect(s.faultTotal).toBeGreaterThanOrEqual(6);
    for (const k of ["kill9-server", "kill9-agent", "cut", "stall"]) expect(s.faults[k] ?? 0, k).toBeGreaterThan(0);
    // Where a tmpfs can be mounted the full disk must have happened, not been skipped quietly.
    if (DISK_FULL.ok) {
      expect(s.diskFull, out.slice(-4000)).not.toMatch(/NOT RUN/);
      expect(s.faults["disk-full"] ?? 0).toBeGreaterThan(0);
    }
    expect(s.bytesVerified).toBeGreaterThan(100_000);
    expect(s.wireEvents).toBeGreaterThan(0);
    expect(Object.values(s.byState).reduce((a, b) => a + b, 0)).toBe(s.commands);
    expect(s.byState.UNFINISHED ?? 0).toBe(0);
  }, 480_000);

  it("bad flags are refused with one clear line and exit status 2", async () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /--minutes is required/],
      [["--minutes", "0"], /--minutes must be a number from 0.1 to 1440, got "0"/],
      [["--minutes", "ten"], /--minutes must be a number/],
      [["--minutes", "1", "--agents", "2.5"], /--agents must be an integer from 1 to 16/],
      [["--minutes", "1", "--rate", "-1"], /--rate must be a number/],
      [["--minutes", "1", "--frobnicate"], /unknown flag "--frobnicate"/],
      [["--minutes"], /--minutes needs a value/],
    ];
    for (const [args, want] of cases) {
      const r = await run(process.execPath, [...TSX, SCRIPT, ...args], { cwd: ROOT }).then(
        () => ({ code: 0, stderr: "" }),
        (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
      );
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toMatch(want);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
    }
  }, 120_000);
});
