/**
 * Write an operator script to disk so it can be executed, safely:
 *   - `dir` is created with mode 0700 if missing; an existing `dir` must be a
 *     real directory (not a symlink), owned by the daemon's uid and not
 *     accessible to group/others, else WRITE_FAILED (POSIX checks only);
 *   - `name` must be a plain file name (no '/', '\\', NUL, not '.'/'..');
 *   - the bytes are first checked against `expectedSha256` in memory, then
 *     written to a fresh temp file in `dir` opened with
 *     O_CREAT|O_EXCL|O_WRONLY ('wx') and mode 0700 (re-applied with fchmod so
 *     the umask cannot change it), fsync'd, read back and hashed again, and
 *     only then renamed over `dir/name` (atomic; an existing script of that
 *     name is replaced). The directory is fsync'd afterwards (best effort).
 * On any failure the temp file is removed.
 */
import { createHash, randomBytes } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { lstat, mkdir, open, readFile, rename, unlink } from "node:fs/promises";
import { join } from "node:path";

export type ScriptFileErrorCode = "CHECKSUM_MISMATCH" | "WRITE_FAILED";

export type WriteScriptResult = { ok: true; path: string } | { ok: false; code: ScriptFileErrorCode; message: string };

export const SCRIPT_FILE_MODE = 0o700;
export const SCRIPT_DIR_MODE = 0o700;

function sha256(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha256").update(bytes).digest());
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
  return diff === 0;
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

function writeFailed(message: string): WriteScriptResult {
  return { ok: false, code: "WRITE_FAILED", message };
}

function errText(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e && typeof e.message === "string" ? e.message : String(err);
}

/** true when `name` is a single path component we are willing to create. */
export function isSafeScriptName(name: string): boolean {
  return typeof name === "string" && name.length > 0 && name.length <= 255 && name !== "." && name !== ".." && !/[/\\\0]/.test(name);
}

async function ensurePrivateDir(dir: string): Promise<string | null> {
  try {
    await mkdir(dir, { recursive: true, mode: SCRIPT_DIR_MODE });
  } catch (err) {
    return `cannot create script directory ${dir}: ${errText(err)}`;
  }
  let st;
  try {
    st = await lstat(dir);
  } catch (err) {
    return `cannot stat script directory ${dir}: ${errText(err)}`;
  }
  if (!st.isDirectory()) return `script directory ${dir} is not a directory (or is a symlink)`;
  if (process.platform !== "win32") {
    const uid = process.getuid?.();
    if (uid !== undefined && st.uid !== uid) return `script directory ${dir} is owned by uid ${st.uid}, not ${uid}`;
    if ((st.mode & 0o077) !== 0) {
      return `script directory ${dir} is accessible by group/others (mode ${(st.mode & 0o777).toString(8)})`;
    }
  }
  return null;
}

/**
 * Write `bytes` as the executable script `dir/name` if and only if their
 * SHA-256 equals `expectedSha256` (32 bytes). Never throws.
 */
export async function writeScriptFile(dir: string, name: string, bytes: Uint8Array, expectedSha256: Uint8Array): Promise<WriteScriptResult> {
  if (!isSafeScriptName(name)) return writeFailed(`invalid script name ${JSON.stringify(name)}`);
  if (!(expectedSha256 instanceof Uint8Array) || expectedSha256.length !== 32) {
    return { ok: false, code: "CHECKSUM_MISMATCH", message: "expected SHA-256 must be 32 bytes" };
  }
  const inMemory = sha256(bytes);
  if (!equalBytes(inMemory, expectedSha256)) {
    return {
      ok: false,
      code: "CHECKSUM_MISMATCH",
      message: `script SHA-256 ${hex(inMemory)} does not match expected ${hex(expectedSha256)}`,
    };
  }

  const dirProblem = await ensurePrivateDir(dir);
  if (dirProblem) return writeFailed(dirProblem);

  const finalPath = join(dir, name);
  const tempPath = join(dir, `.${name}.${randomBytes(8).toString("hex")}.tmp`);
  let created = false;
  try {
    const fh = await open(tempPath, "wx", SCRIPT_FILE_MODE);
    created = true;
    try {
      await fh.chmod(SCRIPT_FILE_MODE);
      let off = 0;
      while (off < bytes.length) {
        const { bytesWritten } = await fh.write(bytes, off, bytes.length - off);
        if (bytesWritten <= 0) throw new Error("short write");
        off += bytesWritten;
      }
      await fh.sync();
    } finally {
      await fh.close();
    }

    const onDisk = sha256(await readFile(tempPath));
    if (!equalBytes(onDisk, expectedSha256)) {
      await unlink(tempPath).catch(() => undefined);
      created = false;
      return {
        ok: false,
        code: "CHECKSUM_MISMATCH",
        message: `script on disk has SHA-256 ${hex(onDisk)}, expected ${hex(expectedSha256)}`,
      };
    }

    await rename(tempPath, finalPath);
    created = false;
  } catch (err) {
    if (created) await unlink(tempPath).catch(() => undefined);
    return writeFailed(`writing script ${finalPath} failed: ${errText(err)}`);
  }

  if (process.platform !== "win32") {
    // Make the rename durable. Best effort: some filesystems refuse fsync on dirs.
    try {
      const dh = await open(dir, fsConstants.O_RDONLY);
      try {
        await dh.sync();
      } finally {
        await dh.close();
      }
    } catch {
      /* ignore */
    }
  }
  return { ok: true, path: finalPath };
}
