// Processes a test run leaves behind (vitest globalSetup). Every process the
// run starts inherits RVBOX_TEST_RUN (this run's id), and, from
// leaks-setup.ts, RVBOX_TEST_FILE (the test file that was running when it
// was started). After the last test, any process still carrying this run's
// id was leaked by a test that did not stop what it started: it is named
// with its test file and killed, so that it can neither hold the run's
// output pipes open (one run hung after its last test on an orphaned spawn
// helper, 2026-12-06) nor outlive the run on a CI machine. Linux only.
import { readdirSync, readFileSync } from "node:fs";

interface Leak {
  pid: number;
  file: string;
  cmd: string;
}

function leaked(run: string): Leak[] {
  const out: Leak[] = [];
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
      if (!env.includes(`RVBOX_TEST_RUN=${run}`)) continue;
      if (/^\S+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"))) continue; // a zombie holds nothing
      const file = env.find((e) => e.startsWith("RVBOX_TEST_FILE="))?.slice(16) || "(before any test file)";
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim().slice(0, 200);
      if (/vitest/.test(cmd)) continue; // vitest's own (its watchdog, a worker still closing)
      out.push({ pid, file, cmd });
    } catch {
      // gone, or not ours to read
    }
  }
  return out;
}

export default function setup(): () => void {
  const run = `${process.pid}-${Date.now()}`;
  process.env.RVBOX_TEST_RUN = run;
  return () => {
    if (process.platform !== "linux") return;
    const leaks = leaked(run);
    if (leaks.length === 0) return;
    process.stderr.write(`\ntest run: ${leaks.length} process(es) left running by the tests; killed:\n`);
    for (const l of leaks) {
      process.stderr.write(`  pid ${l.pid} from ${l.file}: ${l.cmd}\n`);
      try {
        process.kill(l.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  };
}
