// Scripts at the agent.
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultAgentConfig, type AgentConfig, type AgentEffect } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { MAX_CHUNK_BYTES } from "../../../core/limits.js";
import {
  T0,
  sha,
  type SpecInit,
  sends,
  accepts,
  errorsIn,
  eventsIn,
  lifecycles,
  of,
  AgentRig,
  expectClosed,
  expectRefused,
  signal,
  chunk,
  commit,
} from "./rig.js";

describe("scripts at the agent", () => {
  const body = new Uint8Array(100).map((_, i) => (i * 13) % 251);
  const scriptDesc = (digest = sha(body), size = 100): SpecInit => ({
    program: { case: "script", value: { sizeBytes: BigInt(size), sha256: digest, interpreter: "/bin/sh" } },
  });
  const progress = (effects: AgentEffect[]) =>
    eventsIn(effects)
      .filter((e) => e.event.case === "scriptUpload")
      .map((e) => {
        const v = e.event.value as { receivedBytes: bigint; complete: boolean };
        return [Number(v.receivedBytes), v.complete];
      });
  function withScript(over: Partial<AgentConfig> = {}, desc = scriptDesc()): AgentRig {
    const r = new AgentRig(over);
    r.establish();
    r.dispatch("s1", desc);
    expect(r.spawned(), "waits for its script").toEqual([]);
    return r;
  }

  it("R-C2: script frames for an argv command are VALIDATION, for an unknown one NOT_FOUND; neither closes", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    expectRefused(r, r.frame(chunk("c1", 0, body)), Code.VALIDATION);
    expect(errorsIn(r.frame(commit("c1", 100, sha(body))))[0]!.error).toMatchObject({ code: Code.VALIDATION, message: "c1 is not a script command" });
    expectRefused(r, r.frame(chunk("nope", 0, body)), Code.NOT_FOUND);
    expectRefused(r, r.frame(commit("nope", 100, sha(body))), Code.NOT_FOUND);
  });

  it("R-C3: chunks append in order with a durable cumulative progress event each; an empty chunk changes nothing", () => {
    const r = withScript();
    const a = r.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(progress(a)).toEqual([[40, false]]);
    expect(
      of(a, "persist")
        .flatMap((p) => p.records)
        .filter((x) => x.table === "chunk")
        .map((x) => x.key),
    ).toEqual(["s1/0000000000000000"]);
    const e = r.frame(chunk("s1", 40, new Uint8Array(0)));
    expect(progress(e)).toEqual([]);
    const b = r.frame(chunk("s1", 40, body.subarray(40, 100)));
    expect(progress(b)).toEqual([[100, false]]);
    expect(errorsIn(r.probe(chunk("s1", 101, new Uint8Array([1]))))[0]?.error?.message).toBe("script chunk at 101, expected 100");
  });

  it("R-C3: a resent chunk with the same bytes is ignored; different bytes, or one reaching past what was received, reject", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(sends(r.frame(chunk("s1", 0, body.subarray(0, 40))))).toEqual([]);
    expect(sends(r.frame(chunk("s1", 10, body.subarray(10, 30))))).toEqual([]);
    expect(errorsIn(r.probe(chunk("s1", 41, body.subarray(41, 42))))[0]?.error?.message, "still at 40").toBe("script chunk at 41, expected 40");
    const diff = new Uint8Array(body.subarray(10, 30));
    diff[3] = diff[3]! ^ 1;
    const out = r.frame(chunk("s1", 10, diff));
    expect(lifecycles(out, "s1")).toEqual([
      expect.objectContaining({
        state: L.REJECTED,
        reason: "script chunk at 10 differs from the bytes already received",
        error: expect.objectContaining({ code: Code.VALIDATION }),
      }),
    ]);
    const o = withScript();
    o.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(lifecycles(o.frame(chunk("s1", 30, body.subarray(30, 50))), "s1")[0]!.state).toBe(L.REJECTED);
  });

  it("R-C3: a chunk after a gap is SEQUENCE_VIOLATION without closing; an impossible offset closes", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 40)));
    const out = r.frame(chunk("s1", 41, body.subarray(41, 50)));
    expectRefused(r, out, Code.SEQUENCE_VIOLATION);
    expect(errorsIn(out)[0]!.error?.message).toBe("script chunk at 41, expected 40");
    const u = withScript();
    expectClosed(u, u.frame(chunk("s1", 2n ** 60n, body.subarray(0, 10))), Code.SEQUENCE_VIOLATION, "script chunk offset out of range");
  });

  it("R-T2 R-C3: a chunk over 64 KiB is PAYLOAD_TOO_LARGE and closes; exactly 64 KiB is accepted", () => {
    const big = new Uint8Array(MAX_CHUNK_BYTES + 1).fill(1);
    const r = withScript({}, scriptDesc(sha(big), big.length));
    expectClosed(r, r.frame(chunk("s1", 0, big)), Code.PAYLOAD_TOO_LARGE, `script chunk of ${MAX_CHUNK_BYTES + 1} bytes`);
    const ok = withScript({}, scriptDesc(sha(big), big.length));
    expect(progress(ok.frame(chunk("s1", 0, big.subarray(0, MAX_CHUNK_BYTES))))).toEqual([[MAX_CHUNK_BYTES, false]]);
  });

  it("R-C4: a chunk whose digest does not match, or bytes past the declared size, reject the command before any launch", () => {
    const r = withScript();
    const out = r.frame(chunk("s1", 0, body.subarray(0, 40), sha("something else")));
    expect(lifecycles(out, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script chunk at 0: SHA-256 mismatch" })]);
    const long = withScript({}, scriptDesc(sha(body), 50));
    long.frame(chunk("s1", 0, body.subarray(0, 40)));
    const past = long.frame(chunk("s1", 40, body.subarray(40, 51)));
    expect(lifecycles(past, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script longer than its declared 50 bytes" })]);
    // exactly the declared size is fine
    const exact = withScript({}, scriptDesc(sha(body.subarray(0, 50)), 50));
    exact.frame(chunk("s1", 0, body.subarray(0, 40)));
    expect(progress(exact.frame(chunk("s1", 40, body.subarray(40, 50))))).toEqual([[50, false]]);
    expect(of(r.log, "spawn")).toEqual([]);
  });

  it("R-C3: a commit before every byte arrived is SEQUENCE_VIOLATION (no close); a wrong size or digest rejects", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 40)));
    const early = r.frame(commit("s1", 100, sha(body)));
    expectRefused(r, early, Code.SEQUENCE_VIOLATION);
    expect(errorsIn(early)[0]!.error?.message).toBe("script commit at 40 of 100 bytes");
    const size = r.frame(commit("s1", 99, sha(body)));
    expect(lifecycles(size, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script commit size 99 != declared 100" })]);

    const d = withScript();
    d.frame(chunk("s1", 0, body));
    expect(lifecycles(d.frame(commit("s1", 100, sha("x"))), "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script SHA-256 mismatch" })]);

    // Every chunk matches its own digest but the whole does not match the descriptor.
    const w = withScript({}, scriptDesc(sha("another script")));
    w.frame(chunk("s1", 0, body));
    expect(lifecycles(w.frame(commit("s1", 100, sha("another script"))), "s1")[0]).toMatchObject({ state: L.REJECTED, reason: "script SHA-256 mismatch" });
  });

  it("R-C2: a committed script is written out, prepared, then launched from its path; its journaled chunks are deleted", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body.subarray(0, 60)));
    r.frame(chunk("s1", 60, body.subarray(60)));
    const out = r.frame(commit("s1", 100, sha(body)));
    expect(progress(out)).toEqual([[100, true]]);
    expect(r.spawned(), "preparing: not launched before the file is written").toEqual([]);
    expect(of(out, "write_script")).toEqual([{ type: "write_script", uuid: "s1", data: body, sha256: sha(body) }]);
    // Later frames for a committed script change nothing.
    expect(sends(r.frame(chunk("s1", 100, new Uint8Array([1]))))).toEqual([]);
    expect(sends(r.frame(commit("s1", 100, sha(body))))).toEqual([]);
    expect(r.step({ type: "script_failed", uuid: "other", reason: "x" }).some((e) => e.type === "persist")).toBe(false);
    const prep = r.step({ type: "script_prepared", uuid: "s1", path: "/run/s1.sh" });
    expect(
      of(prep, "persist")
        .flatMap((p) => p.records)
        .filter((x) => x.table === "chunk"),
    ).toEqual([
      { table: "chunk", key: "s1/0000000000000000", value: null },
      { table: "chunk", key: "s1/0000000000000060", value: null },
    ]);
    expect(of(prep, "spawn")).toEqual([expect.objectContaining({ uuid: "s1", scriptPath: "/run/s1.sh" })]);
    expect([...(r.disk.durable.get("chunk")?.keys() ?? [])].filter((k) => k.startsWith("s1/"))).toEqual([]);
    // A second report is ignored (not preparing any more).
    expect(r.step({ type: "script_prepared", uuid: "s1", path: "/elsewhere" }).some((e) => e.type === "spawn")).toBe(false);
    r.step({ type: "process_started", uuid: "s1", pid: 8 });
    const fin = r.exit("s1", 0);
    expect(of(fin, "discard_script")).toEqual([{ type: "discard_script", uuid: "s1", path: "/run/s1.sh" }]);
  });

  it("R-C4: a preparation failure rejects; a command cancelled during upload deletes its journaled chunks", () => {
    const budget = (): Partial<AgentConfig> => ({ limits: { ...defaultAgentConfig("agent-1").limits, scriptTotal: 100 } }); // room for exactly this script
    const another = (x: AgentRig, size: number) => accepts(x.probe(x.dispatchPayload("s2", scriptDesc(sha("s2"), size))))[0];
    const r = withScript(budget());
    r.frame(chunk("s1", 0, body));
    r.frame(commit("s1", 100, sha(body)));
    const out = r.step({ type: "script_failed", uuid: "s1", reason: "EACCES" });
    expect(lifecycles(out, "s1")).toEqual([
      expect.objectContaining({ state: L.REJECTED, reason: "could not prepare script: EACCES", error: expect.objectContaining({ code: Code.VALIDATION }) }),
    ]);
    // Its script storage is released only when retired: one more byte does not fit yet.
    expect(another(r, 1)?.rejection?.message).toBe("script storage budget full");

    const c = withScript(budget());
    c.frame(chunk("s1", 0, body.subarray(0, 30)));
    const cancel = c.frame(signal("s1", 2n, SignalKind.CANCEL));
    expect(of(cancel, "persist").flatMap((p) => p.records)).toContainEqual({ table: "chunk", key: "s1/0000000000000000", value: null });
    expect([...(c.disk.durable.get("chunk")?.keys() ?? [])].filter((k) => k.startsWith("s1/"))).toEqual([]);
    expect(of(cancel, "discard_script")).toEqual([]);
    expect(sends(c.frame(chunk("s1", 30, body.subarray(30))))).toEqual([]); // done: ignored
    expect(another(c, 1)?.rejection?.message).toBe("script storage budget full");
    c.ackAll("s1");
    expect(another(c, 100)?.accepted, "retired: the whole budget is free again").toBe(true);
  });

  it("R-C2: preparing a script occupies a running slot, and a terminated prepared script's file is discarded", () => {
    const r = withScript({ maxRunning: 1 });
    r.frame(chunk("s1", 0, body));
    r.frame(commit("s1", 100, sha(body)));
    r.dispatch("c2");
    expect(r.spawned(), "c2 queued: the preparing script holds the slot").toEqual([]);
    r.step({ type: "script_prepared", uuid: "s1", path: "/p/s1" });
    expect(r.spawned()).toEqual(["s1"]);
    expect(r.lifecycleOf("s1"), "launching: its start not reported").toBe("");
    const out = r.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["s1"], discardLocalTerminalIssueUuids: [] },
    });
    expect(of(out, "discard_script")).toEqual([{ type: "discard_script", uuid: "s1", path: "/p/s1" }]);
    expect(of(out, "signal")).toEqual([]); // launching, no pid yet
    expect(of(out, "spawn").map((s) => s.uuid)).toEqual(["c2"]);
  });

  it("R-C4: a cancel while the script file is being written cancels it, and the file written after that is discarded, not run", () => {
    const r = withScript();
    r.frame(chunk("s1", 0, body));
    expect(of(r.frame(commit("s1", 100, sha(body))), "write_script")).toHaveLength(1); // preparing
    expect(r.spawned()).toEqual([]);
    const cancel = r.frame(signal("s1", 2n, SignalKind.CANCEL));
    expect(lifecycles(cancel, "s1")).toEqual([expect.objectContaining({ state: L.CANCELLED })]);
    // The shell finishes writing the file it was asked for: nobody will run it.
    const late = r.step({ type: "script_prepared", uuid: "s1", path: "/run/s1.sh" });
    expect(of(late, "spawn")).toEqual([]);
    expect(of(late, "discard_script")).toEqual([{ type: "discard_script", uuid: "s1", path: "/run/s1.sh" }]);
    // So too once the command is retired and forgotten.
    r.ackAll("s1");
    expect(of(r.step({ type: "script_prepared", uuid: "s1", path: "/run/s1b.sh" }), "discard_script")).toEqual([
      { type: "discard_script", uuid: "s1", path: "/run/s1b.sh" },
    ]);
  });

  it("R-D1: a preparing script's queue expiry still counts as a deadline and expires it", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("s1", scriptDesc(), { expiry: T0 + 3_000 });
    r.frame(chunk("s1", 0, body));
    const out = r.frame(commit("s1", 100, sha(body)));
    expect(of(out, "write_script")).toHaveLength(1); // preparing
    expect(r.spawned()).toEqual([]);
    expect(of(out, "wake").at(-1)!.at).toBe(T0 + 3_000);
    r.now = T0 + 3_000;
    r.step({ type: "tick" });
    expect(r.lifecycleOf("s1")).toBe("expired");
    expect(r.step({ type: "script_prepared", uuid: "s1", path: "/p" }).some((e) => e.type === "spawn")).toBe(false);
  });

  it("R-C3 R-F1: scripts across a crash: one being prepared is prepared again from its chunks; one prepared but left queued (an older script took the slot) keeps its file", () => {
    // Found from a mutant that survived the mutation run: removing the persist of a
    // prepared script's path (scripts.ts), which the launch in the same step usually
    // covers. Not when an older script takes the slot: s0 (dispatched first,
    // committed last) is prepared with it, and s1 waits, queued. Writing this test
    // showed a second defect: s0, preparing at the crash, was restored preparing,
    // and nothing wrote its file again, so it held its run slot until it expired.
    const r = new AgentRig({ maxRunning: 1, maxQueued: 4 });
    r.establish();
    const a = new TextEncoder().encode("echo a\n");
    const b = new TextEncoder().encode("echo b\n");
    const desc = (x: Uint8Array): SpecInit => ({ program: { case: "script", value: { sizeBytes: BigInt(x.length), sha256: sha(x), interpreter: "/bin/sh" } } });
    r.dispatch("s0", desc(a));
    r.dispatch("s1", desc(b));
    r.frame(chunk("s1", 0, b));
    expect(of(r.frame(commit("s1", b.length, sha(b))), "write_script").map((w) => w.uuid)).toEqual(["s1"]);
    r.frame(chunk("s0", 0, a));
    expect(of(r.frame(commit("s0", a.length, sha(a))), "write_script"), "no slot while s1 is prepared").toEqual([]);
    const prep = r.step({ type: "script_prepared", uuid: "s1", path: "/run/s1.sh" });
    expect(
      of(prep, "write_script").map((w) => w.uuid),
      "the freed slot prepares s0",
    ).toEqual(["s0"]);
    expect(of(prep, "spawn")).toEqual([]);
    // Crash now: s1's file is on disk and its chunks are deleted; its record must say so.
    const back = r.crashed();
    const started = back.step({ type: "start" });
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    back.reconcile([]);
    // s0 was being prepared: it is prepared again from its journaled chunks; s1 waits with its file.
    expect(of(started, "write_script").map((w) => [w.uuid, new TextDecoder().decode(w.data)])).toEqual([["s0", "echo a\n"]]);
    back.step({ type: "script_prepared", uuid: "s0", path: "/run/s0.sh" });
    expect(of(back.log, "spawn").map((x) => [x.uuid, x.scriptPath])).toEqual([["s0", "/run/s0.sh"]]);
    back.step({ type: "process_started", uuid: "s0", pid: 10 });
    const next = back.exit("s0", 0);
    expect(of(next, "spawn").map((x) => [x.uuid, x.scriptPath])).toEqual([["s1", "/run/s1.sh"]]);
  });
});
