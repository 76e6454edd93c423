// An agent's stop (`systemctl stop`) gives every command SIGTERM and a grace
// before SIGKILL (R-C4's "the agent lost them" comes after). These tests drive
// stopProcesses with handles whose state the test controls, so the command
// still being launched when the stop begins is not a matter of timing.
import { describe, expect, it } from "vitest";
import type { ProcessHandle, ProcessState, SignalName } from "../../../shells/exec/process-runner.js";
import { stopProcesses } from "../../../shells/exec/stop-processes.js";

interface Fake {
  h: ProcessHandle;
  state: ProcessState;
  got: SignalName[];
}

/** A handle that signals like the real ones: only once running (a pid known), and exits on SIGTERM unless stubborn. */
function fake(state: ProcessState, stubborn = false): Fake {
  const f: Fake = { state, got: [], h: undefined as unknown as ProcessHandle };
  f.h = {
    get pid() {
      return f.state === "starting" ? undefined : 42;
    },
    get state() {
      return f.state;
    },
    writeStdin: async () => {},
    closeStdin: () => {},
    signal: (sig: SignalName): boolean => {
      if (f.state !== "running") return false;
      f.got.push(sig);
      if (sig === "SIGKILL" || !stubborn) setTimeout(() => (f.state = "finished"), 1);
      return true;
    },
    terminate: () => {},
    pauseOutput: () => {},
    resumeOutput: () => {},
  };
  return f;
}

describe("stopProcesses", () => {
  it("R-C4: a running command gets SIGTERM and, exiting on it, never SIGKILL", async () => {
    const a = fake("running");
    const out = await stopProcesses(() => [a.h], 2_000, 5);
    expect(a.got).toEqual(["SIGTERM"]);
    expect(out).toEqual({ terminated: 1, killed: 0, unsignalled: 0 });
  });

  it("R-C4: a command still launching when the stop begins gets SIGTERM once its spawn is reported, not only SIGKILL at the end of the grace", async () => {
    const a = fake("starting");
    setTimeout(() => (a.state = "running"), 20);
    const out = await stopProcesses(() => [a.h], 10_000, 5);
    expect(a.got).toEqual(["SIGTERM"]);
    expect(out).toEqual({ terminated: 1, killed: 0, unsignalled: 0 });
  });

  it("R-C4: a command that ignores SIGTERM is SIGKILLed when the grace ends, and SIGTERMed only once", async () => {
    const a = fake("running", true);
    const out = await stopProcesses(() => [a.h], 60, 5);
    expect(a.got).toEqual(["SIGTERM", "SIGKILL"]);
    expect(out).toEqual({ terminated: 1, killed: 1, unsignalled: 0 });
  });

  it("a command that never reports its spawn is counted as unsignalled, not as killed", async () => {
    const a = fake("starting");
    const b = fake("finished");
    const out = await stopProcesses(() => [a.h, b.h], 40, 5);
    expect(a.got).toEqual([]);
    expect(b.got).toEqual([]);
    expect(out).toEqual({ terminated: 0, killed: 0, unsignalled: 1 });
  });
});
