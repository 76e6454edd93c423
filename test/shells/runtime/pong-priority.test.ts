/**
 * R-H3 on real sockets: a Pong never waits behind command traffic. The
 * agent's writer (ConnWriter) holds command data back once `maxInFlight`
 * bytes are handed to the socket; ws answers a Ping itself, straight to the
 * socket. So while the peer is not reading and megabytes of output wait in
 * the writer, the Pong to the peer's Ping arrives after at most what the
 * kernel buffers and the in-flight bound hold, not after the backlog.
 */
import { once } from "node:events";
import type { Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket, WebSocketServer } from "ws";
import { ConnWriter } from "../../../shells/runtime/conn-writer.js";

const FRAME = 128 * 1024;
const FRAMES = 400; // 50 MiB queued: far more than loopback's socket buffers hold
const IN_FLIGHT = 256 * 1024;

let cleanup: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanup) c();
  cleanup = [];
});

async function until(what: string, ok: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("R-H3: a Pong goes out while command data is backpressured", () => {
  it("R-H3 R-W4: with 50 MiB of data held back by a peer that does not read, the Pong to its Ping arrives ahead of the backlog; the data follows, all of it", async () => {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false, maxPayload: 2 * FRAME });
    cleanup.push(() => wss.close());
    await once(wss, "listening");
    const port = (wss.address() as { port: number }).port;
    const accepted = once(wss, "connection");
    const agent = new WebSocket(`ws://127.0.0.1:${port}`, { perMessageDeflate: false });
    cleanup.push(() => agent.terminate());
    await once(agent, "open");
    const [peer] = (await accepted) as [WebSocket];
    const peerSocket = (peer as unknown as { _socket: Socket })._socket;

    let dataBytes = 0;
    let frames = 0;
    let bytesBeforePong = -1;
    peer.on("message", (d: Buffer) => {
      dataBytes += d.length;
      frames++;
    });
    peer.on("pong", () => {
      bytesBeforePong = dataBytes;
    });

    // The peer stops reading; the agent queues its command output.
    peerSocket.pause();
    const w = new ConnWriter(agent, { maxInFlight: IN_FLIGHT, maxQueuedBytes: 64 * 1024 * 1024, deadlineBytes: 64 * 1024 * 1024, writeDeadlineMs: 60_000 });
    for (let i = 0; i < FRAMES; i++) w.send(new Uint8Array(FRAME).fill(i & 0xff), "data");
    // Backpressured: the kernel's buffers are full and ws holds bytes it cannot write.
    await until("the agent's socket to back up", () => agent.bufferedAmount > 0);

    peer.ping();
    peerSocket.resume();
    await until("the pong", () => bytesBeforePong >= 0);
    await until("all the data", () => frames === FRAMES, 60_000);

    expect(dataBytes).toBe(FRAME * FRAMES);
    // Ahead of the backlog: at most the kernel's buffers plus the in-flight bound came first, well under half of it.
    expect(bytesBeforePong).toBeLessThan((FRAME * FRAMES) / 2);
  }, 90_000);
});
