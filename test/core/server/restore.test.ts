// A server restarted from its durable tables (core/server/restore.ts).
// (Moved from test/core/server-node-edges.test.ts, which drove the server
// reducer directly with hand-made agent frames.)
import { rowOf } from "../../../core/server/store.js";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, ControlErrorSchema, OutputStream } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { restoreServer, serverInvariants } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { MAX_INCIDENTS_KEPT, SERVER_RECENT_DIGESTS } from "../../../core/limits.js";

import { T0, argv, enc, lifecycle, output, ServerRig } from "../../support/server-rig.js";

void MAX_INCIDENTS_KEPT;

describe("server restart", () => {
  it("R-O3 R-D1: a restart restores clients, incidents, commands, the active index, the output index and recent digests", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("hello")));
    r.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("x"), appendNewline: false });
    r.running(c, "c2");
    r.event(c, "c2", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    r.submit("a", "q");
    r.frame(c, {
      case: "error",
      value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "x" }), closeSession: false },
    });
    r.frame(c, {
      case: "error",
      value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "y" }), closeSession: false },
    });
    r.st.incidents.delete("inc-1"); // setup: an incident gone from memory and disk alike
    r.disk.durable.get("incident")!.delete("inc-1");
    const back = restoreServer(r.cfg, r.disk.tables(), 5);
    serverInvariants(back);
    // What an operator sees after the restart: the same commands and client (now disconnected), no session, the incidents kept.
    const seen = new ServerRig();
    seen.st = back;
    for (const u of ["c1", "q", "c2"]) expect(seen.command(u), u).toEqual(r.command(u));
    expect(seen.client("a")).toEqual({ ...r.client("a"), connected: false });
    expect(seen.sessions()).toEqual([]);
    expect(seen.incidents().map((i) => i.incidentId)).toEqual(["inc-2"]);
    // internal from here: the restore is exact for the working records and indexes (pinned by this test)
    expect(back.conns.size).toBe(0);
    expect(back.clients.get("a")).toEqual({ ...r.st.clients.get("a"), conn: 0 });
    expect([...back.active]).toEqual(["c1", "q"]);
    expect(back.incidentSeq).toBe(2);
    expect([...back.incidents.keys()]).toEqual(["inc-2"]);
    const c1 = back.commands.get("c1")!;
    expect(c1).toMatchObject({
      state: L.RUNNING,
      ingest: { storedThrough: 2, receivedThrough: 2, streamNext: { stdout: 5, stderr: 0 } },
      dispatch: { dispatchedOn: 0 },
    });
    expect(c1.committed).toEqual({
      state: L.RUNNING,
      exitCode: null,
      signalName: "",
      reason: "",
      storedThrough: 2,
      revision: 1,
      stdinAssigned: 1,
      startedTime: T0,
      endedTime: 0,
    });
    expect(Object.keys(c1.ingest.digests).map(Number)).toEqual([1, 2]);
    expect(c1.ingest.digests).toEqual(r.cmd("c1").ingest.digests);
    expect(c1.stdin).toEqual({ ...r.cmd("c1").stdin, sentThrough: r.cmd("c1").stdin.ackedThrough });
    expect(back.clientOutput.get("a")).toEqual({ bytes: r.cmd("c1").output.storedOutputBytes, uuids: new Set(["c1"]) });
    expect(back.commands.get("q")).toMatchObject({ state: L.DISPATCHED, dispatch: { everDispatched: true, dispatchedOn: 0 } });
    expect(back.commands.get("c2")).toMatchObject({ state: L.SUCCEEDED, exit: { terminalSource: "agent", exitCode: 0 } });
  });

  it("R-O2: after a restart only digests newer than storedThrough - SERVER_RECENT_DIGESTS are kept", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    const rec = rowOf(r.disk.durable, "command", "c1")!;
    const events = r.disk.durable.get("event")!;
    const top = SERVER_RECENT_DIGESTS + 5;
    for (let s = 2; s <= top; s++) events.set(`c1/${String(s).padStart(12, "0")}`, { seq: s, digest: s * 3 });
    r.disk.durable.get("command")!.set("c1", { ...rec, storedThrough: top });
    const back = restoreServer(r.cfg, r.disk.tables(), 2);
    const keys = Object.keys(back.commands.get("c1")!.ingest.digests)
      .map(Number)
      .sort((a, b) => a - b);
    expect(keys[0]).toBe(top - SERVER_RECENT_DIGESTS + 1);
    expect(keys.at(-1)).toBe(top);
    expect(keys).toHaveLength(SERVER_RECENT_DIGESTS);
  });
});

// ====================================================================== invariants
