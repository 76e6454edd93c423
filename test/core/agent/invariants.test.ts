// The agent's invariants catch every corruption they check.
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { agentInvariants } from "../../../core/index.js";
import { InvariantViolation } from "../../../core/errors.js";
import { sha, argv, AgentRig, chunk, commit } from "./rig.js";

describe("agent invariants catch every corruption they check", () => {
  function healthy(): AgentRig {
    const r = new AgentRig({ maxRunning: 2 });
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.dispatch("c2", { program: { case: "script", value: { sizeBytes: 10n, sha256: new Uint8Array(32), interpreter: "/bin/sh" } } });
    agentInvariants(r.st);
    return r;
  }
  const cases: Array<[string, (r: AgentRig) => void, RegExp]> = [
    ["durable beyond the last persist", (r) => void (r.st.gate.durableThrough = r.st.gate.lastId + 1), /durable beyond last persist/],
    [
      "reconciled without a session",
      (r) => void ((r.st.session = { ...r.st.session, phase: "backoff", conn: 0, fence: null }), (r.st.reconciled = true)),
      /reconciled without a session/,
    ],
    [
      "tombstones over the bound",
      (r) => void ((r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, maxTombstones: 0 } }), r.st.tombstones.set("z", "h")),
      /tombstone ledger over its bound/,
    ],
    [
      "retained over the bound",
      (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, maxRetained: 1 } }),
      /retained commands over bound/,
    ],
    ["live and tombstoned", (r) => void r.st.tombstones.set("c1", "h"), /c1 both live and tombstoned/],
    [
      "snapshot tombstone hits over the ledger's bound",
      (r) =>
        void ((r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, maxTombstones: 1 } }),
        (r.st.pendingSnapshotTombstones = [
          { uuid: "t1", hash: "h" },
          { uuid: "t2", hash: "h" },
        ])),
      /snapshot tombstone hits over the ledger's bound/,
    ],
    // The session's and the outbox's own checks run as part of the agent's.
    [
      "session: a fence while not established",
      (r) => void (r.st.session = { ...r.st.session, phase: "backoff", conn: 0 }),
      /conn 0 in phase backoff|fence only while established/,
    ],
    ["session: conn beyond the last one", (r) => void (r.st.session = { ...r.st.session, lastConn: r.st.session.conn - 1 }), /conn beyond lastConn/],
    ["outbox: pinned bytes drift", (r) => void (r.st.outbox.commands.get("c1")!.pinnedBytes += 1), /c1: pinnedBytes drift/],
    ["outbox: session pinned bytes drift", (r) => void (r.st.outbox.sessionPinnedBytes += 1), /session pinned bytes drift/],
    ["done but not terminal", (r) => void (r.cmd("c1").phase = "done"), /c1 done but 4/],
    ["key mismatch", (r) => void (r.cmd("c1").uuid = "zz"), /command key mismatch/],
    ["command without outbox", (r) => void r.st.outbox.commands.delete("c2"), /c2 has no outbox/],
    [
      "outbox without command",
      (r) => void r.st.outbox.commands.set("ghost", { ...r.st.outbox.commands.get("c2")!, uuid: "ghost" }),
      /outbox ghost without command/,
    ],
    ["queued with a running lifecycle", (r) => void (r.cmd("c2").lifecycle = L.RUNNING), /c2 queued with lifecycle 4/],
    ["running with an accepted lifecycle", (r) => void (r.cmd("c1").lifecycle = L.ACCEPTED), /c1 running with lifecycle 3/],
    [
      "stdin pending out of order",
      (r) =>
        void ((r.cmd("c1").stdin.next = 3),
        (r.cmd("c1").stdin.pending = [
          { seq: 2, data: new Uint8Array(0), close: false },
          { seq: 1, data: new Uint8Array(0), close: false },
        ])),
      /c1 stdin pending order/,
    ],
    [
      "stdin pending at or beyond next",
      (r) => void (r.cmd("c1").stdin.pending = [{ seq: 1, data: new Uint8Array(0), close: false }]),
      /c1 stdin pending order/,
    ],
    ["stdin bytes drift", (r) => void (r.cmd("c1").stdin.pendingBytes = 1), /c1 stdin bytes drift/],
    [
      "stdin over budget",
      (r) =>
        void ((r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, stdinPendingPerCommand: 0 } }),
        (r.cmd("c1").stdin.next = 2),
        (r.cmd("c1").stdin.pending = [{ seq: 1, data: new Uint8Array(1), close: false }]),
        (r.cmd("c1").stdin.pendingBytes = 1)),
      /c1 stdin over budget/,
    ],
    [
      "script received beyond size",
      (r) => void ((r.cmd("c2").script!.received = 11), (r.cmd("c2").script!.chunks = [new Uint8Array(11)])),
      /c2 script over size/,
    ],
    ["script chunks drift", (r) => void (r.cmd("c2").script!.received = 3), /c2 script chunks drift/],
    ["running over max", (r) => void (r.st.config = { ...r.st.config, maxRunning: 0 }), /running 1 over max 0/],
    ["metadata drift", (r) => void (r.st.metadataUsed += 1), /metadata budget drift/],
    ["metadata exceeded", (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, metadataBudget: 1 } }), /metadata budget exceeded/],
    ["script budget drift", (r) => void (r.st.scriptBytes = 9), /script budget drift\/exceeded/],
    [
      "script budget exceeded",
      (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, scriptTotal: 9 } }),
      /script budget drift\/exceeded/,
    ],
  ];
  for (const [name, corrupt, message] of cases) {
    it(`refuses: ${name}`, () => {
      const r = healthy();
      corrupt(r);
      expect(() => agentInvariants(r.st)).toThrow(InvariantViolation);
      expect(() => agentInvariants(r.st)).toThrow(message);
    });
  }

  it("accepts a done command with a terminal lifecycle and a prepared script whose chunks were dropped", () => {
    const r = healthy();
    r.exit("c1", 0);
    expect(r.cmd("c1").phase).toBe("done");
    r.cmd("c2").script!.path = "/scripts/c2";
    r.cmd("c2").script!.received = 10;
    agentInvariants(r.st);
  });

  it("accepts snapshot tombstone hits exactly at the ledger's bound (n), as it refuses n + 1 above", () => {
    const r = healthy();
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, maxTombstones: 2 } };
    r.st.pendingSnapshotTombstones = [
      { uuid: "t1", hash: "h" },
      { uuid: "t2", hash: "h" },
    ];
    agentInvariants(r.st);
  });
});

describe("agent invariants: phases and stdin order", () => {
  function rig(): AgentRig {
    const r = new AgentRig({ maxRunning: 2 });
    r.establish();
    return r;
  }
  it("refuses a launching or preparing command whose lifecycle is not accepted", () => {
    const a = rig();
    a.autoDurable = false;
    a.dispatch("c1");
    expect(a.cmd("c1").phase).toBe("launching");
    a.cmd("c1").lifecycle = L.RUNNING;
    expect(() => agentInvariants(a.st)).toThrow(/c1 launching with lifecycle 4/);
    const p = rig();
    const body = new Uint8Array(4);
    p.dispatch("s1", { program: { case: "script", value: { sizeBytes: 4n, sha256: sha(body), interpreter: "/bin/sh" } } });
    p.frame(chunk("s1", 0, body));
    p.frame(commit("s1", 4, sha(body)));
    expect(p.cmd("s1").phase).toBe("preparing");
    p.cmd("s1").lifecycle = L.RUNNING;
    expect(() => agentInvariants(p.st)).toThrow(/s1 preparing with lifecycle 4/);
  });

  it("counts launching and preparing commands as running against maxRunning", () => {
    const a = rig();
    a.autoDurable = false;
    a.dispatch("c1");
    a.st.config = { ...a.st.config, maxRunning: 0 };
    expect(() => agentInvariants(a.st)).toThrow(/running 1 over max 0/);
    const p = rig();
    const body = new Uint8Array(4);
    p.dispatch("s1", { program: { case: "script", value: { sizeBytes: 4n, sha256: sha(body), interpreter: "/bin/sh" } } });
    p.frame(chunk("s1", 0, body));
    p.frame(commit("s1", 4, sha(body)));
    p.st.config = { ...p.st.config, maxRunning: 0 };
    expect(() => agentInvariants(p.st)).toThrow(/running 1 over max 0/);
  });

  it("refuses two pending stdin items with the same seq", () => {
    const r = rig();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.cmd("c1").stdin = {
      next: 3,
      pending: [
        { seq: 1, data: new Uint8Array(0), close: false },
        { seq: 1, data: new Uint8Array(0), close: false },
      ],
      pendingBytes: 0,
      inFlight: false,
      closed: false,
    };
    expect(() => agentInvariants(r.st)).toThrow(/c1 stdin pending order/);
  });
});
