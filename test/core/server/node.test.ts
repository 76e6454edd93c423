// The server router's other edges and the traces other tools read (core/server/node.ts).
// (Moved from test/core/server-node-edges.test.ts, which drove the server
// reducer directly with hand-made agent frames.)
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  CommandEventSchema,
  CommandLifecycle as L,
  ExecutionSpecSchema,
  OutputStream,
  ScriptUploadStatusSchema,
  SignalKind,
} from "../../../protos/gen/rvbox/v1/common_pb.js";
import { restoreServer } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { MAX_INCIDENTS_KEPT } from "../../../core/limits.js";

import { T0, sha, argv, of, enc, output, ServerRig } from "../../support/server-rig.js";

void MAX_INCIDENTS_KEPT;

describe("more server edges", () => {
  it("R-H1: any valid frame counts as activity: no ping while the agent talks", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now = T0 + 9_000;
    r.frame(c, {
      case: "clientCapacity",
      value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 1, maxQueuedCommands: 1 },
    });
    r.now = T0 + 10_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([]);
    r.now = T0 + 19_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: c }]);
  });

  it("R-D2: the request hash is SHA-256 over a UTF-8 header (uuid, client, requested expiry) and the encoded spec", async () => {
    const { toBinary } = await import("@bufbuild/protobuf");
    const r = new ServerRig();
    const spec = create(ExecutionSpecSchema, argv("echo", "ünï"));
    let n = 0;
    for (const [client, expiry] of [
      ["plain", undefined],
      ["é-client", T0 + 5],
      ["€uro", 0],
      ["emoji-😀", undefined],
    ] as const) {
      const uuid = `u-${n++}`;
      r.control({ op: "submit", requestId: uuid, uuid, clientId: client, spec, ...(expiry !== undefined ? { queueExpiry: expiry } : {}) });
      const head = Buffer.from(`rvbox.v1/request\n${uuid}\n${client}\n${expiry ?? 0}\n`, "utf8");
      const want = createHash("sha256")
        .update(Buffer.concat([head, Buffer.from(toBinary(ExecutionSpecSchema, spec))]))
        .digest("hex");
      expect(r.cmd(uuid).hash, client).toBe(want); // internal: the request hash (no agent of these ids is connected to carry it)
    }
  });

  it("R-D1: the server expires only commands still queued; a dispatched one waits for its agent", () => {
    const r = new ServerRig({ redeliveryMs: 1_000_000 });
    const c = r.connect();
    r.submit("a", "d", argv(), { queueExpiry: T0 + 1_000 });
    expect(r.command("d").state).toBe("dispatched");
    r.now = T0 + 5_000;
    r.step({ type: "activity", conn: c });
    r.step({ type: "tick" });
    expect(r.command("d").state).toBe("dispatched");
  });

  it("R-D3: a late acceptance of a command requeued after a transient rejection is taken", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.accept(c, "c1", false, Code.CAPACITY);
    expect(r.command("c1").state).toBe("queued");
    r.accept(c, "c1", true);
    expect(r.command("c1").state).toBe("accepted");
  });

  it("R-H6: a reconnect resends pending signals only to that client, not to other clients' sessions", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    const b = r.connect("b");
    r.running(a, "ca");
    r.running(b, "cb");
    r.control({ op: "signal", requestId: "sa", uuid: "ca", signal: SignalKind.USER1 });
    r.control({ op: "signal", requestId: "sb", uuid: "cb", signal: SignalKind.USER1 });
    expect(r.sent(r.log, b, "signalCommand")).toHaveLength(1);
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    const a2 = r.open();
    r.hello(a2, "a");
    r.snapshot(a2, [
      { issueUuid: "ca", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: Buffer.from(r.cmd("ca").hash, "hex") }, // setup: its own hash
    ]);
    expect(r.sent(r.log, a2, "signalCommand")).toHaveLength(1);
    expect(r.sent(r.log, b, "signalCommand")).toHaveLength(1);
  });

  it("R-O3: the stored event keeps the agent's time when it has one, else the server's", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.now = T0 + 50;
    r.frame(c, {
      case: "commandEvent",
      value: create(CommandEventSchema, {
        issueUuid: "c1",
        eventSeq: 2n,
        commandRevision: 1n,
        time: { $typeName: "google.protobuf.Timestamp", seconds: 1_600_000_000n, nanos: 5_000_000 },
        event: output(OutputStream.STDOUT, 0, enc("a")),
      }),
    });
    r.event(c, "c1", 3, output(OutputStream.STDOUT, 1, enc("b")), 7n);
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ time: 1_600_000_000_005, revision: 1 });
    expect(r.disk.durable.get("event")!.get("c1/000000000003")).toMatchObject({ time: T0 + 50, revision: 7 });
  });

  it("R-S4 R-C3: a restart restores pending signals as unsent and a script still uploading with its bytes", () => {
    const body = enc("#!/bin/sh\necho hi\n");
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.control({ op: "signal", requestId: "s", uuid: "c1", signal: SignalKind.USER2 });
    expect(r.sent(r.log, c, "signalCommand")).toHaveLength(1);
    expect(r.cmd("c1").signals[0]!.sentOn).toBe(1); // internal: recorded as sent on this session (what the restore must reset)
    r.submit(
      "a",
      "s1",
      { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } } },
      { script: body },
    );
    r.accept(c, "s1");
    r.event(c, "s1", 1, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: 5n }) });
    const back = restoreServer(r.cfg, r.disk.tables(), 3);
    expect(back.commands.get("c1")!.signals).toEqual([{ revision: 2, signal: SignalKind.USER2, requestId: "s", sentOn: 0 }]);
    expect(back.commands.get("s1")).toMatchObject({ script: { bytes: body, acked: 5, sent: 5, commitSentOn: 0, committed: false } });
    expect(back.commands.get("c1")!.stdin.sentThrough).toBe(0);
  });
});

describe("traces other tools read", () => {
  it("R-W10: conn_closed carries the connection, client, code and message the simulator reports", () => {
    const r = new ServerRig();
    const c = r.connect();
    const out = r.step({ type: "frame", conn: c, data: new Uint8Array([1]), binary: false });
    expect(
      of(out, "trace")
        .filter((t) => t.event === "conn_closed")
        .map((t) => t.detail),
    ).toEqual([{ conn: c, client: "a", code: "PROTOCOL_ERROR", message: "text frames are not part of the protocol" }]);
    expect(of(out, "close")).toEqual([{ type: "close", conn: c, reason: "PROTOCOL_ERROR: text frames are not part of the protocol" }]);
  });
});
