// `npm run bench:startup`: how long the README's `rvbox` takes from exec to
// exit, before and after the CLI bundle (bin/cli-bundle.js), against `node -e 0`
// in the same invocation.
//
// Commands: `rvbox --version`, `rvbox clients` and `rvbox run c --follow --
// true`, the last two against a live loopback server and agent started here.
// Each is run in several ways, interleaved round by round:
//   before   RVBOX_BUNDLE=0 NODE_DISABLE_COMPILE_CACHE=1: the sources through
//            tsx, no compile cache (what bin/rvbox.js did before the bundle)
//   after    bin/rvbox.js as it is: the cached bundle and V8's compile cache
// each started as `node bin/rvbox.js` by the project's Node (npx, npm
// scripts) and by an older system Node (the README's `node bin/rvbox.js` on
// Debian, which re-executes itself under node_modules/.bin/node), and after
// also as `./bin/rvbox.js` executed (its sh line starts the project's Node). Medians of --runs=N (default 15);
// --old=PATH (default /usr/bin/node; skipped unless older than 22.15).
//
// The deployed tree too (docs/DEPLOY.md, the systemd units): `npm run build` first (--no-build: dist/
// as it is), then `node dist/bin/rvbox.js` with RVBOX_BUNDLE=0 (the compiled files, what it ran before
// the build bundled the CLI), `node dist/bin/rvbox.js` (its CLI bundle, bin/cli-built.js) and
// `dist/bin/rvbox.js` executed (its start-up snapshot, as DEPLOY.md's `rvbox` on PATH starts it), and
// each one's ratio to the README's `./bin/rvbox.js` (start-up snapshot) in the same invocation.
// --deployed: only those and the README's.
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { ensureCliSnapshot } from "./lib/cli-snapshot.js";

const ROOT = path.resolve(import.meta.dirname, "..");
const args = process.argv.slice(2);
const RUNS = Number(args.find((a) => a.startsWith("--runs="))?.slice(7) ?? 15);
const ONLY_DEPLOYED = args.includes("--deployed");
const OLD = args.find((a) => a.startsWith("--old="))?.slice(6) ?? "/usr/bin/node";
const PACKAGED = path.join(ROOT, "node_modules/.bin/node");
const BIN = path.join(ROOT, "bin/rvbox.js");
const DIST_BIN = path.join(ROOT, "dist/bin/rvbox.js");

const README = "after,  ./bin/rvbox.js (start-up snapshot)";
const DEPLOYED = "deployed, node dist/bin/rvbox.js";
const DEPLOYED_EXEC = "deployed, dist/bin/rvbox.js executed (snapshot)";

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

/** CPU (user + system, ms) of this process's waited-for children so far: /proc/self/stat's cutime + cstime (Linux; 0 elsewhere). */
function childrenCpu(): number {
  try {
    const stat = readFileSync("/proc/self/stat", "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[13]) + Number(f[14])) * 10; // clock ticks of 10 ms (USER_HZ 100)
  } catch {
    return 0;
  }
}

/** The CPU the last `ms` run took (all its processes: an exec'd or re-executed Node included). */
let lastCpu = 0;

function ms(cmd: string, argv: string[], env: NodeJS.ProcessEnv = process.env): number {
  const c0 = childrenCpu();
  const t0 = process.hrtime.bigint();
  const r = spawnSync(cmd, argv, { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"], env });
  const t = Number(process.hrtime.bigint() - t0) / 1e6;
  lastCpu = childrenCpu() - c0;
  if (r.status !== 0) throw new Error(`${cmd} ${argv.join(" ")} exited ${r.status}: ${r.stderr.toString()}`);
  return t;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => resolve(typeof a === "object" && a ? a.port : 0));
    });
  });
}

function daemon(argv: string[]): ChildProcess {
  const p = spawn(PACKAGED, [BIN, ...argv], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  p.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  p.on("exit", (code, sig) => {
    if (sig !== "SIGTERM" && code !== 0 && code !== 143) process.stderr.write(`bench:startup: ${argv[0]} exited ${code}\n${err}\n`);
  });
  return p;
}

async function main(): Promise<void> {
  if (!existsSync(PACKAGED)) {
    console.log(`bench:startup: needs ${PACKAGED} (npm ci)`);
    return;
  }
  const oldVersion = existsSync(OLD) ? execFileSync(OLD, ["-p", "process.versions.node"], { encoding: "utf8" }).trim() : "";
  const [maj = 0, min = 0] = oldVersion.split(".").map(Number);
  const withOld = oldVersion !== "" && (maj < 22 || (maj === 22 && min < 15));
  const newVersion = execFileSync(PACKAGED, ["-p", "process.versions.node"], { encoding: "utf8" }).trim();
  if (!args.includes("--no-build")) execFileSync("npm", ["run", "build"], { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
  const deployed = existsSync(DIST_BIN) && readFileSync(DIST_BIN, "utf8").startsWith("#!/bin/sh\n");
  if (!deployed) console.log("bench:startup: dist/bin/rvbox.js is not a stamped `npm run build`: the deployed paths are left out");

  const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-bench-startup-"));
  const operator = randomBytes(16).toString("hex");
  const fleet = randomBytes(16).toString("hex");
  writeFileSync(path.join(dir, "operator-token"), `${operator}\n`, { mode: 0o600 });
  writeFileSync(path.join(dir, "agent-tokens"), `* ${fleet}\n`, { mode: 0o600 });
  writeFileSync(path.join(dir, "agent-token"), `${fleet}\n`, { mode: 0o600 });
  const [ap, cp] = [await freePort(), await freePort()];
  const server = daemon([
    "server",
    "--listen",
    `127.0.0.1:${ap}`,
    "--control",
    `127.0.0.1:${cp}`,
    "--data",
    path.join(dir, "server"),
    "--agent-tokens",
    path.join(dir, "agent-tokens"),
    "--operator-token",
    path.join(dir, "operator-token"),
    "--log-level",
    "warn",
  ]);
  const agent = daemon([
    "agent",
    "--server",
    `ws://127.0.0.1:${ap}/v1/agent`,
    "--client-id",
    "c",
    "--state",
    path.join(dir, "agent"),
    "--token",
    path.join(dir, "agent-token"),
    "--log-level",
    "warn",
    "--cwd",
    dir,
  ]);
  const cliEnv = { ...process.env, RVBOX_SERVER: `http://127.0.0.1:${cp}`, RVBOX_TOKEN_FILE: path.join(dir, "operator-token") };
  try {
    // Wait for the agent's session (clients lists "c" connected).
    const deadline = Date.now() + 60_000;
    for (;;) {
      const r = spawnSync(PACKAGED, [BIN, "clients", "--json"], { cwd: ROOT, env: cliEnv, encoding: "utf8" });
      if (r.status === 0 && /"clientId":\s*"c"[^}]*"link":\s*"connected"/.test(r.stdout)) break;
      if (Date.now() > deadline) throw new Error(`agent c never connected: ${r.stdout}${r.stderr}`);
      await new Promise((res) => setTimeout(res, 300));
    }
    const commands: Array<[string, string[]]> = [
      ["rvbox --version", ["--version"]],
      ["rvbox clients", ["clients"]],
      ["rvbox run c --follow -- true", ["run", "c", "--follow", "--", "true"]],
    ];
    const before = { ...cliEnv, RVBOX_BUNDLE: "0", NODE_DISABLE_COMPILE_CACHE: "1" };
    const bundled = { ...cliEnv, RVBOX_SNAPSHOT: "0" };
    // [label, program, its leading arguments, environment]
    const all: Array<[string, string, string[], NodeJS.ProcessEnv]> = [
      [`before, node bin/rvbox.js (Node ${newVersion})`, PACKAGED, [BIN], before],
      [`after,  node bin/rvbox.js (Node ${newVersion})`, PACKAGED, [BIN], bundled],
      [`after,  ./bin/rvbox.js, no snapshot (RVBOX_SNAPSHOT=0)`, BIN, [], bundled],
      [README, BIN, [], cliEnv],
      ...(deployed
        ? ([
            [`deployed, node dist/bin/rvbox.js, RVBOX_BUNDLE=0`, PACKAGED, [DIST_BIN], { ...cliEnv, RVBOX_BUNDLE: "0" }],
            [`deployed, node dist/bin/rvbox.js, RVBOX_SNAPSHOT=0 (bundle)`, PACKAGED, [DIST_BIN], bundled],
            [DEPLOYED, PACKAGED, [DIST_BIN], cliEnv],
            [DEPLOYED_EXEC, DIST_BIN, [], cliEnv],
          ] as Array<[string, string, string[], NodeJS.ProcessEnv]>)
        : []),
      ...(withOld
        ? ([
            [`before, node bin/rvbox.js (Node ${oldVersion}, re-exec)`, OLD, [BIN], before],
            [`after,  node bin/rvbox.js (Node ${oldVersion}, re-exec)`, OLD, [BIN], bundled],
            // executed as a program with the old Node first on PATH: its sh line starts the project's Node
            [`after,  ./bin/rvbox.js (\`node\` on PATH ${oldVersion})`, BIN, [], { ...cliEnv, PATH: `${path.dirname(OLD)}:${process.env.PATH ?? ""}` }],
          ] as Array<[string, string, string[], NodeJS.ProcessEnv]>)
        : []),
    ];
    // --deployed: the README's `rvbox` and the deployed ways only (more runs in the same time).
    const ways = ONLY_DEPLOYED && deployed ? all.filter(([w]) => w === README || w.startsWith("deployed")) : all;
    // Warm-up: builds the bundle if it is missing or stale, fills the compile cache and the page cache.
    for (const [, argv] of commands) for (const [, cmd, pre, env] of ways) ms(cmd, [...pre, ...argv], env);
    // The start-up snapshot: the runs above start building it in the background; make sure it is there.
    console.log(`bench:startup: start-up snapshot ${await ensureCliSnapshot(ROOT)}`);
    const bare: number[] = [];
    const bareOld: number[] = [];
    const t = commands.map(() => ways.map(() => [] as number[]));
    const cpu = commands.map(() => ways.map(() => 0));
    for (let i = 0; i < RUNS; i++) {
      bare.push(ms(PACKAGED, ["-e", "0"]));
      if (withOld) bareOld.push(ms(OLD, ["-e", "0"]));
      // Each round starts at the next way: a command's aftermath in the daemons (a `run`'s
      // final writes) slows whichever way comes next, so no way may always come after the same one.
      commands.forEach(([, argv], c) =>
        ways.forEach((_, k) => {
          const w = (k + i) % ways.length;
          const [, cmd, pre, env] = ways[w]!;
          t[c]![w]!.push(ms(cmd, [...pre, ...argv], env));
          cpu[c]![w]! += lastCpu;
        }),
      );
    }
    const base = median(bare);
    console.log(
      `bench:startup: median of ${RUNS}, interleaved; load average ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")}`,
    );
    console.log(
      `  node -e 0 (Node ${newVersion}): ${base.toFixed(0)} ms${withOld ? ` | node -e 0 (Node ${oldVersion}): ${median(bareOld).toFixed(0)} ms` : ""}`,
    );
    commands.forEach(([name], c) => {
      console.log(`  ${name}`);
      ways.forEach(([way], w) => {
        const m = median(t[c]![w]!);
        const cpuMs = cpu[c]![w]! / RUNS;
        console.log(
          `    ${way.padEnd(60)} ${m.toFixed(0).padStart(5)} ms  ${(m / base).toFixed(1).padStart(5)}x node -e 0   CPU ${cpuMs.toFixed(0).padStart(4)} ms (mean)`,
        );
      });
    });
    if (deployed) {
      // The deployed paths against the README's `rvbox` (issue 41: within 1.2x).
      const at = (c: number, label: string) => median(t[c]![ways.findIndex(([w]) => w === label)]!);
      const cpuAt = (c: number, label: string) => cpu[c]![ways.findIndex(([w]) => w === label)]!;
      console.log(`  deployed / README (${README.trim()}):`);
      commands.forEach(([name], c) => {
        const readme = at(c, README);
        console.log(
          `    ${name.padEnd(30)} node dist/bin/rvbox.js ${(at(c, DEPLOYED) / readme).toFixed(2)}x (CPU ${(cpuAt(c, DEPLOYED) / cpuAt(c, README)).toFixed(2)}x)` +
            ` | dist/bin/rvbox.js executed ${(at(c, DEPLOYED_EXEC) / readme).toFixed(2)}x (CPU ${(cpuAt(c, DEPLOYED_EXEC) / cpuAt(c, README)).toFixed(2)}x)`,
        );
      });
    }
    const manifest = path.join(ROOT, "node_modules/.cache/rvbox-cli");
    if (existsSync(manifest)) console.log(`  (bundle cache: ${manifest})`);
  } finally {
    server.kill("SIGTERM");
    agent.kill("SIGTERM");
    await Promise.all([server, agent].map((p) => new Promise((r) => (p.exitCode !== null ? r(null) : p.once("exit", r)))));
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
