// Terminals (`rvbox run -t`, protocol 1.1): negotiation, the refusal of a
// terminal to an older agent, and the resizes that ride on stdin writes.
import { describe, expect, it } from "vitest";
import type { CommandDispatch, StdinWrite } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { PROTOCOL_1_0, rangeToWire, SUPPORTED_PROTOCOL } from "../../../core/codec/version.js";
import { Code } from "../../../core/errors.js";
import { MAX_TERMINAL_CELLS } from "../../../core/limits.js";
import { argv, enc, ServerRig, type SpecInit } from "../../support/server-rig.js";

const tty = (rows = 24, cols = 80): SpecInit => ({ ...argv("bash"), stdinOpen: true, terminal: { size: { rows, cols }, term: "xterm-256color" } });
const old = { supportedProtocol: rangeToWire(PROTOCOL_1_0) };
const dispatches = (r: ServerRig, conn?: number) => r.sent(r.log, conn, "commandDispatch").map((s) => s.env.payload.value as CommandDispatch);
const writes = (r: ServerRig, conn?: number) => r.sent(r.log, conn, "stdinWrite").map((s) => s.env.payload.value as StdinWrite);

describe("terminals (protocol 1.1)", () => {
  it("R-T4: this build speaks 1.0 to 1.1; a 1.1 agent gets 1.1 and a 1.0 agent 1.0", () => {
    expect(SUPPORTED_PROTOCOL).toEqual({ min: { major: 1, minor: 0 }, max: { major: 1, minor: 1 } });
    const r = new ServerRig();
    const a = r.connect("a");
    const b = r.connect("b", "inst-b", old);
    expect(r.st.conns.get(a)!.version).toEqual({ major: 1, minor: 1 }); // internal: the negotiated version the gate reads
    expect(r.st.conns.get(b)!.version).toEqual({ major: 1, minor: 0 });
  });

  it("R-T4 R-T5: a terminal command to a 1.1 session is dispatched with its terminal", () => {
    const r = new ServerRig();
    const c = r.connect();
    expect(r.submit("a", "t1", tty(40, 120))).toMatchObject({ ok: true });
    const d = dispatches(r, c);
    expect(d).toHaveLength(1);
    expect(d[0]!.spec!.terminal).toMatchObject({ size: { rows: 40, cols: 120 }, term: "xterm-256color" });
  });

  it("R-T4 R-T5: a terminal submit for a client connected at 1.0 is refused INCOMPATIBLE_VERSION with the reason; a plain one runs", () => {
    const r = new ServerRig();
    const c = r.connect("a", "inst-a", old);
    const res = r.submit("a", "t1", tty());
    expect(res).toMatchObject({ ok: false, error: { code: Code.INCOMPATIBLE_VERSION } });
    expect(JSON.stringify(res)).toContain("speaks protocol 1.0; a terminal (rvbox run -t) needs 1.1");
    expect(r.findCommand("t1")).toBeUndefined();
    expect(r.submit("a", "p1", { ...argv("true"), stdinOpen: true })).toMatchObject({ ok: true });
    expect(dispatches(r, c).map((d) => d.issueUuid)).toEqual(["p1"]);
  });

  it("R-T4 R-T5 R-D4: a terminal command queued while its client was away ends rejected when it meets a 1.0 session, never dispatched", () => {
    const r = new ServerRig();
    const gone = r.connect("a");
    r.step({ type: "conn_closed", conn: gone, reason: "test" });
    expect(r.submit("a", "t1", tty())).toMatchObject({ ok: true });
    r.submit("a", "p1");
    const c = r.connect("a", "inst-a", old);
    expect(dispatches(r, c).map((d) => d.issueUuid)).toEqual(["p1"]);
    const t1 = r.command("t1");
    expect(t1.state).toBe("rejected");
    expect(t1.reason).toContain("INCOMPATIBLE_VERSION: the agent of a speaks protocol 1.0; a terminal (rvbox run -t) needs 1.1");
    expect(t1.reason).toContain("never runs without its terminal");
  });

  it("R-S1 R-T5: a resize rides on a stdin write, in write_seq order with the keystrokes", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "t1", tty());
    expect(r.control({ op: "stdin", requestId: "w1", uuid: "t1", data: enc("ls"), appendNewline: false })).toMatchObject({ ok: true, writeSeq: 1 });
    expect(
      r.control({ op: "stdin", requestId: "w2", uuid: "t1", data: new Uint8Array(0), appendNewline: false, resize: { rows: 50, cols: 132 } }),
    ).toMatchObject({
      ok: true,
      writeSeq: 2,
    });
    expect(r.control({ op: "stdin", requestId: "w3", uuid: "t1", data: enc("\r"), appendNewline: false })).toMatchObject({ ok: true, writeSeq: 3 });
    r.flush();
    const w = writes(r, c);
    expect(w.map((x) => [Number(x.writeSeq), x.resize ? `${x.resize.cols}x${x.resize.rows}` : ""])).toEqual([
      [1, ""],
      [2, "132x50"],
      [3, ""],
    ]);
  });

  it("R-T5: a resize is refused for a command without a terminal, and outside 1..MAX_TERMINAL_CELLS", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "p1", { ...argv("cat"), stdinOpen: true });
    r.submit("a", "t1", tty());
    r.accept(c, "p1");
    r.accept(c, "t1");
    const resize = (uuid: string, rows: number, cols: number) =>
      r.control({ op: "stdin", requestId: `r-${uuid}-${rows}-${cols}`, uuid, data: new Uint8Array(0), appendNewline: false, resize: { rows, cols } });
    expect(resize("p1", 24, 80)).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: expect.stringContaining("no terminal") } });
    expect(resize("t1", 0, 80)).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(resize("t1", 24, MAX_TERMINAL_CELLS + 1)).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(resize("t1", MAX_TERMINAL_CELLS, 1)).toMatchObject({ ok: true });
  });

  it("R-D4: a terminal needs open stdin and a size within bounds (refused at submit)", () => {
    const r = new ServerRig();
    r.connect();
    expect(r.submit("a", "t1", { ...tty(), stdinOpen: false })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: expect.stringContaining("open stdin") },
    });
    expect(r.submit("a", "t2", tty(0, 80))).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(r.submit("a", "t3", { ...tty(), terminal: { size: { rows: 24, cols: 80 }, term: "x term" } })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION },
    });
  });
});
