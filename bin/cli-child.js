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

/** Names of the V8 flags already given, on the command line or in NODE_OPTIONS (whose value the command line would override). */
function flagsSet(execArgv, nodeOptions) {
  return new Set([...execArgv, ...(nodeOptions ?? "").split(/\s+/)].filter((a) => a !== "").map((a) => a.split("=")[0]));
}

/** Node flags for running `rvbox ...args` again: this process's own, plus the daemons' flags not already set. */
export function reexecFlags(execArgv, args, nodeOptions = undefined) {
  if (!isDaemon(args)) return [...execArgv];
  const set = flagsSet(execArgv, nodeOptions);
  return [...execArgv, ...DAEMON_NODE_FLAGS.filter((f) => !set.has(f.split("=")[0]))];
}

/**
 * Does a process started as `node <execArgv> rvbox ...args` with `env` lack a
 * daemon setting (a flag of DAEMON_NODE_FLAGS, a variable of DAEMON_ENV)?
 * Both take effect only at start (V8 sizes its heap, glibc its arenas, before
 * any JavaScript runs), so a daemon started by hand (`node bin/rvbox.js
 * server`, `node dist/bin/rvbox.js agent`) replaces itself, same pid, with a
 * process that has them: `execDaemon` below.
 */
export function lacksDaemonSettings(execArgv, args, env) {
  if (!isDaemon(args)) return false;
  const set = flagsSet(execArgv, env.NODE_OPTIONS);
  return DAEMON_NODE_FLAGS.some((f) => !set.has(f.split("=")[0])) || Object.keys(DAEMON_ENV).some((k) => env[k] === undefined);
}

/**
 * Replaces this process (process.execve: same pid, so systemd, a supervisor
 * or a shell's `kill %1` still hold the daemon) with `node <flags> script
 * ...args` carrying the daemons' settings, when they are missing. Returns
 * only when nothing had to be done, or it cannot be (no process.execve: Node
 * < 23.11, or a second time: RVBOX_DAEMON_EXEC guards against a loop); the
 * daemon then runs as it is and logs the flags it has.
 */
export function execDaemon(script, args) {
  const again = process.env.RVBOX_DAEMON_EXEC === "1";
  delete process.env.RVBOX_DAEMON_EXEC;
  if (again || typeof process.execve !== "function" || !lacksDaemonSettings(process.execArgv, args, process.env)) return;
  const env = { ...reexecEnv(process.env, args), RVBOX_DAEMON_EXEC: "1" };
  process.execve(process.execPath, [process.execPath, ...reexecFlags(process.execArgv, args, process.env.NODE_OPTIONS), script, ...args], env);
}

/**
 * The fd on which a child started by `runChild` finds the read end of a pipe
 * from this process: it reads end-of-file when this process is gone, however
 * it ended (kill -9 included), and then stops itself (`watchParent`). Node
 * cannot ask the kernel for a parent-death signal (prctl PR_SET_PDEATHSIG).
 */
export const PARENT_PIPE_FD = 3;

export function runChild(program, args, env) {
  const child = spawn(program, args, { stdio: ["inherit", "inherit", "inherit", "pipe"], env: { ...env, RVBOX_PARENT_FD: String(PARENT_PIPE_FD) } });
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

/**
 * In a process `runChild` started: when the pipe on `fd` ends, the process
 * that started this one is gone (killed with -9, say) and nothing passes
 * signals or the exit code on any more; a daemon left running would hold its
 * store's lock. Stop as if told to (SIGTERM: a daemon's graceful stop). The
 * pipe keeps nothing alive (unref); its fd is close-on-exec, so the commands
 * a daemon runs never hold it.
 */
export async function watchParent(fd) {
  const { Socket } = await import("node:net");
  let sock;
  try {
    sock = new Socket({ fd, readable: true, writable: false });
  } catch {
    return; // no such pipe: started some other way
  }
  sock.unref();
  let done = false;
  const gone = () => {
    if (done) return;
    done = true;
    process.stderr.write(`rvbox: the process that started this one (pid ${process.ppid === 1 ? "gone" : process.ppid}) has ended; stopping\n`);
    process.kill(process.pid, "SIGTERM");
  };
  sock.on("data", () => {});
  sock.on("end", gone);
  sock.on("error", gone);
}
