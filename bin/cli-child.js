// Runs rvbox again as a child with the terminal, the exit code and signals
// passed through: bin/rvbox.js re-executing itself under the project's Node,
// and a process restored from the CLI's start-up snapshot that finds the
// snapshot out of date (bin/rvbox-snapshot.ts). This process only waits.
import { spawn } from "node:child_process";

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
