// The benches time `rvbox` as the README runs it (bin/rvbox.js executed), so
// they make sure its start-up snapshot is current first: a stale or missing
// one would be rebuilt in the background by the first timed runs, and those
// runs would measure the fallback instead.
import { existsSync, realpathSync } from "node:fs";
import path from "node:path";

interface SnapshotModule {
  currentSnapshot(link: string, root: string): unknown;
  snapshotLink(root: string): string;
  buildSnapshot(o: { root: string; dir: string }): Promise<string | undefined>;
}

/** "current", "built" or "unavailable" (then the benches measure the bundle, and say so). */
export async function ensureCliSnapshot(root: string): Promise<"current" | "built" | "unavailable"> {
  // @ts-expect-error plain JS module without declarations
  const snap = (await import("../../bin/cli-snapshot.js")) as SnapshotModule;
  const { cacheDirFor } = await import("../../bin/cli-bundle.js");
  const real = realpathSync(root);
  const current = () => snap.currentSnapshot(snap.snapshotLink(real), real) !== undefined;
  if (current()) return "current";
  const lock = path.join(cacheDirFor(real), "snapshot.lock");
  for (let i = 0; i < 150 && existsSync(lock) && !current(); i++) await new Promise((r) => setTimeout(r, 200)); // a background build
  if (current()) return "built";
  return (await snap.buildSnapshot({ root: real, dir: cacheDirFor(real) })) !== undefined ? "built" : "unavailable";
}
