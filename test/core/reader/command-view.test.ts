// The operator's command view (core/reader/command-view.ts) is built only
// from what the server made durable: its working state running ahead of the
// committed view by a group commit is never shown.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { CommandLifecycle, ExecutionSpecSchema, ShellType, type ExecutionSpec } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { commandView, commandViewKey, lifecycleName, programSummary, shellQuote, times, type CommittedCommand } from "../../../core/reader/command-view.js";
import type { ServerCommand } from "../../../core/server/server-types.js";

// A server command is a committed command (the simulator's TUI source passes one): checked by the compiler.
const asCommitted = (c: ServerCommand): CommittedCommand => c;
void asCommitted;

const base = (): CommittedCommand & Record<string, unknown> => ({
  uuid: "u-1",
  clientId: "host-a",
  spec: create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["echo", "hi there"] } }, cwd: "/tmp", timeoutMs: 5000n }),
  createdAt: 1000,
  queueExpiry: 9000,
  exit: { terminalSource: "" },
  dispatch: { attempts: 1 },
  output: { storedOutputBytes: 12, retention: [] },
  stdin: { ackedThrough: 0, closeRequested: false },
  committed: { state: CommandLifecycle.RUNNING, revision: 3, exitCode: null, signalName: "", reason: "", storedThrough: 4, startedTime: 1500, endedTime: 0 },
});

describe("command view", () => {
  it("R-O3: the working state ahead of the committed view changes neither the view nor its key", () => {
    fc.assert(
      fc.property(
        fc.record({
          state: fc.constantFrom(CommandLifecycle.SUCCEEDED, CommandLifecycle.FAILED, CommandLifecycle.CANCELLED),
          revision: fc.integer({ min: 4, max: 100 }),
          exitCode: fc.option(fc.integer({ min: 0, max: 255 }), { nil: null }),
          storedThrough: fc.integer({ min: 5, max: 100 }),
          receivedThrough: fc.integer({ min: 5, max: 100 }),
        }),
        (ahead) => {
          const c = base();
          const before = commandView(c);
          const key = commandViewKey(c);
          // The working fields, where a server command holds them.
          const { exitCode, storedThrough, receivedThrough, ...top } = ahead;
          Object.assign(c, top, { ingest: { storedThrough, receivedThrough } });
          Object.assign(c.exit, { exitCode });
          expect(commandView(c)).toEqual(before);
          expect(commandViewKey(c)).toBe(key);
        },
      ),
    );
  });

  it("shows the committed state, times and program, and changes its key when the committed view moves", () => {
    const c = base();
    const v = commandView(c, (t) => t + 1_000_000);
    expect(v).toMatchObject({
      state: "running",
      revision: 3,
      exitCode: null,
      storedThrough: 4,
      startedAt: 1500,
      endedAt: null,
      durationMs: null,
      program: "argv: echo 'hi there'",
      cwd: "/tmp",
      timeoutMs: 5000,
      queueExpiry: 1_009_000,
    });
    const key = commandViewKey(c);
    c.committed = { ...c.committed, state: CommandLifecycle.SUCCEEDED, exitCode: 0, endedTime: 2500, revision: 4 };
    expect(commandView(c)).toMatchObject({ state: "succeeded", exitCode: 0, durationMs: 1000 });
    expect(commandViewKey(c)).not.toBe(key);
  });

  it("shows every field of the committed command, and its queue expiry as it is when no clock is given", () => {
    const c = base();
    c.exit.terminalSource = "agent";
    c.dispatch.attempts = 2;
    c.output = { storedOutputBytes: 77, retention: [{}, {}] };
    c.stdin.ackedThrough = 5;
    c.stdin.closeRequested = true;
    c.spec.stdinOpen = true;
    c.committed = { ...c.committed, state: CommandLifecycle.FAILED, exitCode: 3, signalName: "SIGTERM", reason: "timeout", endedTime: 1400 };
    expect(commandView(c)).toEqual({
      uuid: "u-1",
      clientId: "host-a",
      state: "failed",
      revision: 3,
      exitCode: 3,
      signalName: "SIGTERM",
      reason: "timeout",
      terminalSource: "agent",
      createdAt: 1000,
      queueExpiry: 9000,
      startedAt: 1500,
      endedAt: 1400,
      durationMs: 0, // an end before the start (two clocks) is no negative duration
      program: "argv: echo 'hi there'",
      cwd: "/tmp",
      stdinOpen: true,
      timeoutMs: 5000,
      storedThrough: 4,
      retainedBytes: 77,
      retentionMarkers: 2,
      attempts: 2,
      stdinAckedThrough: 5,
      stdinCloseRequested: true,
    });
  });

  it("changes its key with each field a reader shows", () => {
    const moves: Array<(c: CommittedCommand) => void> = [
      (c) => (c.committed = { ...c.committed, state: CommandLifecycle.SUCCEEDED }),
      (c) => (c.committed = { ...c.committed, revision: 9 }),
      (c) => (c.committed = { ...c.committed, storedThrough: 9 }),
      (c) => (c.committed = { ...c.committed, exitCode: 0 }),
      (c) => (c.committed = { ...c.committed, signalName: "SIGKILL" }),
      (c) => (c.committed = { ...c.committed, reason: "why" }),
      (c) => (c.committed = { ...c.committed, startedTime: 1 }),
      (c) => (c.committed = { ...c.committed, endedTime: 2 }),
      (c) => (c.dispatch = { attempts: 5 }),
      (c) => (c.output = { ...c.output, storedOutputBytes: 1 }),
      (c) => (c.output = { ...c.output, retention: [{}] }),
      (c) => (c.stdin = { ackedThrough: 1, closeRequested: false }),
      (c) => (c.stdin = { ackedThrough: 0, closeRequested: true }),
      (c) => (c.exit = { terminalSource: "server" }),
    ];
    const keys = new Set([commandViewKey(base())]);
    for (const m of moves) {
      const c = base();
      m(c);
      keys.add(commandViewKey(c));
    }
    expect(keys.size).toBe(moves.length + 1);
  });

  it("names lifecycle states in lower case, and anything unknown 'unknown'", () => {
    expect(lifecycleName(CommandLifecycle.QUEUED)).toBe("queued");
    expect(lifecycleName(CommandLifecycle.INTERRUPTED)).toBe("interrupted");
    expect(lifecycleName(CommandLifecycle.UNSPECIFIED)).toBe("unknown");
    expect(lifecycleName(999)).toBe("unknown");
  });

  it("summarizes each kind of program in one line, quoting argv words only where a shell needs it", () => {
    const spec = (program: MessageInitShape<typeof ExecutionSpecSchema>["program"]): ExecutionSpec => create(ExecutionSpecSchema, { program });
    expect(programSummary(spec({ case: "argv", value: { argv: ["ls", "-l", "a b", "it's", "x=1,y:2/z@%+."] } }))).toBe(
      "argv: ls -l 'a b' 'it'\\''s' x=1,y:2/z@%+.",
    );
    expect(programSummary(spec({ case: "argv", value: { argv: [""] } }))).toBe("argv: ''");
    const shell = (sh: ShellType) => programSummary(spec({ case: "shell", value: { shell: sh, commandLine: "echo hi" } }));
    expect(shell(ShellType.BASH)).toBe("bash: echo hi");
    expect(shell(ShellType.POWERSHELL)).toBe("powershell: echo hi");
    expect(shell(ShellType.UNSPECIFIED)).toBe("sh: echo hi");
    expect(shell(77 as ShellType)).toBe("sh: echo hi"); // a shell this build does not know
    const script = (interpreter: string, args: string[]) =>
      programSummary(spec({ case: "script", value: { sizeBytes: 120n, interpreter, args, sha256: new Uint8Array(32) } }));
    expect(script("", [])).toBe("script (120 B)");
    expect(script("/bin/sh", [])).toBe("script (120 B, /bin/sh)");
    expect(script("/bin/sh", ["-x", "y"])).toBe("script (120 B, /bin/sh -x y)");
    expect(programSummary(spec({ case: undefined }))).toBe("(no program)");
    expect(programSummary(undefined)).toBe("(no program)");
    expect(shellQuote("plain")).toBe("plain");
  });

  it("has a duration only once both ends are known", () => {
    expect(times(100, 350)).toEqual({ startedAt: 100, endedAt: 350, durationMs: 250 });
    expect(times(100, null)).toEqual({ startedAt: 100, endedAt: null, durationMs: null });
    expect(times(null, 350)).toEqual({ startedAt: null, endedAt: 350, durationMs: null });
  });
});
