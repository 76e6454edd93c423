// A TCP proxy for link faults, used by the end-to-end tests and by the real
// chaos run (scripts/chaos.ts): forwards to a target port, can cut every
// connection, stall (stop reading both ways) and resume, and decodes the
// agent->server WebSocket frames it forwards (masked client frames), so tests
// can check that resent events are byte-identical. `{ tap: false }` forwards
// only (no decoding, nothing kept); `{ onEvent }` decodes and hands each
// CommandEvent to the caller instead of keeping it (for long runs).
import * as net from "node:net";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { AgentEnvelopeSchema, type AgentEnvelope } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandEventSchema } from "../../protos/gen/rvbox/v1/common_pb.js";

class WsTap {
  private buf: Buffer = Buffer.alloc(0);
  private headersDone = false;
  private frag: Buffer[] = [];
  constructor(
    private readonly onMessage: (data: Buffer) => void,
    private readonly onControl: (opcode: number) => void = () => {},
  ) {}

  push(chunk: Buffer): void {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    if (!this.headersDone) {
      const i = this.buf.indexOf("\r\n\r\n");
      if (i < 0) return;
      this.buf = this.buf.subarray(i + 4);
      this.headersDone = true;
    }
    for (;;) {
      if (this.buf.length < 2) return;
      const b0 = this.buf[0]!;
      const b1 = this.buf[1]!;
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      const maskOff = off;
      if (masked) off += 4;
      if (this.buf.length < off + len) return;
      const payload = Buffer.from(this.buf.subarray(off, off + len));
      if (masked) for (let i = 0; i < payload.length; i++) payload[i]! ^= this.buf[maskOff + (i % 4)]!;
      this.buf = this.buf.subarray(off + len);
      const opcode = b0 & 0x0f;
      const fin = (b0 & 0x80) !== 0;
      if (opcode >= 0x8) this.onControl(opcode);
      if (opcode === 0x2 || opcode === 0x0) {
        this.frag.push(payload);
        if (fin) {
          this.onMessage(Buffer.concat(this.frag));
          this.frag = [];
        }
      }
    }
  }
}

export interface SeenEvent {
  uuid: string;
  seq: number;
  bytes: Buffer;
}

export class TcpProxy {
  private server: net.Server;
  private pairs = new Set<{ a: net.Socket; b: net.Socket }>();
  private stalled = false;
  private downStalled = false;
  private blackhole = false;
  port = 0;
  connections = 0;
  cuts = 0;
  /** Every CommandEvent the agent sent, in order, including resends. */
  readonly events: SeenEvent[] = [];
  readonly envelopes: AgentEnvelope[] = [];
  /** WebSocket Pings the agent sent (time seen). */
  readonly pings: number[] = [];
  private upStalled = false;

  constructor(
    private readonly targetPort: number,
    private readonly targetHost = "127.0.0.1",
    private readonly opts: { tap?: boolean; onEvent?: (e: SeenEvent) => void } = {},
  ) {
    this.server = net.createServer((a) => this.accept(a));
  }

  async start(port = 0): Promise<number> {
    await new Promise<void>((r) => this.server.listen(port, "127.0.0.1", () => r()));
    this.port = (this.server.address() as net.AddressInfo).port;
    return this.port;
  }

  setTarget(port: number): void {
    (this as unknown as { targetPort: number }).targetPort = port;
  }

  private accept(a: net.Socket): void {
    this.connections++;
    const b = net.connect(this.targetPort, this.targetHost);
    const pair = { a, b };
    this.pairs.add(pair);
    const tap = new WsTap(
      (msg) => {
        try {
          const env = fromBinary(AgentEnvelopeSchema, msg);
          const onEvent = this.opts.onEvent;
          if (!onEvent) this.envelopes.push(env);
          if (env.payload.case === "commandEvent") {
            const ev = env.payload.value;
            const seen = { uuid: ev.issueUuid, seq: Number(ev.eventSeq), bytes: Buffer.from(toBinary(CommandEventSchema, ev)) };
            if (onEvent) onEvent(seen);
            else this.events.push(seen);
          }
        } catch {
          // not an envelope (tests of malformed frames)
        }
      },
      (op) => {
        if (op === 0x9) this.pings.push(Date.now());
      },
    );
    const tapOn = this.opts.tap !== false;
    a.on("data", (d: Buffer) => {
      if (tapOn) tap.push(d);
      if (this.blackhole) return;
      if (!b.write(d)) a.pause();
    });
    b.on("data", (d: Buffer) => {
      if (!a.write(d)) b.pause();
    });
    a.on("drain", () => !this.stalled && !this.downStalled && b.resume());
    b.on("drain", () => !this.stalled && !this.upStalled && a.resume());
    const end = (): void => {
      this.pairs.delete(pair);
      a.destroy();
      b.destroy();
    };
    a.on("error", end);
    b.on("error", end);
    a.on("close", end);
    b.on("close", end);
    if (this.stalled) {
      a.pause();
      b.pause();
    }
    if (this.downStalled) b.pause();
    if (this.upStalled) a.pause();
  }

  /** Hold agent->server traffic only (the server hears nothing). */
  stallUpstream(): void {
    this.upStalled = true;
    for (const p of this.pairs) p.a.pause();
  }

  /** Read agent->server bytes (the tap sees them) but never deliver them: events "lost in the network". */
  blackholeUpstream(): void {
    this.blackhole = true;
  }

  /** Hold server->agent traffic only (acks do not arrive; agent->server still flows). */
  stallDownstream(): void {
    this.downStalled = true;
    for (const p of this.pairs) p.b.pause();
  }

  get activeConnections(): number {
    return this.pairs.size;
  }

  /** Destroy every proxied connection (both sides), like a network cut. */
  cutAll(): void {
    for (const p of [...this.pairs]) {
      this.cuts++;
      p.a.destroy();
      p.b.destroy();
    }
    this.pairs.clear();
  }

  /** Stop forwarding in both directions (TCP backpressure; nothing is lost). */
  stall(): void {
    this.stalled = true;
    for (const p of this.pairs) {
      p.a.pause();
      p.b.pause();
    }
  }

  resume(): void {
    this.stalled = false;
    this.downStalled = false;
    this.upStalled = false;
    this.blackhole = false;
    for (const p of this.pairs) {
      p.a.resume();
      p.b.resume();
    }
  }

  /** Events seen more than once must have identical bytes (R-O2). Returns how many resends were seen. */
  checkIdenticalResends(): number {
    const first = new Map<string, Buffer>();
    let resends = 0;
    for (const e of this.events) {
      const k = `${e.uuid}/${e.seq}`;
      const prev = first.get(k);
      if (!prev) first.set(k, e.bytes);
      else {
        resends++;
        if (!prev.equals(e.bytes)) throw new Error(`event ${k} resent with different bytes`);
      }
    }
    return resends;
  }

  async close(): Promise<void> {
    this.cutAll();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}
