// File stamps for the CLI's build caches (bin/cli-bundle.js, bin/cli-snapshot.js):
// inode, size, mtime and ctime in nanoseconds. Any write to a file changes its
// ctime, which user space cannot set back, so a cached build whose every input
// still has its recorded stamp was built from the files as they are now.
import { statSync } from "node:fs";

export function stamp(file) {
  const s = statSync(file, { bigint: true });
  return [file, String(s.ino), String(s.size), String(s.mtimeNs), String(s.ctimeNs)];
}

export function same(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Every recorded input still has its stamp (a missing file is a change). */
export function inputsCurrent(inputs) {
  if (!Array.isArray(inputs)) return false;
  for (const rec of inputs) {
    let now;
    try {
      now = stamp(rec[0]);
    } catch {
      return false;
    }
    if (!same(now, rec)) return false;
  }
  return true;
}
