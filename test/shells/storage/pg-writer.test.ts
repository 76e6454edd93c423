// The PostgreSQL writer's retries (shells/storage/pg-writer.ts) against a
// fake database: a failure it can wait out is retried after reconnecting
// with backoff, a transaction whose COMMIT answer was lost is detected by
// the writer's row and not applied twice, and a failure waiting cannot mend
// is thrown at once. The same cases on a real PostgreSQL are in
// test/shells/e2e/pg-failures.test.ts.
import { describe, expect, it } from "vitest";
import { describeDbError, PgWriter, type Query, transientDbError, type WriterConn } from "../../../shells/storage/pg-writer.js";

/** A database error as node-postgres reports one (severity and SQLSTATE). */
function dbError(code: string, message = `error ${code}`): Error {
  return Object.assign(new Error(message), { code, severity: "ERROR" });
}
const lost = () => new Error("Connection terminated unexpectedly");

type Fault = { on: "connect" | "statement" | "commit-lost" | "commit-then-drop" | "mark"; err: Error };

/** One database: its committed statements, this writer's row, and faults to hand out in order. */
class FakeDb {
  applied: string[] = [];
  through = new Map<string, number>();
  faults: Fault[] = [];
  connects = 0;
  conns: FakeConn[] = [];

  take(on: Fault["on"]): Error | null {
    const i = this.faults.findIndex((f) => f.on === on);
    return i < 0 ? null : this.faults.splice(i, 1)[0]!.err;
  }

  async connect(): Promise<FakeConn> {
    this.connects++;
    const err = this.take("connect");
    if (err) throw err;
    const c = new FakeConn(this);
    this.conns.push(c);
    return c;
  }
}

class FakeConn implements WriterConn {
  ended = false;
  private tx: Array<() => void> | null = null;
  private listeners: Array<(err: Error) => void> = [];
  constructor(private readonly db: FakeDb) {}

  on(_event: "error", f: (err: Error) => void): this {
    this.listeners.push(f);
    return this;
  }

  /** The server ends this connection (a restart): 'error', as node-postgres emits it. */
  drop(err: Error): void {
    this.ended = true;
    for (const f of this.listeners) f(err);
  }

  async end(): Promise<void> {
    this.ended = true;
  }

  /** A statement of the open transaction failed: as in PostgreSQL, the rest fail and COMMIT rolls back. */
  private aborted = false;

  async query(text: string, values: unknown[] = []): Promise<{ rows: Array<Record<string, unknown>>; command?: string }> {
    if (this.ended) throw new Error("Client has encountered a connection error and is not queryable");
    if (this.aborted && text !== "ROLLBACK" && text !== "COMMIT")
      throw new Error("current transaction is aborted, commands ignored until end of transaction block");
    if (text === "BEGIN") this.tx = [];
    else if (text === "ROLLBACK") {
      this.tx = null;
      this.aborted = false;
    } else if (text === "COMMIT" && this.aborted) {
      this.tx = null;
      this.aborted = false;
      return { rows: [], command: "ROLLBACK" };
    } else if (text === "COMMIT") {
      const lostAnswer = this.db.take("commit-lost");
      const dropAfter = this.db.take("commit-then-drop");
      for (const f of this.tx ?? []) f();
      this.tx = null;
      // The answer and the server's goodbye in one read: node-postgres emits 'error' before the query's promise settles.
      if (dropAfter) this.drop(dropAfter);
      if (lostAnswer) {
        this.ended = true;
        throw lostAnswer;
      }
    } else if (text.startsWith("SELECT through")) return { rows: [{ through: String(this.db.through.get(values[0] as string) ?? 0) }] };
    else if (text.startsWith("INSERT INTO rvbox_writer")) {
      const err = this.db.take("mark");
      if (err) {
        this.aborted = true;
        throw err;
      }
      this.tx!.push(() => this.db.through.set(values[0] as string, values[1] as number));
    } else {
      const err = this.db.take("statement");
      if (err) {
        this.aborted = true;
        throw err;
      }
      this.tx!.push(() => this.db.applied.push(text));
    }
    return { rows: [] };
  }
}

function rig(db: FakeDb, limits = { retryMinMs: 10, retryMaxMs: 40 }) {
  const log: string[] = [];
  const sleeps: number[] = [];
  const w = new PgWriter("e1", new FakeConn(db), {
    connect: () => db.connect(),
    down: (reason) => log.push(`down: ${reason}`),
    up: () => log.push("up"),
    fail: (err) => log.push(`fail: ${String(err)}`),
    limits: () => limits,
    sleep: async (ms) => {
      sleeps.push(ms);
    },
  });
  return { w, log, sleeps };
}

const q = (text: string): Query => ({ text, values: [] });

describe("PgWriter", () => {
  it("commits each group's statements with its row, and counts the groups", async () => {
    const db = new FakeDb();
    const { w, log } = rig(db);
    await w.commit([q("a1"), q("a2")]);
    await w.commit([q("b1")]);
    expect(db.applied).toEqual(["a1", "a2", "b1"]);
    expect(db.through.get("e1")).toBe(2);
    expect(w.committed).toBe(2);
    expect(log).toEqual([]);
  });

  it("a statement refused for a reason waiting mends (disk full) is retried on a new connection, applied once, after reporting the store down", async () => {
    const db = new FakeDb();
    db.faults.push({ on: "statement", err: dbError("53100", "could not extend file: No space left on device") });
    const { w, log, sleeps } = rig(db);
    await w.commit([q("a1"), q("a2")]);
    expect(db.applied).toEqual(["a1", "a2"]);
    expect(db.through.get("e1")).toBe(1);
    expect(log).toEqual(["down: could not extend file: No space left on device (53100)"]);
    expect(sleeps).toEqual([10]);
    expect(db.connects).toBe(1);
  });

  it("a COMMIT whose answer was lost with the connection is found committed by the writer's row and not applied again", async () => {
    const db = new FakeDb();
    const { w, log } = rig(db);
    await w.commit([q("a1")]);
    db.faults.push({ on: "commit-lost", err: lost() });
    await w.commit([q("b1")]);
    await w.commit([q("c1")]);
    expect(db.applied).toEqual(["a1", "b1", "c1"]);
    expect(db.through.get("e1")).toBe(3);
    expect(log).toEqual(["down: Connection terminated unexpectedly"]);
  });

  it("a connection lost before COMMIT leaves the group uncommitted: it is applied after reconnecting", async () => {
    const db = new FakeDb();
    const { w } = rig(db);
    db.faults.push({ on: "mark", err: lost() });
    await w.commit([q("a1")]);
    expect(db.applied).toEqual(["a1"]);
    expect(db.through.get("e1")).toBe(1);
  });

  it("reconnects with a backoff that doubles from retryMinMs and stays at retryMaxMs", async () => {
    const db = new FakeDb();
    db.faults.push({ on: "statement", err: lost() });
    for (let i = 0; i < 5; i++)
      db.faults.push({ on: "connect", err: Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" }) });
    const { w, log, sleeps } = rig(db, { retryMinMs: 10, retryMaxMs: 40 });
    await w.commit([q("a1")]);
    expect(sleeps).toEqual([10, 20, 40, 40, 40, 40]);
    expect(db.applied).toEqual(["a1"]);
    expect(log.at(-1)).toBe("down: connect ECONNREFUSED 127.0.0.1:5432 (ECONNREFUSED)");
  });

  it("a database that connects but takes no writes (read-only) is waited out at the row's check, not reported back", async () => {
    const db = new FakeDb();
    db.faults.push({ on: "statement", err: dbError("25006", "cannot execute INSERT in a read-only transaction") });
    db.faults.push({ on: "mark", err: dbError("25006", "cannot execute INSERT in a read-only transaction") });
    db.faults.push({ on: "mark", err: dbError("25006", "cannot execute INSERT in a read-only transaction") });
    const { w, sleeps } = rig(db);
    await w.commit([q("a1")]);
    expect(sleeps).toEqual([10, 20, 40]);
    expect(db.applied).toEqual(["a1"]);
  });

  it("a failure waiting cannot mend (a constraint the rows break) is thrown at once, rolled back, never retried", async () => {
    const db = new FakeDb();
    db.faults.push({ on: "statement", err: dbError("23514", 'new row violates check constraint "no_more"') });
    const { w, log, sleeps } = rig(db);
    await expect(w.commit([q("a1"), q("a2")])).rejects.toThrow("no_more");
    expect(db.applied).toEqual([]);
    expect(sleeps).toEqual([]);
    expect(log).toEqual([]);
  });

  it("a connection lost while idle is reported down, reconnected, and reported up once writes are accepted again", async () => {
    const db = new FakeDb();
    const first = new FakeConn(db);
    const log: string[] = [];
    const w = new PgWriter("e1", first, {
      connect: () => db.connect(),
      down: (r) => log.push(`down: ${r}`),
      up: () => log.push("up"),
      fail: (e) => log.push(`fail: ${String(e)}`),
      limits: () => ({ retryMinMs: 1, retryMaxMs: 1 }),
      sleep: async () => {},
    });
    await w.commit([q("a1")]);
    db.faults.push({ on: "mark", err: dbError("25006") });
    first.drop(dbError("57P01", "terminating connection due to administrator command"));
    await w.commit([q("b1")]); // waits for the reconnect in progress
    // Every failure is told (the store logs only the change); up only once the row could be written.
    expect(log).toEqual(["down: terminating connection due to administrator command (57P01)", "down: error 25006 (25006)", "up"]);
    expect(db.applied).toEqual(["a1", "b1"]);
    expect(db.through.get("e1")).toBe(2);
  });

  it("a connection ended right after COMMIT was answered: the group counts as committed, and the writer reconnects before it says it is back", async () => {
    const db = new FakeDb();
    const { w, log } = rig(db);
    db.faults.push({ on: "commit-then-drop", err: dbError("57P01", "terminating connection due to administrator command") });
    await w.commit([q("a1")]);
    expect(db.applied).toEqual(["a1"]);
    expect(w.connected).toBe(false);
    await w.commit([q("b1")]); // waits for the reconnect started when a1's commit returned
    expect(log).toEqual(["down: terminating connection due to administrator command (57P01)", "up"]);
    expect(w.connected).toBe(true);
    expect(db.applied).toEqual(["a1", "b1"]);
  });

  it("abort ends a retry in progress: the commit rejects (never committed, never acknowledged)", async () => {
    const db = new FakeDb();
    db.faults.push({ on: "statement", err: lost() });
    let wake: () => void = () => {};
    const w = new PgWriter("e1", new FakeConn(db), {
      connect: () => db.connect(),
      down: () => {},
      up: () => {},
      fail: () => {},
      limits: () => ({ retryMinMs: 1_000_000, retryMaxMs: 1_000_000 }),
      sleep: () => new Promise((r) => (wake = r as () => void)),
    });
    const c = w.commit([q("a1")]);
    await new Promise((r) => setTimeout(r, 5));
    w.abort();
    await expect(c).rejects.toThrow("never committed");
    wake();
    expect(db.applied).toEqual([]);
  });

  it("tells failures to wait out from the rest", () => {
    for (const code of ["08006", "53100", "53200", "57P01", "57P03", "57014", "58030", "40001", "40P01", "25006", "55P03", "42501"])
      expect(transientDbError(dbError(code)), code).toBe(true);
    for (const code of ["23505", "23514", "22P02", "42P01", "42703", "XX000", "08P01"]) expect(transientDbError(dbError(code)), code).toBe(false);
    expect(transientDbError(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }))).toBe(true);
    expect(transientDbError(lost())).toBe(true);
    expect(transientDbError(new Error("timeout expired"))).toBe(true);
    expect(transientDbError(new TypeError("Do not know how to serialize a BigInt"))).toBe(false);
    expect(transientDbError("not an error")).toBe(false);
    expect(describeDbError(dbError("53100", "disk full"))).toBe("disk full (53100)");
  });
});
