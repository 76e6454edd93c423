// `rvbox run -i`'s stdin pump against a scripted server: whatever order its
// requests arrive in, the command's stdin gets the CLI's bytes in order, once
// each (R-S1: ordered by write_seq), and a full queue or an early end of the
// command is handled as an operator piping a file into ssh would expect.
import { create } from "@bufbuild/protobuf";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { Code as RvCode, ControlErrorSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { pumpStdin, STDIN_PIECE, STDIN_WRITES_PIPELINED, type StdinSink } from "../../shells/operator/stdin-pump.js";

const refuse = (code: RvCode, msg: string): ConnectError =>
  new ConnectError(msg, ConnectCode.Aborted, undefined, [{ desc: ControlErrorSchema, value: create(ControlErrorSchema, { code, message: msg }) }]);

interface FakeOpts {
  /** Checks chains like a current server (false: one that predates after_request_id). */
  numbered?: boolean;
  /** Delay (ms) before the server sees request n: the order requests arrive in. */
  arrival?: (n: number) => number;
  /**
   * Request n is held until request n+1 has reached the server (or 100 ms
   * passed, when n+1 never comes): n+1 overtakes it whenever the CLI has sent
   * both, however loaded the machine (a timer alone decides nothing there).
   */
  overtakenBy?: (n: number) => boolean;
  /** Refuse the first k writes for capacity. */
  capacityRefusals?: number;
  /** The command ends once this many bytes have been taken. */
  endAfterBytes?: number;
}

/** A server's stdin half: splits writes into 64 KiB write_seqs, checks chains, remembers request ids. */
function fakeServer(o: FakeOpts = {}) {
  const taken: Buffer[] = [];
  let nextSeq = 1;
  let lastRequestId = "";
  let requests = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  let maxPiece = 0;
  let closed = false;
  let ended = false;
  let capacityLeft = o.capacityRefusals ?? 0;
  const seen = new Map<string, bigint>();
  const arrivalOf = new Map<number, () => void>();
  const sink: StdinSink = {
    async write(data, requestId, after) {
      const n = requests++;
      arrivalOf.get(n - 1)?.();
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      maxPiece = Math.max(maxPiece, data.length);
      try {
        if (o.overtakenBy?.(n)) {
          let timer: NodeJS.Timeout | undefined;
          await new Promise<void>((r) => {
            arrivalOf.set(n, r);
            timer = setTimeout(r, 100);
          });
          clearTimeout(timer);
          arrivalOf.delete(n);
        }
        await new Promise((r) => setTimeout(r, o.arrival?.(n) ?? 0));
        const prior = seen.get(requestId);
        if (prior !== undefined) return { writeSeq: prior, afterChecked: o.numbered !== false && after !== undefined };
        if (ended) throw refuse(RvCode.VALIDATION, "command is already succeeded");
        if (capacityLeft > 0) {
          capacityLeft--;
          throw refuse(RvCode.CAPACITY, "stdin queue for this command is full; retry later");
        }
        if (o.numbered !== false && after !== undefined && after !== lastRequestId) throw refuse(RvCode.SEQUENCE_VIOLATION, "not chained to the last write");
        if (o.numbered === false && data.length > STDIN_PIECE) throw refuse(RvCode.PAYLOAD_TOO_LARGE, "too large");
        nextSeq += Math.max(1, Math.ceil(data.length / STDIN_PIECE));
        taken.push(Buffer.from(data));
        seen.set(requestId, BigInt(nextSeq - 1));
        lastRequestId = requestId;
        if (o.endAfterBytes !== undefined && Buffer.concat(taken).length >= o.endAfterBytes) ended = true;
        return { writeSeq: BigInt(nextSeq - 1), afterChecked: o.numbered !== false && after !== undefined };
      } finally {
        inFlight--;
      }
    },
    async close() {
      if (ended) throw refuse(RvCode.VALIDATION, "command is already succeeded");
      closed = true;
      return {};
    },
    async ended() {
      return ended;
    },
  };
  return {
    sink,
    stdin: () => Buffer.concat(taken),
    stats: () => ({ requests, maxInFlight, maxPiece, closed }),
    /** Another operator's `rvbox stdin ID …` taking the next write_seq. */
    foreignWrite(b: Buffer) {
      taken.push(b);
      nextSeq++;
      lastRequestId = "foreign";
    },
  };
}

/** Input as a file read gives it: 64 KiB reads. */
function input(bytes: number, seed = 1): Buffer[] {
  const all = Buffer.alloc(bytes);
  let x = seed;
  for (let i = 0; i < bytes; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    all[i] = x >>> 24;
  }
  const out: Buffer[] = [];
  for (let o = 0; o < bytes; o += 65536) out.push(all.subarray(o, o + 65536));
  return out;
}

describe("stdin pump", () => {
  it("R-S1: requests that reach the server out of order are resent in order: the command's stdin is the input, byte for byte", async () => {
    const data = input(6 * 1024 * 1024 + 123);
    // Every other request is overtaken by the next one.
    const srv = fakeServer({ overtakenBy: (n) => n % 2 === 0 });
    const st = await pumpStdin(Readable.from(data), srv.sink, new AbortController().signal);
    expect(srv.stdin().equals(Buffer.concat(data))).toBe(true);
    expect(srv.stats().closed).toBe(true);
    expect(st.reordered).toBeGreaterThan(0);
    expect(srv.stats().maxInFlight).toBeLessThanOrEqual(STDIN_WRITES_PIPELINED);
    expect(srv.stats().maxInFlight).toBeGreaterThan(1);
    // Large writes once the server has shown it numbers them: far fewer requests than 64 KiB reads.
    expect(st.writes).toBeLessThan(Buffer.concat(data).length / STDIN_PIECE / 4);
  });

  it("R-S1: a server that does not number writes gets one 64 KiB write at a time, in order", async () => {
    const data = input(1024 * 1024 + 5);
    const srv = fakeServer({ numbered: false, arrival: (n) => (n % 3 === 0 ? 3 : 0) });
    await pumpStdin(Readable.from(data), srv.sink, new AbortController().signal);
    expect(srv.stdin().equals(Buffer.concat(data))).toBe(true);
    expect(srv.stats()).toMatchObject({ maxInFlight: 1, closed: true });
    expect(srv.stats().maxPiece).toBeLessThanOrEqual(STDIN_PIECE);
  });

  it("R-S1: a full stdin queue at the server is waited out, not reported as an error", async () => {
    const data = input(512 * 1024);
    const srv = fakeServer({ capacityRefusals: 12 });
    const st = await pumpStdin(Readable.from(data), srv.sink, new AbortController().signal);
    expect(st.backpressured).toBe(12);
    expect(srv.stdin().equals(Buffer.concat(data))).toBe(true);
  });

  it("a command that ends before reading all of its input ends the pump quietly", async () => {
    const data = input(4 * 1024 * 1024);
    const srv = fakeServer({ endAfterBytes: 100_000 });
    const st = await pumpStdin(Readable.from(data), srv.sink, new AbortController().signal);
    expect(st.endedEarly).toBe(true);
    expect(srv.stats().closed).toBe(false);
  });

  it("R-S1: another writer's write in between turns the pump to one unchained write at a time; nothing of the input is lost or reordered", async () => {
    const data = input(3 * 1024 * 1024);
    const srv = fakeServer({ arrival: (n) => (n === 3 ? 5 : 1) });
    let fed = 0;
    async function* src() {
      for (const b of data) {
        if (fed++ === 20) srv.foreignWrite(Buffer.from("FOREIGN"));
        yield b;
        await new Promise((r) => setTimeout(r, 0));
      }
    }
    await pumpStdin(src(), srv.sink, new AbortController().signal);
    const got = srv.stdin();
    const at = got.indexOf("FOREIGN");
    expect(at).toBeGreaterThanOrEqual(0);
    expect(Buffer.concat([got.subarray(0, at), got.subarray(at + 7)]).equals(Buffer.concat(data))).toBe(true);
  });
});
