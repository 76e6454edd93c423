import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, OutputStream, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { serverInvariants } from "../../../core/index.js";
import { InvariantViolation } from "../../../core/errors.js";
import {
  MAX_INCIDENTS_KEPT,
  MAX_PENDING_SIGNALS,
  MAX_REQUEST_IDS_PER_COMMAND,
  MAX_SERVER_CONNECTIONS,
  SERVER_RECENT_DIGESTS,
  STDIN_WRITES_IN_FLIGHT,
} from "../../../core/limits.js";

import { sha, argv, enc, lifecycle, output, ServerRig } from "../../support/server-rig.js";

void MAX_INCIDENTS_KEPT;

describe("server invariants catch every corruption they check", () => {
  function healthy(): { r: ServerRig; c: number } {
    const r = new ServerRig({ segmentBytes: 16 });
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("hello")));
    r.submit("a", "s1", { program: { case: "script", value: { sizeBytes: 3n, sha256: sha("abc"), interpreter: "/bin/sh" } } }, { script: enc("abc") });
    r.running(c, "done");
    r.event(c, "done", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    serverInvariants(r.st);
    return { r, c };
  }
  const C = (r: ServerRig, u = "c1") => r.cmd(u);
  const cases: Array<[string, (r: ServerRig, c: number) => void, RegExp]> = [
    ["conn key mismatch", (r, c) => void (r.st.conns.get(c)!.conn = 99), /conn key mismatch/],
    ["ingress below zero", (r, c) => void (r.st.conns.get(c)!.ingressPending = -1), /ingress accounting below zero/],
    ["conn of an unknown client", (r, c) => void (r.st.conns.get(c)!.clientId = "zz"), /for unknown client/],
    ["conn not its client's current one", (r) => void (r.st.clients.get("a")!.conn = 0), /is not its client's current connection/],
    ["generation mismatch", (r, c) => void (r.st.conns.get(c)!.generation = 5), /generation 5 != client 1/],
    ["client points at a foreign conn", (r) => void r.st.clients.set("b", { ...r.st.clients.get("a")!, clientId: "b" }), /client b points at a foreign conn/],
    ["durable beyond last persist", (r) => void (r.st.gate.durableThrough = r.st.gate.lastId + 1), /durable beyond last persist/],
    ["active index out of step", (r) => void r.st.active.delete("c1"), /c1: active index out of step/],
    ["terminal in the active index", (r) => void r.st.active.add("done"), /done: active index out of step/],
    ["committed terminal state changed", (r) => void (C(r, "done").state = L.FAILED), /done: committed terminal state/],
    ["committed revision ahead", (r) => void (C(r).committed = { ...C(r).committed, revision: 9 }), /c1: committed view ahead of memory/],
    ["committed stdin ahead", (r) => void (C(r).committed = { ...C(r).committed, stdinAssigned: 1 }), /c1: committed view ahead of memory/],
    ["stdin sent before durable", (r) => void (C(r).stdin.sentThrough = 1), /c1: stdin sent before it was durable/],
    ["readers see undurable events", (r) => void (C(r).committed = { ...C(r).committed, storedThrough: 3 }), /c1: readers would see events not yet durable/],
    ["command key mismatch", (r) => void (C(r).uuid = "x"), /command key mismatch/],
    ["stored beyond received", (r) => void (C(r).ingest.storedThrough = 3), /c1: stored beyond received/],
    ["stdin acked beyond assigned", (r) => void (C(r).stdin.ackedThrough = 1), /c1: stdin acked beyond assigned/],
    ["stdin queue accounting", (r) => void (C(r).stdin.queuedBytes = 4), /c1: stdin queue accounting/],
    ["segment accounting", (r) => void (C(r).output.storedOutputBytes += 1), /c1: segment accounting|retained output index drift/],
    [
      "retention exceeded",
      (r) =>
        void ((r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerCommand: 1 } }),
        C(r).output.segments.push({ firstSeq: 3, lastSeq: 3, bytes: 0, ranges: [] })),
      /c1: retention exceeded/,
    ],
    [
      "two retention markers",
      (r) =>
        void (C(r).output.retention = [
          { firstSeq: 1, lastSeq: 1, ranges: [], at: 0 },
          { firstSeq: 2, lastSeq: 2, ranges: [], at: 0 },
        ]),
      /c1: a per-command bound exceeded/,
    ],
    [
      "too many signals",
      (r) =>
        void (C(r).signals = Array.from({ length: MAX_PENDING_SIGNALS + 1 }, (_, i) => ({
          revision: i,
          signal: SignalKind.USER1,
          requestId: `r${i}`,
          sentOn: 0,
        }))),
      /c1: a per-command bound exceeded/,
    ],
    [
      "too many request ids",
      (r) => void (C(r).requests = Object.fromEntries(Array.from({ length: MAX_REQUEST_IDS_PER_COMMAND + 1 }, (_, i) => [`r${i}`, 1]))),
      /c1: a per-command bound exceeded/,
    ],
    ["script progress beyond size", (r) => void (C(r, "s1").script.acked = 4), /s1: script progress beyond size/],
    ["script progress on a non-script command", (r) => void (C(r).script.acked = 1), /c1: script progress beyond size/],
    ["terminal without a source", (r) => void (C(r, "done").exit.terminalSource = ""), /done: terminal without a source/],
    [
      "terminal with pending signals",
      (r) => void (C(r, "done").signals = [{ revision: 2, signal: SignalKind.USER1, requestId: "x", sentOn: 0 }]),
      /done: terminal with pending work/,
    ],
    [
      "terminal with queued stdin",
      (r) => {
        const c = C(r, "done");
        c.stdin.nextSeq = 2;
        c.stdin.queue = [{ seq: 1, data: new Uint8Array(0), appendNewline: false, close: true, requestId: "x" }];
      },
      /done: terminal with pending work/,
    ],
    [
      "stdin queue holding an acknowledged write",
      (r) => {
        const c = C(r, "done");
        c.stdin.nextSeq = 3;
        c.stdin.ackedThrough = 2;
        c.stdin.queue = [{ seq: 2, data: new Uint8Array(0), appendNewline: false, close: false, requestId: "x" }];
      },
      /done: stdin queue out of order or outside \(acked, next\)/,
    ],
    [
      "a drain flag that is not a boolean",
      (r) => void Object.assign(r.st.clients.get("a")!, { draining: undefined }),
      /^client a drain flag is not a boolean$/,
    ],
    ["invalid labels", (r) => void (r.st.clients.get("a")!.labels = { "no spaces": "x" }), /^client a labels invalid: /],
    [
      "replaced by its own instance",
      (r) => void (r.st.clients.get("a")!.replaced = { instanceId: r.st.clients.get("a")!.instanceId, generation: 0, by: "x", at: 0, authorized: false }),
      /^client a replaced by its own instance$/,
    ],
    [
      "a replacement at its own generation",
      (r) => void (r.st.clients.get("a")!.replaced = { instanceId: "old", generation: r.st.clients.get("a")!.generation, by: "x", at: 0, authorized: false }),
      /^client a replacement beyond its generation$/,
    ],
    [
      "a stdin write queued at the next sequence number",
      (r) => {
        const c = C(r);
        c.stdin.queue = [{ seq: c.stdin.nextSeq, data: new Uint8Array(0), appendNewline: false, close: false, requestId: "x" }];
      },
      /^c1: stdin queue out of order or outside \(acked, next\)$/,
    ],
    [
      "inline writes at the next sequence number",
      (r) => void (C(r).stdin.inlineThrough = C(r).stdin.nextSeq),
      /^c1: inline stdin writes beyond the assigned ones$/,
    ],
    [
      "more stdin writes in flight than STDIN_WRITES_IN_FLIGHT",
      (r) => inFlight(C(r), STDIN_WRITES_IN_FLIGHT + 1),
      new RegExp(`^c1: ${STDIN_WRITES_IN_FLIGHT + 1} stdin writes in flight over the bound$`),
    ],
    ["output index drift", (r) => void (r.st.clientOutput.get("a")!.bytes += 1), /a: retained output index drift/],
    [
      "per-client retention exceeded",
      (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerClient: 0, segmentBytes: 0 } }),
      /a: per-client retention exceeded/,
    ],
  ];
  /** c's stdin: n empty writes queued and sent, all assigned durably, none acknowledged. */
  function inFlight(c: ReturnType<typeof C>, n: number): void {
    c.stdin.queue = Array.from({ length: n }, (_, i) => ({ seq: i + 1, data: new Uint8Array(0), appendNewline: false, close: false, requestId: `w${i}` }));
    c.stdin.ackedThrough = 0;
    c.stdin.nextSeq = n + 1;
    c.stdin.sentThrough = n;
    c.committed = { ...c.committed, stdinAssigned: n };
  }
  it("accepts the bounds themselves: STDIN_WRITES_IN_FLIGHT writes in flight, SERVER_RECENT_DIGESTS digests", () => {
    const { r } = healthy();
    inFlight(C(r), STDIN_WRITES_IN_FLIGHT);
    C(r).ingest.digests = Object.fromEntries(Array.from({ length: SERVER_RECENT_DIGESTS }, (_, i) => [i + 1, i]));
    expect(() => serverInvariants(r.st)).not.toThrow();
  });

  for (const [name, corrupt, message] of cases) {
    it(`refuses: ${name}`, () => {
      const { r, c } = healthy();
      corrupt(r, c);
      expect(() => serverInvariants(r.st)).toThrow(InvariantViolation);
      expect(() => serverInvariants(r.st)).toThrow(message);
    });
  }

  it("refuses more connections or incidents than their bounds", () => {
    const { r } = healthy();
    for (let i = 0; i < MAX_SERVER_CONNECTIONS; i++)
      r.st.conns.set(1_000_000 + i, {
        conn: 1_000_000 + i,
        phase: "hello",
        clientId: "",
        instanceId: "",
        sessionId: "",
        generation: 0,
        version: null,
        hb: { lastInbound: 0, pinged: false },
        ingressPending: 0,
        inflight: 0,
        openedAt: 0,
        snapshotReceived: false,
        hbOrder: 0,
      });
    expect(() => serverInvariants(r.st)).toThrow(/connections over their bound/);
    const k = healthy().r;
    for (let i = 0; i <= MAX_INCIDENTS_KEPT; i++)
      k.st.incidents.set(`x${i}`, { id: `x${i}`, clientId: "a", uuid: "", kind: "k", detail: "", at: 0, acknowledged: true });
    expect(() => serverInvariants(k.st)).toThrow(/incidents over their bound/);
  });
});

describe("server invariants: accounting edges", () => {
  function twoWithOutput(): ServerRig {
    const r = new ServerRig({ segmentBytes: 8 });
    const c = r.connect();
    r.running(c, "c1");
    r.running(c, "c2");
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("hello")));
    r.event(c, "c2", 2, output(OutputStream.STDOUT, 0, enc("world")));
    return r;
  }

  it("refuses segments that do not add up to the stored bytes", () => {
    const r = twoWithOutput();
    r.cmd("c1").output.segments[0]!.bytes += 1;
    expect(() => serverInvariants(r.st)).toThrow(/c1: segment accounting/);
  });

  it("refuses a stdin queue over its limit even when the accounting adds up", () => {
    const r = new ServerRig();
    r.submit("off", "c1", { ...argv("cat"), stdinOpen: true });
    r.control({ op: "stdin", requestId: "w", uuid: "c1", data: new Uint8Array(5), appendNewline: false });
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, stdinQueue: 4 } };
    expect(() => serverInvariants(r.st)).toThrow(/c1: stdin queue accounting/);
  });

  it("accepts a single segment over the per-command budget, but not two", () => {
    const r = twoWithOutput();
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerCommand: 1 } };
    serverInvariants(r.st);
    r.cmd("c1").output.segments.push({ firstSeq: 3, lastSeq: 3, bytes: 0, ranges: [] });
    expect(() => serverInvariants(r.st)).toThrow(/c1: retention exceeded/);
  });

  it("the per-client bound is budget + one segment per command holding output, inclusive", () => {
    const r = twoWithOutput();
    const bytes = r.st.clientOutput.get("a")!.bytes;
    expect(r.st.clientOutput.get("a")!.uuids.size).toBe(2);
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerClient: bytes - 2 * 8 } };
    serverInvariants(r.st);
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerClient: bytes - 2 * 8 - 1 } };
    expect(() => serverInvariants(r.st)).toThrow(/a: per-client retention exceeded/);
  });
});
