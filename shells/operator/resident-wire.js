// The resident client's socket and its frames: shared by the client that a
// shell starts (bin/rvbox-client.js, plain JavaScript: it loads nothing but
// node:net and this file) and the resident process that runs the operator
// CLI for it (shells/operator/resident.ts).
//
// Like ssh's ControlMaster/ControlPersist: with RVBOX_PERSIST set (a duration:
// how long the resident stays after its last command), `rvbox` started from a
// shell connects to a resident process that has the CLI loaded and HTTP
// connections to the server open, and runs the command line there with this
// process's argv, environment, working directory, stdin, stdout, stderr and
// signals. See docs/ARCHITECTURE.md, "The resident client".
//
// A frame: type (1 byte), payload length (4 bytes, big-endian), payload.
import { mkdirSync, lstatSync } from "node:fs";
import { tmpdir } from "node:os";
import { createHash } from "node:crypto";
import { join } from "node:path";

/** Largest payload of one frame; larger output is split (a frame is never held beyond this). */
export const FRAME_MAX_BYTES = 1024 * 1024;
/** A HELLO larger than this (argv plus environment) is refused. */
export const HELLO_MAX_BYTES = 256 * 1024;

/** Client to resident. */
export const HELLO = 1; // JSON {v, argv, env, cwd, stdinIsDirectory}
export const STDIN = 2; // bytes of the client's stdin (only after WANT_STDIN)
export const STDIN_END = 3; // its EOF (or a read error)
export const SIGNAL = 4; // utf8 name: SIGINT, SIGTERM, SIGHUP
export const OUT_CLOSED = 5; // utf8 "stdout CODE" or "stderr CODE": a write failed (EPIPE: the reader left)
/** Resident to client. */
export const STDOUT = 11;
export const STDERR = 12;
export const WANT_STDIN = 13; // the command reads stdin: start sending it
export const DIE = 14; // utf8 signal name: nothing handles it, end by it as a process would
export const EXIT = 15; // utf8 exit code
export const BUSY = 16; // utf8 reason: not served; run the command line without the resident

export const PROTOCOL_VERSION = 1;

/**
 * Variables the CLI reads while its modules load, so fixed in a resident by
 * the command line that started it: a command line that sets any runs
 * without the resident (the start-up snapshot refuses the same ones:
 * LOAD_TIME_ENV in bin/cli-routes.js; a test keeps the two equal).
 */
export const LOAD_TIME_VARIABLES = ["RVBOX_ZSTD", "BUF_BIGINT_DISABLE"];

/** One frame's bytes. */
export function frame(type, payload) {
  const body = typeof payload === "string" ? Buffer.from(payload, "utf8") : (payload ?? Buffer.alloc(0));
  const head = Buffer.allocUnsafe(5);
  head[0] = type;
  head.writeUInt32BE(body.length, 1);
  return [head, body];
}

/**
 * Splits a byte stream into frames. `onFrame(type, payload)`; a payload over
 * `max` bytes is a protocol error (thrown). Chunks are kept as they came and
 * joined once per frame (a 1 MiB frame arrives in many socket reads).
 */
export function frameReader(onFrame, max = FRAME_MAX_BYTES) {
  const chunks = [];
  let have = 0;
  /** The first n buffered bytes as one buffer, taken off the queue. */
  const take = (n) => {
    if (chunks[0].length >= n) {
      const c = chunks[0];
      const out = c.subarray(0, n);
      if (c.length === n) chunks.shift();
      else chunks[0] = c.subarray(n);
      have -= n;
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let at = 0;
    while (at < n) {
      const c = chunks[0];
      const k = Math.min(c.length, n - at);
      c.copy(out, at, 0, k);
      at += k;
      if (k === c.length) chunks.shift();
      else chunks[0] = c.subarray(k);
    }
    have -= n;
    return out;
  };
  let head = null;
  return (chunk) => {
    chunks.push(chunk);
    have += chunk.length;
    for (;;) {
      if (head === null) {
        if (have < 5) return;
        const h = take(5);
        head = { type: h[0], len: h.readUInt32BE(1) };
        if (head.len > max) throw new Error(`frame of ${head.len} bytes (at most ${max})`);
      }
      if (have < head.len) return;
      const { type, len } = head;
      head = null;
      onFrame(type, len === 0 ? Buffer.alloc(0) : take(len));
    }
  };
}

/**
 * The directory of this user's resident sockets: $XDG_RUNTIME_DIR/rvbox (or
 * /tmp/rvbox-UID), made 0700 if missing. Returns null (with why) when it is
 * not a directory of this user's that no one else can enter: the resident is
 * then not used.
 */
export function socketDir(env, create) {
  const uid = process.getuid?.() ?? 0;
  const dir = env.XDG_RUNTIME_DIR ? join(env.XDG_RUNTIME_DIR, "rvbox") : join(tmpdir(), `rvbox-${uid}`);
  let st;
  try {
    st = lstatSync(dir);
  } catch {
    if (!create) return { dir, problem: "missing" };
    try {
      mkdirSync(dir, { mode: 0o700 });
      st = lstatSync(dir);
    } catch (e) {
      return { dir, problem: e.message };
    }
  }
  if (!st.isDirectory()) return { dir, problem: "not a directory" };
  if (st.uid !== uid) return { dir, problem: `owned by uid ${st.uid}, not ${uid}` };
  if ((st.mode & 0o077) !== 0) return { dir, problem: `mode ${(st.mode & 0o777).toString(8)}: others may enter it` };
  return { dir, problem: null };
}

/** The socket of the resident for the rvbox tree at `root` (one per tree: each runs its own code). */
export function socketName(root) {
  return `${createHash("sha256").update(root).digest("hex").slice(0, 16)}.sock`;
}

/** RVBOX_PERSIST: a duration (90s, 10m, 1h; a bare number is seconds) in ms, or null when off. */
export function persistMs(value) {
  if (value === undefined || value === "" || value === "0" || value === "no") return null;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(value.trim());
  if (!m) return null;
  const n = Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? "s"];
  return n > 0 ? Math.min(n, 24 * 3_600_000) : null;
}
