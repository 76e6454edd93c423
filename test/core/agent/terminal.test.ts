// Terminals at the agent (`rvbox run -t`, protocol 1.1): admitted only on a
// session that negotiated 1.1, and resizes carried by stdin writes.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { StdinWriteSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { TerminalSizeSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { accepts, AgentRig, argv, of, type SpecInit, stdinWrite } from "./rig.js";

const tty: SpecInit = { ...argv("bash"), stdinOpen: true, terminal: { size: { rows: 24, cols: 80 }, term: "xterm" } };

function at(minor: number): AgentRig {
  const r = new AgentRig();
  r.register();
  r.welcome(1, "sess-1", { major: 1, minor });
  r.reconcile([]);
  expect(r.st.session.phase).toBe("established");
  return r;
}

const resize = (uuid: string, seq: bigint, rows: number, cols: number, data: number[] = []) => ({
  case: "stdinWrite" as const,
  value: create(StdinWriteSchema, { issueUuid: uuid, writeSeq: seq, data: new Uint8Array(data), resize: create(TerminalSizeSchema, { rows, cols }) }),
});

describe("terminals at the agent (protocol 1.1)", () => {
  it("R-T4 R-T5 R-D4: a terminal dispatch on a session that negotiated 1.0 is refused permanently, never spawned", () => {
    const r = at(0);
    const out = r.dispatch("t1", tty);
    expect(of(out, "spawn")).toEqual([]);
    const a = accepts(out);
    expect(a).toHaveLength(1);
    expect(a[0]).toMatchObject({ accepted: false, rejection: { code: Code.UNSUPPORTED_PLATFORM } });
    expect(a[0]!.rejection!.message).toBe("a terminal needs protocol 1.1; this session negotiated 1.0");
  });

  it("R-T4 R-T5: on a 1.1 session the terminal reaches the spawn", () => {
    const r = at(1);
    r.run("t1", tty);
    const spawn = of(r.log, "spawn")[0]!;
    expect(spawn.spec.terminal).toMatchObject({ size: { rows: 24, cols: 80 }, term: "xterm" });
  });

  it("R-S1 R-T5: a resize is durable with its write and applied before its data, in write_seq order", () => {
    const r = at(1);
    r.run("t1", tty);
    const first = r.frame(resize("t1", 1n, 50, 132, [108, 115]));
    expect(
      of(first, "persist")
        .flatMap((p) => p.records)
        .find((x) => x.table === "stdin")?.value,
    ).toMatchObject({ seq: 1, resize: { rows: 50, cols: 132 } });
    expect(of(first, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "t1", seq: 1, data: new Uint8Array([108, 115]), resize: { rows: 50, cols: 132 } }]);
    // The next write carries none.
    r.step({ type: "stdin_written", uuid: "t1", seq: 1 });
    const next = of(r.frame(stdinWrite("t1", 2n, [13])), "write_stdin");
    expect(next).toHaveLength(1);
    expect(next[0]).not.toHaveProperty("resize");
  });

  it("R-T5: a resize for a command without a terminal is ignored; its data is written as usual", () => {
    const r = at(1);
    r.run("p1", { ...argv("cat"), stdinOpen: true });
    const w = of(r.frame(resize("p1", 1n, 50, 132, [65])), "write_stdin");
    expect(w).toEqual([{ type: "write_stdin", uuid: "p1", seq: 1, data: new Uint8Array([65]) }]);
  });
});
