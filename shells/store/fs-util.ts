/**
 * Small filesystem helpers for the durable store: directory fsync, durable
 * whole-file replacement (temp file + fsync + rename + directory fsync), and an
 * advisory per-directory lock so two DurableDb instances never write one store.
 */
import { promises as fsp } from "node:fs";
import * as path from "node:path";

/** An Error carrying a string `code`, like Node's system errors. */
export class StoreError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StoreError";
    this.code = code;
  }
}

export function errnoCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/**
 * Modes of what the stores create: their directories and files hold every
 * command line, stdin write and output, so they are the owner's alone. A
 * mode is reduced by the umask, never widened, so these hold under any umask
 * (022 outside systemd included); a directory that already exists keeps the
 * mode its owner gave it.
 */
export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/** fsync a directory so that entries created/renamed/removed in it are durable. */
export async function fsyncDir(dir: string): Promise<void> {
  if (process.platform === "win32") return; // directories cannot be opened for fsync there
  const fh = await fsp.open(dir, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Atomically and durably replace `target` with `chunks`: write `target.tmp`,
 * fsync it, rename it over `target`, fsync the directory. A crash leaves either
 * the old or the new file (plus possibly a stray `.tmp`, removed on next open).
 */
export async function replaceFileDurably(target: string, chunks: Uint8Array[]): Promise<void> {
  const tmp = `${target}.tmp`;
  const fh = await fsp.open(tmp, "w", PRIVATE_FILE_MODE);
  try {
    for (const c of chunks) {
      let off = 0;
      while (off < c.length) {
        const { bytesWritten } = await fh.write(c, off, c.length - off);
        off += bytesWritten;
      }
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
  await fsp.rename(tmp, target);
  await fsyncDir(path.dirname(target));
}

/** Write all of `data` at `position` (loops over short writes). */
export async function writeFully(fh: fsp.FileHandle, data: Uint8Array, position: number): Promise<void> {
  let off = 0;
  while (off < data.length) {
    const { bytesWritten } = await fh.write(data, off, data.length - off, position + off);
    if (bytesWritten <= 0) throw new StoreError("EIO", "short write: 0 bytes written");
    off += bytesWritten;
  }
}

/**
 * Write `parts` one after another at `position`, with one `pwritev` where the
 * kernel takes them all (no concatenated copy of the group's bytes); a short
 * write continues with the rest.
 */
export async function writeAllParts(fh: fsp.FileHandle, parts: readonly Uint8Array[], position: number): Promise<number> {
  let total = 0;
  for (const p of parts) total += p.length;
  if (parts.length === 1) {
    await writeFully(fh, parts[0]!, position);
    return total;
  }
  const { bytesWritten } = await fh.writev(parts as Uint8Array[], position);
  if (bytesWritten < total) {
    // Rare: finish what the kernel did not take, from where it stopped.
    let skip = bytesWritten;
    const rest: Uint8Array[] = [];
    for (const p of parts) {
      if (skip >= p.length) {
        skip -= p.length;
        continue;
      }
      rest.push(skip > 0 ? p.subarray(skip) : p);
      skip = 0;
    }
    await writeFully(fh, Buffer.concat(rest), position + bytesWritten);
  }
  return total;
}

export async function readIfExists(file: string): Promise<Buffer | null> {
  try {
    return await fsp.readFile(file);
  } catch (err) {
    if (errnoCode(err) === "ENOENT") return null;
    throw err;
  }
}

export async function unlinkIfExists(file: string): Promise<void> {
  try {
    await fsp.unlink(file);
  } catch (err) {
    if (errnoCode(err) !== "ENOENT") throw err;
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return errnoCode(err) === "EPERM";
  }
}

/** The command line of `pid` (Linux /proc), cut short; "" when it cannot be read. */
async function commandLine(pid: number): Promise<string> {
  try {
    const argv = (await fsp.readFile(`/proc/${pid}/cmdline`, "utf8")).split("\0").filter((a) => a !== "");
    const line = argv.join(" ");
    return line.length > 160 ? `${line.slice(0, 159)}…` : line;
  } catch {
    return "";
  }
}

/**
 * Why the store cannot be opened, and what to do: the owner may be a daemon
 * still running (one whose starter was killed), or, after a crash, an
 * unrelated process that got the old owner's pid.
 */
async function lockedMessage(key: string, lockFile: string, owner: number): Promise<string> {
  const cmd = await commandLine(owner);
  return (
    `store ${key} is locked by live process ${owner}${cmd ? ` (${cmd})` : ""}: if that is an rvbox daemon still running ` +
    `(left behind when whatever started it was killed, say), stop it (kill ${owner}); if it is an unrelated process ` +
    `(the lock is stale: its owner crashed and the pid was reused), remove ${lockFile}`
  );
}

const lockedInThisProcess = new Set<string>();

/**
 * Advisory lock: `LOCK` holds the owner's pid. A lock whose pid is dead (e.g.
 * after kill -9) is taken over. Best effort only: pid reuse can make a stale
 * lock look live (then remove `LOCK` by hand), and two processes racing for a
 * stale lock are not fully excluded.
 */
export async function acquireDirLock(dir: string): Promise<() => Promise<void>> {
  const key = path.resolve(dir);
  if (lockedInThisProcess.has(key)) {
    throw new StoreError("STORE_LOCKED", `store ${key} is already open in this process`);
  }
  const lockFile = path.join(key, "LOCK");
  lockedInThisProcess.add(key);
  try {
    try {
      await fsp.writeFile(lockFile, `${process.pid}\n`, { flag: "wx", mode: PRIVATE_FILE_MODE });
    } catch (err) {
      if (errnoCode(err) !== "EEXIST") throw err;
      const owner = Number.parseInt((await readIfExists(lockFile))?.toString("utf8") ?? "", 10);
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && processAlive(owner)) {
        throw new StoreError("STORE_LOCKED", await lockedMessage(key, lockFile, owner));
      }
      await fsp.writeFile(lockFile, `${process.pid}\n`);
    }
  } catch (err) {
    lockedInThisProcess.delete(key);
    throw err;
  }
  return async () => {
    lockedInThisProcess.delete(key);
    await unlinkIfExists(lockFile);
  };
}
