// Unit tests of the simulator's own machinery: if the world lies, every
// oracle above it is worthless.
import { describe, expect, it } from "vitest";
import { decompress } from "fzstd";
import { EventQueue } from "../../sim/event-queue.js";
import { SimDisk } from "../../sim/disk.js";
import { Network, type AgentEnd, type Link } from "../../sim/network.js";
import { Rng } from "../../sim/rng.js";
import { checkZstdFrame, decodeRawZstdFrame, encodeRawZstdFrame } from "../../sim/zstd-raw.js";
import { rawField } from "../../sim/wire.js";

describe("sim infrastructure", () => {
  it("event queue: time order, ties in insertion order, cancellation", () => {
    const q = new EventQueue();
    const out: string[] = [];
    q.schedule(5, () => out.push("b"));
    q.schedule(1, () => out.push("a"));
    q.schedule(5, () => out.push("c"));
    const x = q.schedule(3, () => out.push("x"));
    x.cancelled = true;
    for (let e = q.pop(); e; e = q.pop()) e.run();
    expect(out).toEqual(["a", "b", "c"]);
    expect(q.now).toBe(5);
  });

  it("rng: forks are independent and reproducible", () => {
    const a = new Rng(7).fork("net");
    const b = new Rng(7).fork("net");
    const c = new Rng(7).fork("disk");
    const xs = [a.u32(), a.u32(), a.u32()];
    expect([b.u32(), b.u32(), b.u32()]).toEqual(xs);
    expect([c.u32(), c.u32(), c.u32()]).not.toEqual(xs);
  });

  it("disk: batches become durable in order; a crash loses the unsynced ones whole; values are frozen in, copied out", () => {
    const d = new SimDisk();
    const v = { n: 1, b: new Uint8Array([1, 2]) };
    d.append(1, [{ table: "t", key: "a", value: v }], 0, 10);
    d.append(
      2,
      [
        { table: "t", key: "b", value: 2 },
        { table: "t", key: "a", value: null },
      ],
      0,
      5,
    );
    // The appended value is frozen (a write into it throws), bytes excepted.
    expect(() => {
      v.n = 99;
    }).toThrow(TypeError);
    expect(v.n).toBe(1);
    expect(d.sync(9).map((b) => b.id)).toEqual([]);
    expect(d.sync(10).map((b) => b.id)).toEqual([1, 2]); // group commit keeps order
    expect(d.get("t", "a")).toBeUndefined();
    d.append(3, [{ table: "t", key: "c", value: { n: 1, b: v.b } }], 20, 5);
    expect(d.crash()).toBe(1);
    expect(d.sync(100)).toEqual([]);
    expect(d.get("t", "c")).toBeUndefined();
    // Objects are shared and frozen on the way in and copied on the way out.
    const d2 = new SimDisk();
    const rec = { n: 1, nested: { m: 2 } };
    d2.append(1, [{ table: "t", key: "a", value: rec }], 0, 0);
    expect(() => {
      rec.nested.m = 3;
    }).toThrow(TypeError);
    d2.sync(0);
    const snap = d2.snapshot().get("t")!.get("a") as { n: number; nested: { m: number } };
    snap.n = 42;
    snap.nested.m = 43;
    expect(d2.get("t", "a")).toEqual({ n: 1, nested: { m: 2 } });
  });

  it("zstd raw frames: valid for fzstd, checked against their declared size, never throwing", () => {
    for (const n of [0, 1, 255, 256, 65535, 65536, 65792, 300_000]) {
      const raw = new Rng(n).bytes(n);
      const f = encodeRawZstdFrame(raw);
      expect(Buffer.from(decompress(f)).equals(Buffer.from(raw))).toBe(true);
      expect(checkZstdFrame(f, n, 1 << 20)).toEqual({ ok: true, size: n });
      expect(checkZstdFrame(f, n + 1, 1 << 20).ok).toBe(false);
      expect(Buffer.from(decodeRawZstdFrame(f)!).equals(Buffer.from(raw))).toBe(true);
    }
    const r = new Rng(1);
    for (let i = 0; i < 2000; i++) {
      const junk = r.bytes(r.int(40));
      if (r.chance(0.5) && junk.length > 4) junk.set([0x28, 0xb5, 0x2f, 0xfd]);
      expect(() => checkZstdFrame(junk, r.int(100))).not.toThrow();
    }
    expect(checkZstdFrame(encodeRawZstdFrame(new Uint8Array(70_000)), 70_000).ok).toBe(false); // over 64 KiB
  });

  it("wire: rawField extracts a sub-message's exact bytes", () => {
    // field 7, length 3: 0x3a 0x03 a b c; preceded by field 1 (string "x") and field 2 (varint 300)
    const b = new Uint8Array([0x0a, 0x01, 0x78, 0x10, 0xac, 0x02, 0x3a, 0x03, 1, 2, 3]);
    expect([...rawField(b, 7)!]).toEqual([1, 2, 3]);
    expect(rawField(b, 9)).toBeNull();
  });

  describe("network", () => {
    function setup() {
      const q = new EventQueue();
      const log: string[] = [];
      let serverUp = true;
      const agent: AgentEnd = { name: "a", inc: 0, up: true, partitioned: false };
      let id = 0;
      const net = new Network(
        q,
        new Rng(1),
        { latencyMin: 10, latencyMax: 10, bandwidthMin: 1, bandwidthMax: 1, connectTimeout: 1000 },
        {
          serverUp: () => serverUp,
          serverInc: () => 0,
          newConnId: () => ++id,
          toServer: (l, i) => log.push(`S ${l.id} ${i.type}${i.type === "frame" ? ` ${i.data[0]}` : ""}`),
          toAgent: (l, i) => log.push(`A ${l.agentConn} ${i.type}${i.type === "frame" ? ` ${i.data[0]}` : ""}`),
          connectFailed: (_a, conn, _inc, reason) => log.push(`A ${conn} failed ${reason}`),
        },
      );
      const run = (until: number): void => {
        for (let t = q.peekTime(); t !== null && t <= until; t = q.peekTime()) q.pop()!.run();
      };
      return { q, net, log, agent, run, setServerUp: (v: boolean) => (serverUp = v) };
    }

    it("connects, delivers in order with latency and bandwidth, closes gracefully behind the data", () => {
      const { net, log, agent, run } = setup();
      net.connect(agent, 1);
      run(100);
      expect(log).toEqual(["S 1 conn_open", "A 1 transport_open"]);
      const link = net.linkOf(agent, 1)!;
      net.send(link, "agent", new Uint8Array(50).fill(1)); // 50 ms on the wire
      net.send(link, "agent", new Uint8Array(1).fill(2));
      net.close(link, "agent", "bye");
      run(1000);
      expect(log.slice(2)).toEqual(["S 1 frame 1", "S 1 frame 2", "S 1 conn_closed"]);
    });

    it("a break loses in-flight frames and tells both ends; half-open drops silently; a partition holds frames until the heal", () => {
      const { net, log, agent, run, q } = setup();
      net.connect(agent, 1);
      run(100);
      let link: Link = net.linkOf(agent, 1)!;
      net.send(link, "agent", new Uint8Array([7]));
      net.breakLink(link);
      run(1000);
      expect(log.filter((l) => l.includes("frame"))).toEqual([]);
      expect(log).toContain("S 1 conn_closed");
      expect(log).toContain("A 1 transport_closed");
      log.length = 0;
      net.connect(agent, 2);
      run(2000);
      link = net.linkOf(agent, 2)!;
      net.halfOpen(link, ["a2s"]);
      net.send(link, "agent", new Uint8Array([8]));
      net.send(link, "server", new Uint8Array([9]));
      run(3000);
      expect(log.filter((l) => l.includes("frame"))).toEqual(["A 2 frame 9"]);
      log.length = 0;
      net.connect(agent, 3);
      run(4000);
      link = net.linkOf(agent, 3)!;
      net.stall(link);
      net.send(link, "agent", new Uint8Array([1]));
      net.send(link, "agent", new Uint8Array([2]));
      run(9000);
      expect(log.filter((l) => l.includes("frame"))).toEqual([]);
      net.unstall(link);
      net.send(link, "agent", new Uint8Array([3]));
      run(q.now + 1000);
      expect(log.filter((l) => l.includes("frame"))).toEqual(["S 3 frame 1", "S 3 frame 2", "S 3 frame 3"]);
    });

    it("a connect to a server that is down is refused; a partitioned connect times out", () => {
      const { net, log, agent, run, setServerUp } = setup();
      setServerUp(false);
      net.connect(agent, 1);
      run(100);
      expect(log).toEqual(["A 1 failed connection refused"]);
      setServerUp(true);
      agent.partitioned = true;
      net.connect(agent, 2);
      run(2000);
      expect(log[1]).toBe("A 2 failed connect timed out");
    });
  });
});
