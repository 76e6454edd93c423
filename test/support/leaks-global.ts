// Processes a test run leaves behind (vitest globalSetup). Every process the
// run starts inherits RVBOX_TEST_RUN (this run's id), and, from
// leaks-setup.ts, RVBOX_TEST_FILE (the test file that was running when it
// was started). After the last test, any process still carrying this run's
// id was leaked by a test that did not stop what it started. A process gets
// LEAK_GRACE_MS to finish exiting (a daemon a test stopped without waiting
// for it); one still there after that is named with its test file, killed,
// and fails the run (an error in a global teardown sets vitest's exit status
// to 1), so that a leak can neither hold the run's output pipes open (one run
// hung after its last test on an orphaned spawn helper, 2026-12-06), nor
// outlive the run on a CI machine, nor pass unnoticed. Linux only.
import { readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

/** How long a process still running after the last test may take to exit before it counts as leaked. */
const LEAK_GRACE_MS = 3000;

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

export default function setup(): () => Promise<void> {
  const run = `${process.pid}-${Date.now()}`;
  process.env.RVBOX_TEST_RUN = run;
  return async () => {
    if (process.platform !== "linux") return;
    let leaks = leaked(run);
    for (let waited = 0; leaks.length > 0 && waited < LEAK_GRACE_MS; waited += 100) {
      await sleep(100);
      leaks = leaked(run);
    }
    if (leaks.length === 0) return;
    const lines = leaks.map((l) => `  pid ${l.pid} from ${l.file}: ${l.cmd}`);
    for (const l of leaks) {
      try {
        process.kill(l.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    throw new Error(`${leaks.length} process(es) left running by the tests ${LEAK_GRACE_MS} ms after the last one; killed:\n${lines.join("\n")}`);
  };
}
