import fc from "fast-check";
import { runs } from "../../support/runs.js";
import { describe, expect, it } from "vitest";
import { Harness, Disk } from "../../support/harness.js";
import { testPorts } from "../../support/ports.js";
import { Code } from "../../../core/errors.js";
import { defaultAgentConfig, defaultServerConfig, restoreAgent, type AgentLimits } from "../../../core/index.js";
import {
  admit,
  acknowledge,
  appendMeta,
  appendOutput,
  newCommandOutbox,
  newOutbox,
  outboxHeader,
  outboxInvariants,
  type Outbox,
} from "../../../core/window/outbox.js";
import type { PersistRecord } from "../../../core/effects.js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { CommandEventSchema, SignalResultSchema, TruncationCause, type CommandEvent } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { encodeRawZstdFrame } from "../../../shells/zstd/frame-header.js";

const KiB = 1024;
const MiB = 1024 * KiB;
const text = (n: number, c = "x") => new TextEncoder().encode(c.repeat(n));
const events = (h: Harness, uuid?: string) =>
  h.wire
    .filter((w) => w.env.payload.case === "commandEvent")
    .map((w) => w.env.payload.value as { issueUuid: string; eventSeq: bigint; event: { case: string; value: unknown } })
    .filter((e) => !uuid || e.issueUuid === uuid);

function limits(over: Partial<AgentLimits> = {}): AgentLimits {
  return { ...defaultAgentConfig("x").limits, ...over };
}

/** What a follower of the command is shown of one stream: bytes shown, bytes covered by markers, the text. */
function serverStream(h: Harness, uuid: string, stream: "stdout" | "stderr"): { bytes: number; covered: number; text: string } {
  const f = h.outputOf(uuid);
  expect(f.gaps, "every byte is shown or covered by a marker").toBe(0);
  let bytes = 0;
  let covered = 0;
  for (const it of f.items) {
    if (it.kind === "output" && it.stream === stream) {
      expect(it.offset).toBe(bytes + covered);
      bytes += it.data.length;
    } else if (it.kind === "truncation") {
      for (const r of it.ranges) {
        if (r.stream !== stream) continue;
        expect(r.offset).toBe(bytes + covered);
        covered += r.length;
      }
    }
  }
  return { bytes, covered, text: f[stream] };
}

describe("output events", () => {
  it("R-O1: entries get a durable local order; event_seq is assigned durably on admission and increases by one", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.autoDurable = false;
    const before = events(h, "c1").length;
    h.output("a", "c1", "first");
    h.output("a", "c1", "second", "stderr");
    // Nothing leaves before the agent's persist (entry + pinned event) is durable.
    expect(events(h, "c1").length).toBe(before);
    const persisted = h.agents.get("a")!.disk.pending.flatMap((p) => p.records);
    expect(persisted.some((r) => r.table === "entry")).toBe(true);
    expect(persisted.filter((r) => r.table === "event" && r.value !== null).map((r) => (r.value as { seq: number }).seq)).toEqual([2, 3]);
    h.flush("a");
    h.flush("server");
    expect(events(h, "c1").map((e) => Number(e.eventSeq))).toEqual([1, 2, 3]);
  });

  it("R-O2: any interleaving of appends, admissions, acks and restarts keeps every assigned event_seq bound to the same bytes", () => {
    type Op = { k: "out"; n: number; c: number } | { k: "meta"; c: number } | { k: "admit" } | { k: "ack"; c: number; back: number } | { k: "restart" };
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ k: fc.constant("out" as const), n: fc.integer({ min: 1, max: 70 * KiB }), c: fc.integer({ min: 0, max: 2 }) }),
      fc.record({ k: fc.constant("meta" as const), c: fc.integer({ min: 0, max: 2 }) }),
      fc.record({ k: fc.constant("admit" as const) }),
      fc.record({ k: fc.constant("ack" as const), c: fc.integer({ min: 0, max: 2 }), back: fc.integer({ min: 0, max: 3 }) }),
      fc.record({ k: fc.constant("restart" as const) }),
    );
    const lim = limits({
      windowPerCommand: 200 * KiB,
      windowPerSession: 300 * KiB,
      metadataReserve: 8 * KiB,
      rawHigh: 400 * KiB,
      rawLow: 100 * KiB,
      outputPerCommand: 300 * KiB,
      outputTotal: 500 * KiB,
    });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const disk = new Disk();
        const cfg = defaultAgentConfig("x", { limits: lim });
        let ob: Outbox = newOutbox(lim);
        const uuids = ["u0", "u1", "u2"];
        const first = new Map<string, string>();
        let pid = 0;
        const commit = (records: PersistRecord[]) => disk.apply({ type: "persist", id: ++pid, records });
        for (const u of uuids) {
          ob.commands.set(u, newCommandOutbox(u));
          commit([outboxHeader(ob.commands.get(u)!)]);
        }
        const check = () => {
          outboxInvariants(ob);
          for (const [u, cb] of ob.commands) {
            for (const p of cb.pinned) {
              const key = `${u}#${p.seq}`;
              const hex = Buffer.from(p.bytes).toString("hex");
              if (!first.has(key)) first.set(key, hex);
              expect(hex, key).toBe(first.get(key));
            }
          }
        };
        let salt = 0;
        for (const o of ops) {
          const rec: PersistRecord[] = [];
          if (o.k === "out")
            appendOutput(
              ob,
              ob.commands.get(uuids[o.c]!)!,
              salt % 2 ? "stdout" : "stderr",
              text(o.n, String.fromCharCode(97 + (salt++ % 26))),
              1,
              1000 + salt,
              rec,
            );
          else if (o.k === "meta")
            appendMeta(
              ob,
              ob.commands.get(uuids[o.c]!)!,
              { case: "signalResult", value: create(SignalResultSchema, { delivered: true, detail: `m${salt++}` }) },
              1,
              2000 + salt,
              rec,
            );
          else if (o.k === "admit") admit(ob, testPorts, rec);
          else if (o.k === "ack") {
            const cb = ob.commands.get(uuids[o.c]!)!;
            expect(acknowledge(ob, cb, Math.max(cb.ackedThrough, cb.nextSeq - 1 - o.back), rec)).toBe(true);
          } else {
            ob = restoreAgent(cfg, disk.tables(), 1).outbox;
          }
          commit(rec);
          check();
        }
        // The durable copy restores to the same bound bytes as well.
        ob = restoreAgent(cfg, disk.tables(), 1).outbox;
        check();
      }),
      { numRuns: runs(300) },
    );
  });

  it("R-O2: retries resend identical CommandEvent bytes across reconnects", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.autoDeliver = false;
    h.output("a", "c1", "payload");
    const first = h.wire.filter((w) => w.env.payload.case === "commandEvent").at(-1)!;
    h.queue.length = 0;
    h.autoDeliver = true;
    h.cutLink("a");
    h.reconnectNow("a");
    const again = h.wire.filter((w) => w.env.payload.case === "commandEvent").at(-1)!;
    const bytes = (w: typeof first) => Buffer.from(toBinary(CommandEventSchema, w.env.payload.value as CommandEvent)).toString("hex");
    expect(bytes(again)).toBe(bytes(first));
  });

  it("R-O3: the server writes the event durably before EventAck, and the ack is cumulative", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const acksBefore = h.sent("eventAck").length;
    h.autoDurable = false;
    for (let i = 0; i < 5; i++) h.output("a", "c1", `line ${i}\n`);
    h.flush("a");
    expect(h.sent("eventAck").length).toBe(acksBefore);
    // internal: received ahead of what is stored (a working state ahead of the committed view)
    expect(h.server.commands.get("c1")!.ingest.receivedThrough).toBe(6);
    expect(h.command("c1").storedThrough).toBe(1);
    h.flush("server");
    const acks = h
      .sent("eventAck")
      .slice(acksBefore)
      .map((e) => Number((e.payload.value as { throughEventSeq: bigint }).throughEventSeq));
    expect(acks).toEqual([6]);
    expect(h.command("c1").storedThrough).toBe(6);
    expect(h.storedEvents("c1")).toHaveLength(6);
    // internal: the ack unpinned the events at the agent (flow-control accounting; no peer observes the pin set)
    expect(h.agents.get("a")!.st.outbox.commands.get("c1")!.pinned).toHaveLength(0);
  });

  it("R-O4 R-T3: output is zstd with an explicit size; the server stores the validated compressed bytes and refuses bad ones", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.output("a", "c1", "compress me");
    const ev = events(h, "c1").find((e) => e.event.case === "output")!.event.value as { zstdData: Uint8Array; originalSize: number };
    expect(ev.originalSize).toBe(11);
    expect(Array.from(ev.zstdData.slice(0, 4))).toEqual([0x28, 0xb5, 0x2f, 0xfd]);
    const stored = h.storedEvents("c1").find((e) => e.kind === "output")!;
    expect(Buffer.from(stored.zstd as Uint8Array).equals(Buffer.from(ev.zstdData))).toBe(true);

    const send = (seq: number, size: number, zstd: Uint8Array) => {
      const a = h.agents.get("a")!;
      const data = encodeEnvelope(a.st.session.fence, {
        case: "commandEvent",
        value: {
          $typeName: "rvbox.v1.CommandEvent",
          issueUuid: "c1",
          eventSeq: BigInt(seq),
          commandRevision: 1n,
          event: { case: "output", value: { $typeName: "rvbox.v1.OutputChunk", stream: 1, streamOffset: 11n, originalSize: size, zstdData: zstd } },
        },
      });
      h.serverInput({ type: "frame", conn: a.serverConn, data });
    };
    const lastErr = () => (h.sent("error", "a").at(-1)!.payload.value as { error: { code: number } }).error.code;
    send(3, 5, encodeRawZstdFrame(text(6))); // declared 5, frame says 6
    expect(lastErr()).toBe(Code.BAD_COMPRESSION);
    expect(h.linkUp("a")).toBe(false);
    h.reconnectNow("a");
    send(3, 65 * KiB, encodeRawZstdFrame(text(65 * KiB)));
    expect(lastErr()).toBe(Code.PAYLOAD_TOO_LARGE);
    expect(h.storedEvents("c1").filter((e) => e.kind === "output")).toHaveLength(1);
    expect(h.command("c1").state).toBe("running");
  });

  it("R-O5: server rolling retention drops old segments and records a marker with the removed event and byte ranges", () => {
    const cfg = defaultServerConfig();
    cfg.limits.outputPerCommand = 40 * KiB;
    cfg.limits.segmentBytes = 10 * KiB;
    const h = new Harness(cfg);
    h.addAgent("a");
    h.submit("a", "c1");
    for (let i = 0; i < 12; i++) h.output("a", "c1", "y".repeat(5 * KiB));
    const c = h.command("c1");
    expect(c.retainedBytes).toBeLessThanOrEqual(40 * KiB + 10 * KiB);
    expect(c.retainedBytes).toBeGreaterThan(0);
    // One cumulative marker: the removed prefix, its output events and byte ranges.
    expect(c.retentionMarkers).toBe(1);
    const markers = h.outputOf("c1").items.filter((i) => i.kind === "truncation");
    expect(markers).toHaveLength(1);
    const mk = markers[0]!;
    if (mk.kind !== "truncation" || !mk.events) throw new Error("a server retention marker names its event range");
    expect(mk.cause).toBe("server-retention");
    const m = { firstSeq: mk.events.first, lastSeq: mk.events.last, ranges: mk.ranges };
    expect(m.firstSeq).toBe(2);
    const drops = h.serverEffects.filter((e) => e.type === "drop_output");
    expect(drops.length).toBeGreaterThan(1);
    expect(m.lastSeq).toBe((drops.at(-1) as { throughSeq: number }).throughSeq);
    expect(m.ranges).toEqual([{ stream: "stdout", offset: 0, length: (m.lastSeq - 1) * 5 * KiB }]);
    expect(h.serverDisk.durable.get("retention")?.get("c1")).toMatchObject({ firstSeq: 2, lastSeq: m.lastSeq });
    // What is left starts exactly where the marker ends.
    const kept = h.storedEvents("c1").filter((e) => e.kind === "output" && (e.seq as number) > m.lastSeq);
    expect(kept[0]!.offset).toBe(m.ranges[0]!.length);
  });

  it("R-O6 R-O7: offline, a capped agent replaces unsequenced output with a marker (no event range) but never evicts pinned events", () => {
    const lim = limits({
      windowPerCommand: 72 * KiB,
      windowPerSession: 72 * KiB,
      metadataReserve: 4 * KiB,
      outputPerCommand: 100 * KiB,
      outputTotal: 1 * MiB,
      rawHigh: 10 * MiB,
      rawLow: 5 * MiB,
    });
    const h = new Harness();
    h.addAgent("a", { limits: lim });
    h.submit("a", "c1");
    const a = h.agents.get("a")!;
    // Go offline.
    h.cutLink("a");
    // internal below, until the reconnect: the offline agent's outbox (pinned events, raw bytes,
    // entries) is flow-control accounting no peer observes while the link is down
    h.output("a", "c1", "p".repeat(30 * KiB)); // admitted, pinned (window has room)
    const pinned = a.st.outbox.commands.get("c1")!.pinned.map((p) => Buffer.from(p.bytes).toString("hex"));
    expect(pinned.length).toBeGreaterThanOrEqual(1);
    for (let i = 0; i < 20; i++) h.output("a", "c1", String.fromCharCode(65 + i).repeat(20 * KiB));
    const cb = a.st.outbox.commands.get("c1")!;
    expect(cb.pinned.map((p) => Buffer.from(p.bytes).toString("hex")).slice(0, pinned.length)).toEqual(pinned);
    expect(cb.rawBytes).toBeLessThanOrEqual(100 * KiB);
    // The marker replaced the oldest unsequenced runs; as metadata it may already be pinned.
    const pinnedMarkers = cb.pinned.map((p) => fromBinary(CommandEventSchema, p.bytes).event).filter((e) => e.case === "truncation");
    const entryMarkers = cb.entries.filter((e) => e.kind === "truncation");
    expect(pinnedMarkers.length + entryMarkers.length).toBeGreaterThan(0);
    for (const m of pinnedMarkers) {
      expect(m.value).toMatchObject({ cause: TruncationCause.AGENT_BUDGET });
      expect((m.value as { removedEvents?: unknown }).removedEvents).toBeUndefined();
    }
    h.exit("a", "c1", 0);
    h.reconnectNow("a");
    for (let i = 0; i < 20 && h.command("c1").state !== "succeeded"; i++) h.advance(1000);
    expect(h.command("c1").state).toBe("succeeded");
    const trunc = events(h, "c1").find((e) => e.event.case === "truncation")!;
    const tv = trunc.event.value as { removedEvents?: unknown; removedBytes: Array<{ length: bigint }> };
    expect(tv.removedEvents).toBeUndefined();
    const s = serverStream(h, "c1", "stdout");
    expect(s.bytes + s.covered).toBe(30 * KiB + 20 * 20 * KiB);
    expect(s.covered).toBeGreaterThan(0);
    // The newest output survives: the tail is kept, the oldest unsequenced runs were dropped.
    expect(s.text.endsWith("T".repeat(20 * KiB))).toBe(true);
  });

  it("R-O8: an undrained pipe yields a sequenced OutputIncomplete before the terminal lifecycle event", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.output("a", "c1", "partial");
    h.agentInput("a", { type: "process_exited", uuid: "c1", exitCode: 0, signal: null, timedOut: false, incompleteStreams: ["stdout"] });
    const kinds = events(h, "c1").map((e) => e.event.case);
    expect(kinds.slice(-2)).toEqual(["incomplete", "lifecycle"]);
    const inc = events(h, "c1").find((e) => e.event.case === "incomplete")!.event.value as { streams: number[] };
    expect(inc.streams).toEqual([1]);
    expect(
      h
        .storedEvents("c1")
        .map((e) => e.kind)
        .slice(-2),
    ).toEqual(["incomplete", "lifecycle"]);
  });
});

describe("flow control and budgets", () => {
  it("R-W3: unacknowledged bytes stay within 1 MiB per command and 8 MiB per session; the rest waits durably", () => {
    const h = new Harness();
    h.addAgent("a", { maxRunning: 12 });
    const a = h.agents.get("a")!;
    for (let i = 0; i < 10; i++) h.submit("a", `c${i}`);
    h.autoDeliver = false; // acks never come back
    const before = events(h).length; // acknowledged already
    for (let round = 0; round < 20; round++) for (let i = 0; i < 10; i++) h.output("a", `c${i}`, "z".repeat(64 * KiB));
    // What went on the wire with no ack back is what is unacknowledged: the events' encoded bytes per command and in all.
    const unacked = new Map<string, number>();
    for (const e of events(h).slice(before)) unacked.set(e.issueUuid, (unacked.get(e.issueUuid) ?? 0) + toBinary(CommandEventSchema, e as CommandEvent).length);
    expect(unacked.size).toBe(10);
    for (const [u, n] of unacked) expect(n, u).toBeLessThanOrEqual(1 * MiB);
    const session = [...unacked.values()].reduce((x, y) => x + y, 0);
    expect(session).toBeLessThanOrEqual(8 * MiB);
    expect(session).toBeGreaterThan(7 * MiB);
    // internal: the agent's own count agrees (flow-control accounting)
    expect(a.st.outbox.sessionPinnedBytes).toBe(session);
    // The rest waits durably: rows on the agent's disk that never went out.
    const waiting = a.disk.durable.get("entry")!.size;
    expect(waiting).toBeGreaterThan(0);
    expect(waiting).toBe([...a.st.outbox.commands.values()].reduce((n, cb) => n + cb.entries.length, 0)); // internal: the outbox's queue is that disk
  });

  it("R-W6: above the raw high watermark new output is summarized in order until the spool is below the low watermark", () => {
    const lim = limits({ rawHigh: 200 * KiB, rawLow: 100 * KiB, windowPerCommand: 96 * KiB, windowPerSession: 96 * KiB, metadataReserve: 4 * KiB });
    const h = new Harness();
    h.addAgent("a", { limits: lim });
    h.submit("a", "c1");
    const a = h.agents.get("a")!;
    h.autoDeliver = false;
    for (let i = 0; i < 14; i++) h.output("a", "c1", "w".repeat(30 * KiB));
    // internal until the drain: the spool's watermark state is flow-control accounting no peer observes
    // (what the server is shown in the end is checked below)
    expect(a.st.outbox.summarizing).toBe(true);
    const cb = a.st.outbox.commands.get("c1")!;
    const last = cb.entries.at(-1)!;
    expect(last.kind === "truncation" && last.cause).toBe(TruncationCause.AGENT_WATERMARK);
    expect(a.st.outbox.rawTotal).toBeLessThanOrEqual(200 * KiB + 30 * KiB);
    // Drain: acks flow again; the spool falls under low and output is kept again.
    h.autoDeliver = true;
    h.deliver();
    for (let i = 0; i < 30 && a.st.outbox.rawTotal > 100 * KiB; i++) h.advance(100);
    expect(a.st.outbox.summarizing).toBe(false);
    h.output("a", "c1", "kept");
    expect(cb.entries.length === 0 || cb.entries.at(-1)!.kind === "output").toBe(true);
    h.exit("a", "c1", 0);
    const s = serverStream(h, "c1", "stdout");
    expect(s.bytes + s.covered).toBe(14 * 30 * KiB + 4);
    expect(s.covered).toBeGreaterThan(0);
    expect(s.text.endsWith("kept")).toBe(true);
  });

  it("R-W8: one verbose command cannot starve the others", () => {
    const lim = limits({ windowPerCommand: 256 * KiB, windowPerSession: 256 * KiB, metadataReserve: 4 * KiB });
    const h = new Harness();
    h.addAgent("a", { limits: lim });
    h.submit("a", "loud");
    h.submit("a", "quiet");
    h.autoDeliver = false;
    for (let i = 0; i < 30; i++) h.output("a", "loud", "L".repeat(60 * KiB));
    h.output("a", "quiet", "q");
    h.autoDeliver = true;
    h.deliver();
    for (let i = 0; i < 5; i++) h.advance(10);
    const order = events(h)
      .filter((e) => e.event.case === "output")
      .map((e) => e.issueUuid);
    const quietAt = order.indexOf("quiet");
    expect(quietAt).toBeGreaterThan(-1);
    expect(quietAt).toBeLessThan(10);
  });

  it("R-W9: reserved window capacity always admits the marker and the final lifecycle event", () => {
    const lim = limits({ windowPerCommand: 128 * KiB, windowPerSession: 128 * KiB, metadataReserve: 8 * KiB });
    const h = new Harness();
    h.addAgent("a", { limits: lim });
    h.submit("a", "c1");
    h.autoDeliver = false;
    for (let i = 0; i < 10; i++) h.output("a", "c1", "o".repeat(60 * KiB));
    const a = h.agents.get("a")!;
    // internal: the blocked queue behind the window (flow-control accounting; what arrives in the end is checked below)
    const cb = a.st.outbox.commands.get("c1")!;
    expect(cb.entries.some((e) => e.kind === "output")).toBe(true); // output is blocked by the window
    h.agentInput("a", { type: "process_exited", uuid: "c1", exitCode: 0, signal: null, timedOut: false, incompleteStreams: ["stderr"] });
    // Output is still waiting, and the window cannot skip ahead of it in local order...
    expect(cb.entries.at(-1)!.kind).toBe("meta");
    // ...but once output drains, the final events fit although output filled the window to its limit.
    h.autoDeliver = true;
    h.deliver();
    for (let i = 0; i < 50 && h.command("c1").state !== "succeeded"; i++) h.advance(10);
    expect(h.command("c1").state).toBe("succeeded");
  });

  it("R-W2: agent budgets are tiered: the metadata tier refuses new commands with a transient capacity error", () => {
    const lim = limits({ metadataBudget: 3 * 64 * KiB });
    const h = new Harness();
    h.addAgent("a", { limits: lim, maxRunning: 10 });
    for (let i = 0; i < 4; i++) h.submit("a", `c${i}`);
    const acc = h
      .sent("commandAccepted")
      .map((e) => e.payload.value as { issueUuid: string; accepted: boolean; rejection?: { code: number; message: string } });
    expect(acc.filter((x) => x.accepted).length).toBe(3);
    expect(acc.find((x) => x.issueUuid === "c3")).toMatchObject({ accepted: false, rejection: { code: Code.CAPACITY } });
    expect(h.command("c3").state).toBe("queued");
  });

  it("R-W5: a full ingress queue closes the session without acknowledging; the agent resends after reconnecting", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const a = h.agents.get("a")!;
    h.autoDeliver = false;
    h.output("a", "c1", "bytes");
    h.queue.length = 0;
    const acks = h.sent("eventAck").length;
    h.autoDeliver = true;
    h.serverInput({ type: "ingress_full", conn: a.serverConn });
    expect(h.sent("eventAck").length).toBe(acks);
    expect(h.linkUp("a")).toBe(false);
    h.reconnectNow("a");
    expect(h.storedEvents("c1").some((e) => e.kind === "output")).toBe(true);
  });

  it("R-W7: at its ingress high watermark the server closes without acknowledging or discarding sequenced events", () => {
    const cfg = defaultServerConfig();
    cfg.limits.ingressHigh = 100 * KiB;
    const h = new Harness(cfg);
    h.addAgent("a");
    h.submit("a", "c1");
    h.autoDurable = false;
    h.flush("server");
    const acks = h.sent("eventAck").length;
    for (let i = 0; i < 4; i++) h.output("a", "c1", "i".repeat(60 * KiB));
    h.flush("a");
    expect(h.sent("error", "a").at(-1)?.payload.value).toMatchObject({ error: { code: Code.CAPACITY } });
    expect(h.sent("eventAck").length).toBe(acks);
    h.autoDurable = true;
    h.flush("server");
    h.flush("a");
    h.reconnectNow("a");
    for (let i = 0; i < 10; i++) h.advance(10);
    const s = serverStream(h, "c1", "stdout");
    expect(s.bytes).toBe(4 * 60 * KiB);
  });
});

describe("hostile input", () => {
  it("R-W4: protocol errors, fencing errors and the hello/welcome go on the priority lane; command traffic on the data lane", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.output("a", "c1", "x");
    h.addAgent("a2", { clientId: "a" }, 5, "a"); // fences the first session
    const sends = [...h.serverEffects, ...h.agentEffects.map((x) => x.e)].filter((e): e is Extract<typeof e, { type: "send" }> => e.type === "send");
    const lanes = new Map<string, Set<string>>();
    for (const e of sends) lanes.set(e.kind, (lanes.get(e.kind) ?? new Set()).add(e.lane));
    expect(lanes.get("error")).toEqual(new Set(["priority"]));
    expect(lanes.get("clientHello")).toEqual(new Set(["priority"]));
    expect(lanes.get("serverWelcome")).toEqual(new Set(["priority"]));
    for (const k of ["commandDispatch", "commandEvent", "eventAck", "commandAccepted"]) expect(lanes.get(k), k).toEqual(new Set(["data"]));
  });

  it("R-W10: random frames to the server, before and after registration, give coded errors and closes, never a crash", () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 300 }), { minLength: 1, maxLength: 5 }), fc.boolean(), (frames, registered) => {
        const h = new Harness();
        h.addAgent("good");
        h.submit("good", "c1");
        let conn = 10_000;
        if (registered) {
          h.addAgent("victim");
          conn = h.agents.get("victim")!.serverConn;
        } else h.serverInput({ type: "conn_open", conn });
        for (const f of frames) h.serverInput({ type: "frame", conn, data: f });
        // The other agent is still served.
        h.output("good", "c1", "still here");
        expect(h.storedEvents("c1").some((e) => e.kind === "output")).toBe(true);
      }),
      { numRuns: runs(300) },
    );
  });

  it("R-W10: random frames to an agent never crash it and never launch anything", () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 300 }), { minLength: 1, maxLength: 5 }), (frames) => {
        const h = new Harness();
        h.addAgent("a");
        const a = h.agents.get("a")!;
        for (const f of frames) if (a.conn) h.agentInput("a", { type: "frame", conn: a.conn, data: f });
        expect(a.spawns).toEqual([]);
      }),
      { numRuns: runs(300) },
    );
  });

  it("R-W10: an impossible sequence (gap, ack beyond assigned) is a coded error and a close", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const a = h.agents.get("a")!;
    const gap = encodeEnvelope(a.st.session.fence, {
      case: "commandEvent",
      value: {
        $typeName: "rvbox.v1.CommandEvent",
        issueUuid: "c1",
        eventSeq: 9n,
        commandRevision: 1n,
        event: { case: "signalResult", value: create(SignalResultSchema, {}) },
      },
    });
    h.serverInput({ type: "frame", conn: a.serverConn, data: gap });
    expect(h.sent("error", "a").at(-1)?.payload.value).toMatchObject({ error: { code: Code.SEQUENCE_VIOLATION }, closeSession: true });
    h.reconnectNow("a");
    const ack = encodeEnvelope(a.st.session.fence, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 99n } });
    h.agentInput("a", { type: "frame", conn: a.conn, data: ack });
    expect(h.sent("error", "server").at(-1)?.payload.value).toMatchObject({ error: { code: Code.SEQUENCE_VIOLATION }, closeSession: true });
    expect(h.linkUp("a")).toBe(false);
  });

  it("R-W11: a lossy link with repeated reconnects delivers every byte exactly once", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 1_000_000 }), (seed) => {
        let s = seed;
        const rnd = () => (s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
        const h = new Harness();
        h.addAgent("a");
        h.submit("a", "c1");
        const a = h.agents.get("a")!;
        h.autoDeliver = false;
        let expected = "";
        for (let i = 0; i < 40; i++) {
          const line = `line ${i} ${"#".repeat(Math.floor(rnd() * 50))}\n`;
          expected += line;
          h.output("a", "c1", line);
          // Deliver some frames, lose the rest, sometimes cut the link.
          const q = h.queue.splice(0);
          for (const f of q) if (rnd() < 0.7) f();
          if (rnd() < 0.2 && a.conn) {
            h.cutLink("a");
          }
          // setup: the random schedule reconnects an agent that is backing off
          if (a.st.session.phase === "backoff" && rnd() < 0.5) {
            h.reconnectNow("a");
            h.deliver();
          }
        }
        h.exit("a", "c1", 0);
        h.autoDeliver = true;
        for (let i = 0; i < 200 && h.command("c1").state !== "succeeded"; i++) {
          h.deliver();
          if (a.st.session.phase === "backoff") h.now = a.st.session.retryAt; // setup: let the backoff expire
          h.advance(31_000);
        }
        h.deliver();
        expect(h.command("c1").state).toBe("succeeded");
        expect(serverStream(h, "c1", "stdout").text).toBe(expected);
        expect(a.spawns).toEqual(["c1"]);
      }),
      { numRuns: runs(60) },
    );
  });
});
