// How the agent gets a pseudo-terminal (`rvbox run -t`): @lydell/node-pty
// (forkpty in a prebuilt addon) against util-linux `script` (a process that
// holds the terminal and relays it over pipes). docs/ARCHITECTURE.md,
// "Terminals", has the figures and the choice.
//
//   npm run bench:pty                 # 30 runs of a short command, 64 MiB through each
//   npm run bench:pty -- --n=50 --mib=128
//
// Per way: the median time from spawn to the first output byte and to the
// exit of `sh -c 'echo hi; exit 3'` (and that the exit code came back), then
// MiB/s of `head -c N /dev/zero | base64` read through the terminal.
import { spawn } from "node:child_process";
import os from "node:os";
import { loadNodePty } from "../shells/exec/pty-runner.js";

const args = process.argv.slice(2);
const arg = (k: string, d: string): string => args.find((a) => a.startsWith(`--${k}=`))?.slice(k.length + 3) ?? d;
const N = Number(arg("n", "30"));
const MIB = Number(arg("mib", "64"));

interface Result {
  first: number;
  total: number;
  bytes: number;
  code: number | null;
}

const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", TERM: "xterm" };

function viaNodePty(line: string): Promise<Result> {
  const lib = loadNodePty();
  if (lib instanceof Error) throw lib;
  return new Promise((res) => {
    const t = performance.now();
    let first = 0;
    let bytes = 0;
    const p = lib.spawn("/bin/sh", ["-c", line], { cols: 80, rows: 24, env, encoding: null });
    p.onData((d: string | Buffer) => {
      if (!first) first = performance.now() - t;
      bytes += d.length;
    });
    p.onExit((e) => res({ first, total: performance.now() - t, bytes, code: e.exitCode }));
  });
}

function viaScript(line: string): Promise<Result> {
  return new Promise((res) => {
    const t = performance.now();
    let first = 0;
    let bytes = 0;
    const c = spawn("script", ["-qefc", `stty rows 24 cols 80; exec sh -c '${line}'`, "/dev/null"], { stdio: ["pipe", "pipe", "pipe"], env });
    c.stdout.on("data", (d: Buffer) => {
      if (!first) first = performance.now() - t;
      bytes += d.length;
    });
    c.on("close", (code) => res({ first, total: performance.now() - t, bytes, code }));
  });
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

const ways: Array<[string, (line: string) => Promise<Result>]> = [
  ["node-pty", viaNodePty],
  ["script", viaScript],
];
console.log(`node ${process.version}, ${os.cpus().length} cores, load ${os.loadavg()[0]!.toFixed(1)}`);
for (const [name, run] of ways) {
  const firsts: number[] = [];
  const totals: number[] = [];
  let code: number | null = null;
  for (let i = 0; i < N; i++) {
    const r = await run("echo hi; exit 3");
    firsts.push(r.first);
    totals.push(r.total);
    code = r.code;
  }
  const t = performance.now();
  const big = await run(`head -c ${MIB * 1048576} /dev/zero | base64 -w 100`);
  const s = (performance.now() - t) / 1000;
  console.log(
    `${name.padEnd(9)} first output ${median(firsts).toFixed(2)} ms, exit ${median(totals).toFixed(2)} ms (code ${code}); ` +
      `${(big.bytes / 1048576).toFixed(1)} MiB in ${s.toFixed(2)} s = ${(big.bytes / 1048576 / s).toFixed(1)} MiB/s`,
  );
}
