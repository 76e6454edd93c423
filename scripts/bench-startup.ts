// `npm run bench:startup`: what bin/rvbox.js's re-exec costs. `rvbox version`
// started by the project's Node (direct) and by an older system Node (which
// re-executes it under node_modules/.bin/node), alternating, median wall time
// of each and the ratio. Flags: --runs=N (default 15), --old=PATH (default
// /usr/bin/node; it must be older than 22.15 to re-exec).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "..");
const args = process.argv.slice(2);
const RUNS = Number(args.find((a) => a.startsWith("--runs="))?.slice(7) ?? 15);
const OLD = args.find((a) => a.startsWith("--old="))?.slice(6) ?? "/usr/bin/node";
const PACKAGED = path.join(ROOT, "node_modules/.bin/node");
const BIN = path.join(ROOT, "bin/rvbox.js");

function ms(cmd: string, argv: string[]): number {
  const t0 = process.hrtime.bigint();
  const r = spawnSync(cmd, argv, { cwd: ROOT, stdio: "ignore" });
  if (r.status !== 0) throw new Error(`${cmd} ${argv.join(" ")} exited ${r.status}`);
  return Number(process.hrtime.bigint() - t0) / 1e6;
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

if (!existsSync(OLD) || !existsSync(PACKAGED)) {
  console.log(`bench:startup: needs ${OLD} and ${PACKAGED}`);
  process.exit(0);
}
const oldVersion = execFileSync(OLD, ["--version"], { encoding: "utf8" }).trim();
const newVersion = execFileSync(PACKAGED, ["--version"], { encoding: "utf8" }).trim();
const direct: number[] = [];
const reexec: number[] = [];
const bare: number[] = [];
ms(PACKAGED, [BIN, "version"]); // warm the page cache
for (let i = 0; i < RUNS; i++) {
  direct.push(ms(PACKAGED, [BIN, "version"]));
  reexec.push(ms(OLD, [BIN, "version"]));
  bare.push(ms(OLD, ["-e", "0"]));
}
console.log(
  `bench:startup: rvbox version, median of ${RUNS}: direct on ${newVersion} ${median(direct).toFixed(0)} ms | started by ${oldVersion} (re-exec) ${median(reexec).toFixed(0)} ms | ${oldVersion} -e 0 alone ${median(bare).toFixed(0)} ms | re-exec/direct ${(median(reexec) / median(direct)).toFixed(2)}x`,
);
