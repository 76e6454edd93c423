// Runs rvbox again as a child with the terminal, the exit code and signals
// passed through: bin/rvbox.js re-executing itself under the project's Node,
// and a process restored from the CLI's start-up snapshot that finds the
// snapshot out of date (bin/rvbox-snapshot.ts). This process only waits.
import { spawn } from "node:child_process";

/**
 * V8 flags for the daemons (`rvbox server`, `rvbox agent`): a young generation
 * of about 8 MiB instead of V8's default (64 MiB on a host with much memory).
 * Over 20,000 commands the agent's RSS was ~80 MiB and the server's ~130 MiB
 * lower, with no throughput or fleet-rate cost (docs/PERFORMANCE.md, "Soak").
 * The first line of bin/rvbox.js and the systemd units pass the same flags;
 * test/cli/runtime.test.ts checks all of them.
 */
export const DAEMON_NODE_FLAGS = ["--max-semi-space-size=4"];

/**
 * Environment for the daemons: at most 2 glibc malloc arenas (glibc's default
 * is 8 per core, one per thread that allocates: libuv's pool, V8's workers).
 * Over 40,000 commands the agent's RSS ended at 130 MiB instead of 166 and
 * the server's at 206 instead of 226, throughput and fleet rate unchanged
 * within the noise (docs/PERFORMANCE.md, "Soak"). A value the caller set is
 * kept. The commands the agent runs never see it (buildChildEnv passes only
 * a fixed list of variables).
 */
export const DAEMON_ENV = { MALLOC_ARENA_MAX: "2" };

/** Is `rvbox ...args` a daemon (the commands DAEMON_NODE_FLAGS and DAEMON_ENV are for)? */
const isDaemon = (args) => args[0] === "server" || args[0] === "agent";

/** The environment for running `rvbox ...args` again: `env`, plus the daemons' variables not already set. */
export function reexecEnv(env, args) {
  const out = { ...env };
  if (!isDaemon(args)) return out;
  for (const [k, v] of Object.entries(DAEMON_ENV)) if (out[k] === undefined) out[k] = v;
  return out;
}

/** Node flags for running `rvbox ...args` again: this process's own, plus the daemons' flags not already set. */
export function reexecFlags(execArgv, args) {
  if (!isDaemon(args)) return [...execArgv];
  const set = new Set(execArgv.map((a) => a.split("=")[0]));
  return [...execArgv, ...DAEMON_NODE_FLAGS.filter((f) => !set.has(f.split("=")[0]))];
}

export function runChild(program, args, env) {
  const child = spawn(program, args, { stdio: "inherit", env });
  // Signals sent to this process by pid are passed on. SIGINT and SIGQUIT are
  // not: from a terminal they reach the whole foreground process group, the
  // child included, and a second copy would turn the daemons' graceful stop
  // into an immediate one. This process only waits for the child.
  const forwarded = ["SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2"];
  const forward = (sig) => {
    if (child.pid !== undefined) child.kill(sig);
  };
  for (const sig of forwarded) process.on(sig, forward);
  for (const sig of ["SIGINT", "SIGQUIT"]) process.on(sig, () => {});
  child.on("error", (err) => {
    process.stderr.write(`rvbox: cannot start ${program}: ${err.message}\n`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    if (signal) {
      for (const sig of [...forwarded, "SIGINT", "SIGQUIT"]) process.removeAllListeners(sig);
      process.kill(process.pid, signal);
      return;
    }
    process.exit(code ?? 1);
  });
}
