import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import type { WebSocket } from "ws";
import { ConnWriter, execTransportEffect } from "../../../shells/runtime/conn-writer.js";
import { createLogger } from "../../../shells/runtime/log.js";
import { NodeLoop, type Staged } from "../../../shells/runtime/node-loop.js";

type In = { t: string; conn?: number; n?: number };

function loop(limits = { maxBytes: 100, maxCount: 4 }) {
  const seen: In[] = [];
  const l = new NodeLoop<In>(
    {
      step: (i) => seen.push(i),
      staged: (conn, item: Staged) =>
        item.kind === "frame" ? { t: "frame", conn, n: item.data[0] } : item.kind === "open" ? { t: "open", conn } : { t: "closed", conn },
      ingressFull: (conn) => ({ t: "full", conn }),
      durable: (n) => ({ t: "durable", n }),
      tick: () => ({ t: "tick" }),
      onError: (e) => {
        throw e;
      },
    },
    limits,
  );
  return { l, seen };
}
const flush = () => new Promise((r) => setImmediate(() => setImmediate(r)));

describe("shell runtime: worker loop and staging queues", () => {
  it("R-W1 R-W5: the socket handler only stages; a full queue is reported once as ingress_full and later frames are dropped", async () => {
    const { l, seen } = loop({ maxBytes: 1000, maxCount: 3 });
    l.openStaging(1);
    expect(l.stage(1, new Uint8Array([1]), true)).toBe(true);
    expect(l.stage(1, new Uint8Array([2]), true)).toBe(true);
    expect(l.stage(1, new Uint8Array([3]), true)).toBe(true);
    expect(seen).toEqual([]); // nothing ran inside the "socket handler"
    expect(l.stage(1, new Uint8Array([4]), true)).toBe(false);
    expect(l.stage(1, new Uint8Array([5]), true)).toBe(false);
    await flush();
    expect(seen.filter((i) => i.t === "full")).toEqual([{ t: "full", conn: 1 }]);
    expect(seen.filter((i) => i.t === "open")).toEqual([{ t: "open", conn: 1 }]);
    expect(seen.filter((i) => i.t === "frame").map((i) => i.n)).toEqual([1, 2, 3]);
    // Byte bound too (each frame also costs its 64-byte overhead).
    const b = loop({ maxBytes: 200, maxCount: 100 });
    b.l.openStaging(2);
    expect(b.l.stage(2, new Uint8Array(60), true)).toBe(true);
    expect(b.l.stage(2, new Uint8Array(60), true)).toBe(false);
  });

  it("R-W8: connections are served round-robin, internal inputs interleave, durability reports coalesce, a close comes after the frames before it", async () => {
    const { l, seen } = loop({ maxBytes: 1000, maxCount: 100 });
    l.openStaging(1);
    l.openStaging(2);
    for (let i = 0; i < 5; i++) l.stage(1, new Uint8Array([10 + i]), true);
    l.stage(2, new Uint8Array([20]), true);
    l.stageClosed(2, "bye");
    l.feedDurable(3);
    l.feedDurable(7);
    l.feed({ t: "x" });
    await flush();
    expect(seen.filter((i) => i.t === "durable")).toEqual([{ t: "durable", n: 7 }]);
    const order = seen.filter((i) => i.t !== "durable" && i.t !== "x").map((i) => `${i.conn}:${i.t === "frame" ? i.n : i.t}`);
    // Each connection's open, frames and close stay in order; connections alternate.
    expect(order).toEqual(["1:open", "2:open", "1:10", "2:20", "1:11", "2:closed", "1:12", "1:13", "1:14"]);
  });

  it("wake: one timer for the latest wake; now() never goes backwards", async () => {
    const { l, seen } = loop();
    l.setWake(l.now() + 10_000);
    l.setWake(l.now() + 5);
    await new Promise((r) => setTimeout(r, 40));
    expect(seen.filter((i) => i.t === "tick").length).toBe(1);
    const a = l.now();
    expect(l.now()).toBeGreaterThanOrEqual(a);
    l.stop();
  });
});

class FakeWs extends EventEmitter {
  OPEN = 1;
  readyState = 1;
  bufferedAmount = 0;
  sent: Array<{ data: Uint8Array; cb: () => void }> = [];
  closed: { code: number; reason: string } | null = null;
  terminated = false;
  pings = 0;
  send(data: Uint8Array, _opts: unknown, cb: () => void) {
    this.sent.push({ data, cb });
  }
  ping() {
    this.pings++;
  }
  close(code: number, reason: string) {
    this.closed = { code, reason };
  }
  terminate() {
    this.terminated = true;
  }
}

describe("shell runtime: connection writer", () => {
  it("R-W4 R-H3: priority frames go out at once, ahead of queued data; data is held back above the in-flight bound", () => {
    const ws = new FakeWs();
    const w = new ConnWriter(ws as unknown as WebSocket, { maxInFlight: 100, maxQueuedBytes: 10_000, deadlineBytes: 50, writeDeadlineMs: 1000 });
    for (let i = 0; i < 5; i++) w.send(new Uint8Array(60).fill(i), "data");
    // Only the first two data frames are handed to the socket (60 < 100, 120 >= 100).
    expect(ws.sent.map((s) => s.data[0])).toEqual([0, 1]);
    w.send(new Uint8Array([99]), "priority");
    expect(ws.sent.map((s) => s.data[0])).toEqual([0, 1, 99]);
    w.ping();
    expect(ws.pings).toBe(1);
    // As the socket flushes, queued data follows.
    ws.sent[0]!.cb();
    ws.sent[1]!.cb();
    expect(ws.sent.map((s) => s.data[0])).toEqual([0, 1, 99, 2, 3]);
  });

  it("R-W4: close flushes nothing more from the data lane; a stalled peer past the write deadline is terminated; an unbounded queue is terminated", () => {
    const ws = new FakeWs();
    const w = new ConnWriter(ws as unknown as WebSocket, { maxInFlight: 10, maxQueuedBytes: 1000, deadlineBytes: 50, writeDeadlineMs: 1000 });
    w.send(new Uint8Array(20), "data");
    w.send(new Uint8Array(20), "data");
    w.close("CODE_PROTOCOL_ERROR: bad");
    expect(ws.closed?.code).toBe(4000);
    ws.sent[0]!.cb();
    expect(ws.sent.length).toBe(1);

    const ws2 = new FakeWs();
    const why: string[] = [];
    const w2 = new ConnWriter(ws2 as unknown as WebSocket, { maxInFlight: 10, maxQueuedBytes: 1000, deadlineBytes: 50, writeDeadlineMs: 1000 }, (s) =>
      why.push(s),
    );
    ws2.bufferedAmount = 500;
    w2.checkDeadline(10_000);
    w2.checkDeadline(10_500);
    expect(ws2.terminated).toBe(false);
    w2.checkDeadline(11_001);
    expect(ws2.terminated).toBe(true);
    expect(why[0]).toMatch(/write deadline/);

    const ws3 = new FakeWs();
    const w3 = new ConnWriter(ws3 as unknown as WebSocket, { maxInFlight: 10, maxQueuedBytes: 100, deadlineBytes: 50, writeDeadlineMs: 1000 });
    for (let i = 0; i < 10; i++) w3.send(new Uint8Array(30), "data");
    expect(ws3.terminated).toBe(true);
  });
});

describe("shell runtime: transport effects (shared by both daemons)", () => {
  it("R-W4: send, ping and close go to the connection's writer; a connection already gone is a no-op; wake re-arms the timer", () => {
    const calls: string[] = [];
    const writer = {
      send: (data: Uint8Array, lane: string) => calls.push(`send ${lane} ${data.length}`),
      ping: () => calls.push("ping"),
      close: (reason: string) => calls.push(`close ${reason}`),
    } as unknown as ConnWriter;
    const writerOf = (conn: number) => (conn === 1 ? writer : undefined);
    const wakes: number[] = [];
    const lines: string[] = [];
    const log = createLogger("t", "info", (l) => lines.push(l));
    const run = (e: Parameters<typeof execTransportEffect>[0]) => execTransportEffect(e, writerOf, (at) => wakes.push(at), log, "closing session");

    expect(run({ type: "send", conn: 1, lane: "data", data: new Uint8Array(3), kind: "clientHello" })).toBe(true);
    expect(run({ type: "send", conn: 2, lane: "priority", data: new Uint8Array(5), kind: "clientHello" })).toBe(false);
    expect(run({ type: "ping", conn: 1 })).toBe(false);
    expect(run({ type: "ping", conn: 2 })).toBe(false);
    expect(run({ type: "close", conn: 2, reason: "gone" })).toBe(false);
    expect(run({ type: "close", conn: 1, reason: "fenced" })).toBe(false);
    expect(run({ type: "wake", at: 1234 })).toBe(false);

    expect(calls).toEqual(["send data 3", "ping", "close fenced"]);
    expect(wakes).toEqual([1234]);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/closing session conn=1 reason="fenced"/);
  });
});
