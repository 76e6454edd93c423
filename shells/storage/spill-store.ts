/**
 * The agent's storage: kv rows (kv-store.ts) with large byte fields spilled
 * to append-only blob files.
 *
 * Why: sql.js writes a 64 KiB blob at about 25 MB/s (every page goes through
 * Emscripten's in-memory file system), and the agent persists every output
 * chunk twice (the raw entry, then the pinned compressed event). Keeping the
 * bytes in files and only a pointer in the row makes a persist cost a few
 * small row writes, and keeps the WASM heap small.
 *
 * What spills: top-level Uint8Array fields of a record value of at least
 * `threshold` bytes (entry.data, event.bytes, chunk.data, stdin.data). The
 * field is replaced by `{ $spill: [file, offset, length] }`; `loadTables`
 * puts the bytes back, so the core never sees a pointer.
 *
 * Write pipeline (group commit): everything queued is taken as one group and
 * reduced to its net effect per row (last write wins: the group becomes one
 * atomic db batch, so intermediate states are never visible, and a row
 * written and deleted inside the group costs nothing). The surviving blobs
 * are appended to the current file with one write and one fdatasync (plus a
 * directory fsync for a new file), then the batch is applied to the durable
 * db; when it is durable, `durable through` the group's last id is reported.
 * A row therefore never points at bytes that are not on stable storage.
 *
 * Space: files roll at `fileBytes`. Every live row's spilled blobs are
 * counted per file; a file no row references any more (entries are deleted
 * on admission, events on acknowledgement, so this is roughly FIFO) is
 * unlinked once the deletions are durable. At open, files no row references
 * are deleted; a referenced file that is missing or short is an
 * essential-store incident (R-D13): `damage` says which rows were dropped.
 */
import { GroupCommitter } from "./group-commit.js";
import { closeSync, openSync, readdirSync, readSync, fstatSync } from "node:fs";
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import type { PersistEffect, PersistRecord } from "../../core/index.js";
import { openDurableDb, type DurableDb, type Stmt } from "../store/index.js";
import { fsyncDir, writeAllParts } from "../store/fs-util.js";
import { KV_SCHEMA, LOAD_ALL, foldRecord, recordStmt, type PersistSink, type Tables } from "./kv-store.js";
import { decodeValue } from "./value-codec.js";

export const SPILL_DIR = "spill";

type Ptr = [file: number, offset: number, length: number];

export interface SpillStoreOptions {
  dir: string;
  threshold?: number;
  fileBytes?: number;
  checkpointEveryBytes?: number;
  /** Acknowledge a corrupt journal at open (see shells/store). */
  repair?: boolean;
}

interface OpenFile {
  no: number;
  fh: fsp.FileHandle;
  /** Bytes reserved (written or being written). */
  size: number;
}

const isPtr = (v: unknown): v is { $spill: Ptr } =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array) && Array.isArray((v as { $spill?: unknown }).$spill);

export class SpillStore implements PersistSink {
  readonly tables: Tables = new Map();
  /** Rows dropped at open because their spilled bytes were missing. */
  readonly damage: string[] = [];
  onDurable: (through: number) => void = () => {};
  onError: (err: unknown) => void = () => {};
  private readonly spillDir: string;
  private readonly threshold: number;
  private readonly fileBytes: number;
  private readonly writer = new GroupCommitter<PersistEffect>(
    (group) => this.commit(group),
    (err) => this.onError(err),
  );
  private cur: OpenFile | null = null;
  private nextFile = 1;
  /** Live spilled blobs per file. */
  private readonly live = new Map<number, number>();
  /** Files each row's value references ("table\0key" -> files). */
  private readonly refs = new Map<string, number[]>();
  bytesSpilled = 0;

  private constructor(
    readonly db: DurableDb,
    opts: SpillStoreOptions,
  ) {
    this.spillDir = path.join(opts.dir, SPILL_DIR);
    this.threshold = opts.threshold ?? 4096;
    this.fileBytes = opts.fileBytes ?? 8 * 1024 * 1024;
  }

  static async open(opts: SpillStoreOptions): Promise<SpillStore> {
    const db = await openDurableDb({ dir: path.join(opts.dir, "store"), schema: KV_SCHEMA, checkpointEveryBytes: opts.checkpointEveryBytes });
    if (db.readOnlyIncident && opts.repair) await db.acknowledgeIncident();
    await fsp.mkdir(path.join(opts.dir, SPILL_DIR), { recursive: true, mode: 0o700 });
    const s = new SpillStore(db, opts);
    await s.load();
    return s;
  }

  /** Read every row, put spilled bytes back, count references, collect orphan files. */
  private async load(): Promise<void> {
    const files = new Map<number, { fd: number; size: number } | null>();
    const fileOf = (no: number): { fd: number; size: number } | null => {
      if (!files.has(no)) {
        try {
          const fd = openSync(path.join(this.spillDir, `${no}.blob`), "r");
          files.set(no, { fd, size: fstatSync(fd).size });
        } catch {
          files.set(no, null);
        }
      }
      return files.get(no)!;
    };
    try {
      for (const row of this.db.query<{ t: string; k: string; v: Uint8Array }>(LOAD_ALL)) {
        const value = decodeValue(row.v);
        let ok = true;
        const used: number[] = [];
        if (value && typeof value === "object" && !Array.isArray(value) && !(value instanceof Uint8Array)) {
          const obj = value as Record<string, unknown>;
          for (const [field, fv] of Object.entries(obj)) {
            if (!isPtr(fv)) continue;
            const [no, off, len] = fv.$spill;
            const f = fileOf(no);
            if (!f || off + len > f.size) {
              ok = false;
              break;
            }
            const buf = new Uint8Array(len);
            let got = 0;
            while (got < len) {
              const n = readSync(f.fd, buf, got, len - got, off + got);
              if (n === 0) break;
              got += n;
            }
            if (got !== len) {
              ok = false;
              break;
            }
            obj[field] = buf;
            used.push(no);
          }
        }
        if (!ok) {
          this.damage.push(`${row.t}/${row.k}`);
          continue;
        }
        let t = this.tables.get(row.t);
        if (!t) this.tables.set(row.t, (t = new Map()));
        t.set(row.k, value);
        if (used.length > 0) {
          this.refs.set(`${row.t}\0${row.k}`, used);
          for (const no of used) this.live.set(no, (this.live.get(no) ?? 0) + 1);
        }
      }
    } finally {
      for (const f of files.values()) if (f) closeSync(f.fd);
    }
    for (const name of readdirSync(this.spillDir)) {
      const no = Number.parseInt(name, 10);
      if (Number.isSafeInteger(no) && no >= this.nextFile) this.nextFile = no + 1;
      if (!this.live.has(no)) await fsp.unlink(path.join(this.spillDir, name)).catch(() => {});
    }
  }

  persist(effect: PersistEffect): void {
    this.writer.push(effect);
  }

  whenIdle(): Promise<void> {
    return this.writer.whenIdle();
  }

  private async commit(group: PersistEffect[]): Promise<void> {
    // The group is applied as ONE atomic db batch, so only its net effect
    // matters: a row written and deleted within the group (an output entry
    // admitted to the window in the step that appended it, a command record
    // rewritten per event) never reaches the disk.
    const net = new Map<string, PersistRecord>();
    for (const e of group) for (const r of e.records) foldRecord(net, r);
    const writes = new Map<OpenFile, { at: number; parts: Uint8Array[] }>();
    const stmts: Stmt[] = [];
    const dead: number[] = [];
    const rolled: OpenFile[] = [];
    let newFile = false;
    for (const [key, r] of net) {
      // A prefix delete releases the spilled blobs of every row it covers.
      const covered = r.prefix ? [...this.refs.keys()].filter((k) => k.startsWith(`${r.table}\0${r.key}`)) : [key];
      for (const k of covered) {
        const old = this.refs.get(k);
        if (!old) continue;
        this.refs.delete(k);
        for (const no of old) this.unref(no, dead);
      }
      if (r.value === null || typeof r.value !== "object" || Array.isArray(r.value) || r.value instanceof Uint8Array) {
        stmts.push(recordStmt(r));
        continue;
      }
      let copy: Record<string, unknown> | null = null;
      const used: number[] = [];
      for (const [field, fv] of Object.entries(r.value as Record<string, unknown>)) {
        if (!(fv instanceof Uint8Array) || fv.length < this.threshold) continue;
        if (!this.cur || this.cur.size >= this.fileBytes) {
          if (this.cur) rolled.push(this.cur);
          const no = this.nextFile++;
          this.cur = { no, fh: await fsp.open(path.join(this.spillDir, `${no}.blob`), "w", 0o600), size: 0 };
          newFile = true;
        }
        copy ??= { ...(r.value as Record<string, unknown>) };
        copy[field] = { $spill: [this.cur.no, this.cur.size, fv.length] satisfies Ptr };
        let w = writes.get(this.cur);
        if (!w) writes.set(this.cur, (w = { at: this.cur.size, parts: [] }));
        w.parts.push(fv);
        this.cur.size += fv.length;
        used.push(this.cur.no);
        this.live.set(this.cur.no, (this.live.get(this.cur.no) ?? 0) + 1);
      }
      if (used.length > 0) this.refs.set(key, used);
      stmts.push(copy ? recordStmt(r, copy) : recordStmt(r));
    }
    if (writes.size > 0) {
      await Promise.all(
        [...writes].map(async ([f, w]) => {
          const n = await writeAllParts(f.fh, w.parts, w.at);
          await f.fh.datasync();
          this.bytesSpilled += n;
        }),
      );
      if (newFile) await fsyncDir(this.spillDir);
    }
    for (const f of rolled) await f.fh.close().catch(() => {});
    if (stmts.length > 0) await this.db.apply(stmts);
    this.onDurable(group[group.length - 1]!.id);
    for (const no of dead) {
      if (this.live.has(no) || this.cur?.no === no) continue;
      await fsp.unlink(path.join(this.spillDir, `${no}.blob`)).catch(() => {});
    }
  }

  private unref(no: number, dead: number[]): void {
    const n = (this.live.get(no) ?? 0) - 1;
    if (n > 0) this.live.set(no, n);
    else {
      this.live.delete(no);
      dead.push(no);
    }
  }

  get recovery() {
    return this.db.recovery;
  }

  async close(): Promise<void> {
    await this.writer.close();
    await this.cur?.fh.close().catch(() => {});
    this.cur = null;
    await this.db.close();
  }
}
