// Stdin writes the server has taken but the agent has not acknowledged are
// stored once each, in table `stdin`, and survive a server restart byte-exact
// (R-S1: durable, ordered by write_seq); the command record, rewritten with
// every event, never carries their bytes. Chained writes (after_request_id)
// let an operator's CLI keep several in flight without reordering them.
import { describe, expect, it } from "vitest";
import { Code } from "../../../core/errors.js";
import { CONTROL_STDIN_WRITE_BYTES, MAX_CHUNK_BYTES } from "../../../core/limits.js";
import type { CommandRow, StdinRow } from "../../../core/server/store.js";
import { Harness } from "../../support/harness.js";
import { restoreServer } from "../../../core/index.js";
import type { ServerTables } from "../../../core/server/store.js";
import type { StdinWrite } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { ServerRig, argv } from "../../support/server-rig.js";

const enc = (s: string) => new TextEncoder().encode(s);
const text = (bs: Uint8Array[]) => new TextDecoder().decode(Buffer.concat(bs));

function stdinRows(h: Harness): Map<string, StdinRow> {
  return (h.serverDisk.durable.get("stdin") ?? new Map()) as Map<string, StdinRow>;
}
function commandRow(h: Harness, uuid: string): CommandRow {
  return h.serverDisk.durable.get("command")!.get(uuid) as CommandRow;
}

/** A running `cat` on agent a with open stdin, its link then cut: writes are taken but never acknowledged. */
function offlineCat(): Harness {
  const h = new Harness();
  h.addAgent("a");
  h.submit("a", "c1", { argv: ["cat"], stdinOpen: true });
  expect(h.agents.get("a")!.procs.get("c1")).toBeDefined();
  h.cutLink("a");
  return h;
}

describe("server stdin rows", () => {
  it("R-S1: each taken write is one stdin row; the command record holds no write bytes", () => {
    const h = offlineCat();
    for (const [i, s] of ["one\n", "two\n", "three\n"].entries())
      expect(h.control({ op: "stdin", requestId: `w${i}`, uuid: "c1", data: enc(s), appendNewline: false })).toMatchObject({ ok: true, writeSeq: i + 1 });
    const rows = [...stdinRows(h).values()].sort((a, b) => a.seq - b.seq);
    expect(rows.map((r) => [r.seq, new TextDecoder().decode(r.data)])).toEqual([
      [1, "one\n"],
      [2, "two\n"],
      [3, "three\n"],
    ]);
    expect(commandRow(h, "c1").stdin).toMatchObject({ nextSeq: 4, ackedThrough: 0, queue: [], queuedBytes: 14 });
  });

  it("R-S1: writes taken before a server restart reach the process after it, in order and byte-exact, and their rows go once acknowledged", () => {
    const h = offlineCat();
    h.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("alpha\n"), appendNewline: false });
    h.control({ op: "stdin", requestId: "w2", uuid: "c1", data: enc("beta"), appendNewline: true });
    h.control({ op: "close_stdin", requestId: "cl", uuid: "c1" });
    h.restartServer();
    h.reconnectNow("a");
    const p = h.agents.get("a")!.procs.get("c1")!;
    expect(text(p.stdin)).toBe("alpha\nbeta\n");
    expect(p.stdinClosed).toBe(true);
    expect(stdinRows(h).size).toBe(0);
    expect(commandRow(h, "c1").stdin).toMatchObject({ ackedThrough: 3, queue: [], queuedBytes: 0 });
  });

  it("R-S1: a record written before stdin rows (its queue holding the bytes) restores, delivers its writes, and keeps later ones in rows", () => {
    const h = offlineCat();
    h.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("old-1\n"), appendNewline: false });
    h.control({ op: "stdin", requestId: "w2", uuid: "c1", data: enc("old-2\n"), appendNewline: false });
    // Rewrite the disk as an older server left it: the writes inside the record, no stdin table.
    const row = commandRow(h, "c1");
    row.stdin.queue = [...stdinRows(h).values()].sort((a, b) => a.seq - b.seq).map((o) => ({ ...o }));
    h.serverDisk.durable.delete("stdin");
    h.restartServer();
    expect(h.control({ op: "stdin", requestId: "w3", uuid: "c1", data: enc("new-3\n"), appendNewline: false })).toMatchObject({ ok: true, writeSeq: 3 });
    expect([...stdinRows(h).values()].map((r) => r.seq)).toEqual([3]);
    expect(commandRow(h, "c1").stdin.queue.map((o) => o.seq)).toEqual([1, 2]); // the legacy ones stay inline until acknowledged
    h.restartServer(); // a second restart reads both kinds
    h.reconnectNow("a");
    expect(text(h.agents.get("a")!.procs.get("c1")!.stdin)).toBe("old-1\nold-2\nnew-3\n");
    expect(stdinRows(h).size).toBe(0);
    expect(commandRow(h, "c1").stdin.queue).toEqual([]);
  });

  it("R-S1: a command that ends with writes still queued leaves no stdin rows behind", () => {
    const h = offlineCat();
    h.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("x"), appendNewline: false });
    expect(stdinRows(h).size).toBe(1);
    h.exit("a", "c1", 0);
    h.reconnectNow("a");
    expect(h.command("c1").state).toBe("succeeded");
    expect(stdinRows(h).size).toBe(0);
  });
});

describe("stdin rows read back in any order", () => {
  it("R-S1: rows may come back from the store in any order (here reversed); the writes still reach the agent by write_seq", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.running(a, "c1", { ...argv("cat"), stdinOpen: true });
    r.step({ type: "conn_closed", conn: a, reason: "cut" });
    for (let i = 1; i <= 12; i++) r.control({ op: "stdin", requestId: `w${i}`, uuid: "c1", data: enc(`line ${i}\n`), appendNewline: false });
    const stored = r.disk.tables();
    const reversed: ServerTables = { get: (t) => new Map([...(stored.get(t) ?? [])].reverse()) };
    r.st = restoreServer(r.cfg, reversed, 2);
    const b = r.open();
    r.hello(b, "a");
    const out = r.snapshot(b, [
      // setup: the request's own hash
      { issueUuid: "c1", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: Buffer.from(r.cmd("c1").hash, "hex") },
    ]);
    const writes = r.sent(out, b, "stdinWrite").map((w) => w.env.payload.value as StdinWrite);
    expect(writes.map((w) => Number(w.writeSeq))).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(writes.map((w) => new TextDecoder().decode(w.data))).toEqual(Array.from({ length: 12 }, (_, i) => `line ${i + 1}\n`));
  });
});

describe("large stdin writes", () => {
  it("R-S1: a write over 64 KiB takes one write_seq per 64 KiB, reaches the process byte-exact, and its newline comes once, after the last piece", () => {
    const h = offlineCat();
    const big = new Uint8Array(2 * MAX_CHUNK_BYTES + 1000).map((_, i) => (i * 7 + 3) % 251);
    expect(h.control({ op: "stdin", requestId: "big", uuid: "c1", data: big, appendNewline: true })).toMatchObject({ ok: true, writeSeq: 3 });
    expect([...stdinRows(h).values()].map((r) => [r.seq, r.data.length, r.appendNewline])).toEqual([
      [1, MAX_CHUNK_BYTES, false],
      [2, MAX_CHUNK_BYTES, false],
      [3, 1000, true],
    ]);
    // Its retry answers with the last write_seq it took, and takes nothing more.
    expect(h.control({ op: "stdin", requestId: "big", uuid: "c1", data: big, appendNewline: true })).toMatchObject({ ok: true, writeSeq: 3 });
    expect(h.control({ op: "stdin", requestId: "next", uuid: "c1", data: enc("z"), appendNewline: false, afterRequestId: "big" })).toMatchObject({
      ok: true,
      writeSeq: 4,
    });
    h.reconnectNow("a");
    const got = Buffer.concat(h.agents.get("a")!.procs.get("c1")!.stdin);
    expect(got.equals(Buffer.concat([big, enc("\nz")]))).toBe(true);
    expect(stdinRows(h).size).toBe(0);
  });

  it("R-S1: a write over CONTROL_STDIN_WRITE_BYTES is refused whole", () => {
    const h = offlineCat();
    expect(h.control({ op: "stdin", requestId: "w", uuid: "c1", data: new Uint8Array(CONTROL_STDIN_WRITE_BYTES + 1), appendNewline: false })).toMatchObject({
      ok: false,
      error: { code: Code.PAYLOAD_TOO_LARGE },
    });
    // Nothing was taken: the next write gets write_seq 1.
    expect(h.control({ op: "stdin", requestId: "w2", uuid: "c1", data: enc("x"), appendNewline: false })).toMatchObject({ ok: true, writeSeq: 1 });
  });
});

describe("chained stdin writes (after_request_id)", () => {
  it("R-S1: a write chained to one not yet taken is refused and records nothing; resent after it, it is taken", () => {
    const h = offlineCat();
    const w = (id: string, s: string, after?: string) =>
      h.control({ op: "stdin", requestId: id, uuid: "c1", data: enc(s), appendNewline: false, ...(after !== undefined ? { afterRequestId: after } : {}) });
    expect(w("w2", "second", "w1")).toMatchObject({ ok: false, error: { code: Code.SEQUENCE_VIOLATION } });
    // No write_seq was taken: w1 gets 1 below.
    expect(stdinRows(h).size).toBe(0);
    expect(w("w1", "first")).toMatchObject({ ok: true, writeSeq: 1 });
    expect(w("w2", "second", "w1")).toMatchObject({ ok: true, writeSeq: 2 });
    // A retry of a taken write answers with its write_seq, whatever it is chained to now.
    expect(w("w1", "first", "nothing")).toMatchObject({ ok: true, writeSeq: 1 });
    h.reconnectNow("a");
    expect(text(h.agents.get("a")!.procs.get("c1")!.stdin)).toBe("firstsecond");
  });

  it("R-S1: a write chained to one another writer's write has followed is refused, so the chain's writer notices", () => {
    const h = offlineCat();
    const w = (id: string, s: string, after?: string) =>
      h.control({ op: "stdin", requestId: id, uuid: "c1", data: enc(s), appendNewline: false, ...(after !== undefined ? { afterRequestId: after } : {}) });
    expect(w("mine-1", "a")).toMatchObject({ ok: true, writeSeq: 1 });
    expect(w("theirs", "X")).toMatchObject({ ok: true, writeSeq: 2 });
    expect(w("mine-2", "b", "mine-1")).toMatchObject({ ok: false, error: { code: Code.SEQUENCE_VIOLATION } });
  });
});
