// The operator's command view (core/reader/command-view.ts) is built only
// from what the server made durable: its working state running ahead of the
// committed view by a group commit is never shown.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { CommandLifecycle, ExecutionSpecSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { commandView, commandViewKey, type CommittedCommand } from "../../../core/reader/command-view.js";
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
  stdin: { ackedThrough: 0 },
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
});
