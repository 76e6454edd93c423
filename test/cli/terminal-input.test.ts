// `rvbox run -t`: the keystrokes and resizes the CLI sends, in order, one
// write at a time, each chained to the one before.
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { Code, ControlErrorSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { CONTROL_STDIN_WRITE_BYTES } from "../../core/limits.js";
import { rawLines, TERMINAL_QUEUE_MAX, TerminalInput, type WindowSize, windowSize } from "../../shells/operator/terminal.js";

interface Call {
  data: string;
  resize?: WindowSize;
  requestId: string;
  after?: string;
}

const refusal = (code: Code, connect: ConnectCode) =>
  new ConnectError("refused", connect, undefined, [{ desc: ControlErrorSchema, value: create(ControlErrorSchema, { code, message: "refused" }) }]);

/** A sink that takes each write after `gate` resolves, failing as `fail` says. */
function sink(fail: (n: number) => Error | null = () => null) {
  const calls: Call[] = [];
  let n = 0;
  const write = async (data: Uint8Array, resize: WindowSize | undefined, requestId: string, after: string | undefined) => {
    await new Promise((r) => setTimeout(r, 1));
    calls.push({ data: Buffer.from(data).toString(), ...(resize ? { resize } : {}), requestId, ...(after ? { after } : {}) });
    const e = fail(n++);
    if (e) throw e;
  };
  return { calls, write };
}

describe("terminal input (run -t)", () => {
  it("keys typed while a write is in flight go in the next one; a resize rides with the data typed after it, never before earlier keys", async () => {
    const s = sink();
    const input = new TerminalInput(s.write, new AbortController().signal);
    input.data(Buffer.from("a"));
    input.data(Buffer.from("b"));
    input.resize({ rows: 40, cols: 120 });
    input.resize({ rows: 50, cols: 132 }); // only the last of consecutive resizes matters
    input.data(Buffer.from("c"));
    await input.drained();
    expect(s.calls.map((c) => [c.data, c.resize ? `${c.resize.cols}x${c.resize.rows}` : ""])).toEqual([
      ["a", ""],
      ["b", ""],
      ["c", "132x50"],
    ]);
    // Chained: each names the request before it.
    expect(s.calls[1]!.after).toBe(s.calls[0]!.requestId);
    expect(s.calls[2]!.after).toBe(s.calls[1]!.requestId);
    expect(s.calls[0]!.after).toBeUndefined();
  });

  it("connection trouble and CAPACITY resend the same request (idempotent); another writer's write resets the chain; a final refusal stops the input", async () => {
    const s = sink((n) =>
      n === 0
        ? new ConnectError("down", ConnectCode.Unavailable)
        : n === 1
          ? refusal(Code.CAPACITY, ConnectCode.ResourceExhausted)
          : n === 3
            ? refusal(Code.SEQUENCE_VIOLATION, ConnectCode.Aborted)
            : n === 5
              ? refusal(Code.VALIDATION, ConnectCode.InvalidArgument)
              : null,
    );
    const input = new TerminalInput(s.write, new AbortController().signal);
    input.data(Buffer.from("x"));
    await input.drained();
    expect(s.calls.map((c) => c.requestId)).toEqual([s.calls[0]!.requestId, s.calls[0]!.requestId, s.calls[0]!.requestId]);
    input.data(Buffer.from("y"));
    await input.drained();
    expect(s.calls[3]!.after).toBe(s.calls[0]!.requestId);
    expect(s.calls[4]!.after).toBeUndefined(); // resent unchained after SEQUENCE_VIOLATION
    input.data(Buffer.from("z"));
    await input.drained();
    expect(input.stopped).toContain("refused");
    input.data(Buffer.from("after the end"));
    await input.drained();
    expect(s.calls.map((c) => c.data)).toEqual(["x", "x", "x", "y", "y", "z"]);
  });

  it("a read larger than one write goes in pieces; past TERMINAL_QUEUE_MAX queued the caller is told to stop reading, and to read again at half", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const sizes: number[] = [];
    const backlog: boolean[] = [];
    const input = new TerminalInput(
      async (data) => {
        await gate;
        sizes.push(data.length);
      },
      new AbortController().signal,
      (full) => backlog.push(full),
    );
    input.data(new Uint8Array(TERMINAL_QUEUE_MAX + CONTROL_STDIN_WRITE_BYTES + 1));
    expect(backlog).toEqual([true]);
    release();
    await input.drained();
    expect(Math.max(...sizes)).toBe(CONTROL_STDIN_WRITE_BYTES);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(TERMINAL_QUEUE_MAX + CONTROL_STDIN_WRITE_BYTES + 1);
    expect(backlog).toEqual([true, false]);
  });

  it("the window size comes from the first terminal among the streams, else 80x24; raw-mode text returns the carriage", () => {
    const pipe = { isTTY: false } as unknown as NodeJS.WritableStream;
    const tty = { isTTY: true, columns: 132, rows: 50 } as unknown as NodeJS.WritableStream;
    expect(windowSize([pipe, tty])).toEqual({ rows: 50, cols: 132 });
    expect(windowSize([pipe])).toEqual({ rows: 24, cols: 80 });
    expect(rawLines("a\nb\r\nc")).toBe("a\r\nb\r\nc");
  });
});
