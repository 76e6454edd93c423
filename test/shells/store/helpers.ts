import { promises as fsp } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

const made: string[] = [];

/** A fresh temporary directory, removed by cleanupTempDirs(). */
export async function tempDir(prefix = "store-test-"): Promise<string> {
  const d = await fsp.mkdtemp(path.join(os.tmpdir(), prefix));
  made.push(d);
  return d;
}

export async function cleanupTempDirs(): Promise<void> {
  for (const d of made.splice(0)) await fsp.rm(d, { recursive: true, force: true });
}

/** Copies the store files (not the LOCK) of `from` into a new temp dir. */
export async function copyStore(from: string, only?: string[]): Promise<string> {
  const to = await tempDir("store-copy-");
  for (const name of only ?? (await fsp.readdir(from))) {
    if (name === "LOCK") continue;
    try {
      await fsp.copyFile(path.join(from, name), path.join(to, name));
    } catch (err) {
      if ((err as { code?: string }).code !== "ENOENT") throw err;
    }
  }
  return to;
}

export const SCHEMA = ["CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v)", "CREATE TABLE IF NOT EXISTS seqs (n INTEGER PRIMARY KEY)"];

export function putKv(k: string, v: string | number | Uint8Array | bigint | null) {
  return [{ sql: "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", params: [k, v] }];
}
