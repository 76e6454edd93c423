/**
 * Which Node binaries this machine has: the project's own (node_modules/.bin/node,
 * installed by `npm ci`) and an older one outside the project (Debian's system
 * Node 20 here), for the tests of rvbox re-executing itself on the former.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";

/** `process.versions.node` of `bin`, or null when it does not run. */
export function nodeVersion(bin: string): string | null {
  try {
    return execFileSync(bin, ["-p", "process.versions.node"], { encoding: "utf8", timeout: 20_000 }).trim();
  } catch {
    return null;
  }
}

/** Older than RVBox's minimum, 22.15 (native zstd in node:zlib). */
export function older(v: string): boolean {
  const [major = 0, minor = 0] = v.split(".").map(Number);
  return major < 22 || (major === 22 && minor < 15);
}

/** A Node older than 22.15 on this machine outside the project, or null. */
export function findOldNode(): string | null {
  const candidates = new Set<string>(["/usr/bin/node", "/usr/local/bin/node"]);
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) if (dir && !dir.includes("node_modules")) candidates.add(path.join(dir, "node"));
  for (const c of candidates) {
    if (!existsSync(c)) continue;
    const v = nodeVersion(c);
    if (v && older(v)) return c;
  }
  return null;
}
