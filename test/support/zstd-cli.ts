// Whether the reference zstd CLI is on this machine (tests that cross-check
// frames with it run only where it is).
import { execFileSync } from "node:child_process";

export function hasZstdCli(): boolean {
  try {
    execFileSync("zstd", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
