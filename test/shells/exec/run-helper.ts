import { existsSync, readdirSync, readFileSync } from "node:fs";
import { startProcess, type ExitInfo, type OutputStreamName, type ProcessHandle, type ProcessSpec, type SpawnFailure } from "../../../shells/exec/index.js";

export interface RunResult {
  pid: number | undefined;
  spawnCalls: number;
  spawnError: SpawnFailure | undefined;
  exit: ExitInfo | undefined;
  exitCalls: number;
  stdout: Buffer;
  stderr: Buffer;
  chunkSizes: Record<OutputStreamName, number[]>;
  /** ms from startProcess to onExit / onSpawnError */
  elapsedMs: number;
}

export interface Running {
  handle: ProcessHandle;
  /** Resolves at onExit or onSpawnError, then waits `settleMs` to catch stray hook calls. */
  done: Promise<RunResult>;
  result: RunResult;
  firstOutput: Promise<void>;
}

export function run(spec: ProcessSpec, settleMs = 50): Running {
  const result: RunResult = {
    pid: undefined,
    spawnCalls: 0,
    spawnError: undefined,
    exit: undefined,
    exitCalls: 0,
    stdout: Buffer.alloc(0),
    stderr: Buffer.alloc(0),
    chunkSizes: { stdout: [], stderr: [] },
    elapsedMs: -1,
  };
  const chunks: Record<OutputStreamName, Buffer[]> = { stdout: [], stderr: [] };
  const t0 = Date.now();
  let firstOutputResolve: () => void = () => undefined;
  const firstOutput = new Promise<void>((r) => (firstOutputResolve = r));
  let finish: () => void = () => undefined;
  const ended = new Promise<void>((r) => (finish = r));
  const handle = startProcess(spec, {
    onSpawn(pid) {
      result.spawnCalls += 1;
      result.pid = pid;
    },
    onSpawnError(err) {
      result.spawnError = err;
      result.elapsedMs = Date.now() - t0;
      finish();
    },
    onOutput(stream, chunk) {
      result.chunkSizes[stream].push(chunk.length);
      chunks[stream].push(Buffer.from(chunk));
      firstOutputResolve();
    },
    onExit(info) {
      result.exitCalls += 1;
      result.exit = info;
      result.elapsedMs = Date.now() - t0;
      finish();
    },
  });
  const done = ended
    .then(() => new Promise((r) => setTimeout(r, settleMs)))
    .then(() => {
      result.stdout = Buffer.concat(chunks.stdout);
      result.stderr = Buffer.concat(chunks.stderr);
      return result;
    });
  return { handle, done, result, firstOutput };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** true if `pid` no longer runs (gone, or a zombie nobody reaped yet). */
export function isGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ESRCH";
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

/**
 * Pids of the non-zombie members of process group `pgid` (Linux /proc scan).
 * Returns null where /proc is unavailable.
 */
export function liveGroupMembers(pgid: number): number[] | null {
  if (!existsSync("/proc/self/stat")) return null;
  const live: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue;
    }
    // fields after "(comm) ": state ppid pgrp ...
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) === pgid && fields[0] !== "Z") live.push(Number(entry));
  }
  return live;
}
