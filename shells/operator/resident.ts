/**
 * The resident client: one process that runs operator command lines sent to
 * it over a Unix socket, as ssh's ControlMaster runs the sessions of later
 * `ssh` invocations. With RVBOX_PERSIST set, `rvbox` started from a shell is
 * bin/rvbox-client.js, which loads only node:net: it sends its argv,
 * environment and working directory, streams its stdin when asked, forwards
 * SIGINT, SIGTERM and SIGHUP, writes what comes back to its stdout and stderr
 * and exits with the code it is given. Here the CLI is already loaded and the
 * HTTP connections to the server are open (Node's global agent keeps them
 * alive), so a command line costs a Node start of the small client and the
 * server round trips, not the CLI's load (docs/PERFORMANCE.md).
 *
 * Each command line runs in this process through `runOperatorCliOn`, with an
 * OperatorIO of its own: nothing process-wide (cwd, env, signal handlers,
 * exit) is touched, so command lines run side by side. What a process would
 * do on its own happens here per command line:
 *
 *   a failed write       the client's stdout or stderr reports EPIPE (or
 *                        another error) as OUT_CLOSED: the stream here fails
 *                        with it, and the command line ends as
 *                        `endOnOutputError` says (a pending cancel first)
 *   a signal             its subscribers run (`onInterrupt`, `onTerminate`);
 *                        with none, the client is told to die by it (DIE)
 *   the client vanishes  both streams fail (EPIPE) and stdin ends: a follow
 *                        stops as it does for a closed output
 *
 * The resident exits after RVBOX_PERSIST without a command line running, when
 * its socket file is removed or replaced, or when the tree's CLI has changed
 * (`isCurrent`, checked every RESIDENT_WATCH_MS and after each command line,
 * off the command lines' path: a command line can meet old code only within
 * that long of an edit; the next one starts a new resident).
 */
import { createServer, Socket, type Server } from "node:net";
import { existsSync, statSync, unlinkSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import {
  BUSY,
  DIE,
  EXIT,
  frame,
  frameReader,
  HELLO,
  HELLO_MAX_BYTES,
  OUT_CLOSED,
  PROTOCOL_VERSION,
  SIGNAL,
  STDERR,
  STDIN,
  STDIN_END,
  STDOUT,
  WANT_STDIN,
  FRAME_MAX_BYTES,
} from "./resident-wire.js";
import { endOnOutputError, isOperatorCommand, runOperatorCliOn, type OperatorIO, type TerminateSignal } from "./cli.js";
import { EXIT as CODES } from "../../client/exit-codes.js";

/** Command lines running at once; one more is told BUSY and runs without the resident. */
export const RESIDENT_MAX_RUNNING = 64;
/** A connection that sends no HELLO within this long is closed. */
export const RESIDENT_HELLO_TIMEOUT_MS = 5_000;
/** Stdin bytes buffered here for a command line before the client's socket is paused. */
export const RESIDENT_STDIN_BUFFER_BYTES = 1024 * 1024;
/** How often the resident checks that its socket file and the tree's CLI are still its own. */
export const RESIDENT_WATCH_MS = 2_000;
/** Output buffered here per stream before the command line's writes wait (then the socket's own buffer). */
const OUTPUT_HIGH_WATER_BYTES = 256 * 1024;

/** Operator commands that never run in the resident: the TUI needs the terminal itself. */
export const NOT_RESIDENT = new Set(["tui"]);
/** What the resident runs: the operator commands but those (anything else is BUSY "not a resident command"). */
export function residentCommand(name: string | undefined): boolean {
  return name !== undefined && isOperatorCommand(name) && !NOT_RESIDENT.has(name);
}

export interface ResidentOptions {
  socket: string;
  /** Exit after this long with no command line running. */
  idleMs: number;
  /** False once the CLI this process runs is no longer the tree's (checked after each command line). */
  isCurrent?: () => boolean;
  log?: (line: string) => void;
}

interface Hello {
  v: number;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  stdinIsDirectory?: boolean;
}

function parseHello(payload: Buffer): Hello | string {
  let h: unknown;
  try {
    h = JSON.parse(payload.toString("utf8"));
  } catch {
    return "HELLO is not JSON";
  }
  const o = h as Partial<Hello>;
  if (o.v !== PROTOCOL_VERSION) return `protocol version ${String(o.v)}, this resident speaks ${PROTOCOL_VERSION}`;
  if (!Array.isArray(o.argv) || !o.argv.every((a) => typeof a === "string")) return "HELLO without argv";
  if (typeof o.cwd !== "string" || o.cwd === "") return "HELLO without cwd";
  if (o.env === null || typeof o.env !== "object") return "HELLO without env";
  return o as Hello;
}

/** An error as a write to a closed pipe gets it. */
function closedError(code: string, message: string): NodeJS.ErrnoException {
  const e = new Error(message) as NodeJS.ErrnoException;
  e.code = code;
  return e;
}

/** Serve command lines on `o.socket` until idle for `o.idleMs`; resolves when it stopped. */
export function runResident(o: ResidentOptions): Promise<void> {
  const log = o.log ?? (() => {});
  let running = 0;
  let idleTimer: NodeJS.Timeout | null = null;
  let stopping = false;
  let ino = -1;
  let server: Server;

  const stop = (why: string): void => {
    if (stopping) return;
    stopping = true;
    log(`resident: stopping (${why})`);
    // The socket file goes first, so that no new client reaches a resident on its way out.
    try {
      if (statSync(o.socket).ino === ino) unlinkSync(o.socket);
    } catch {
      // gone already
    }
    server.close();
  };
  const armIdle = (): void => {
    if (idleTimer) clearTimeout(idleTimer);
    idleTimer = null;
    if (running === 0) idleTimer = setTimeout(() => stop("idle"), o.idleMs);
  };
  // Our socket file removed or replaced (another resident took the name), or the tree's
  // CLI changed (an edit, a pull: ~3 ms of stats, kept off the command lines' path): leave.
  const watch = setInterval(() => {
    try {
      if (statSync(o.socket).ino !== ino) stop("socket replaced");
    } catch {
      stop("socket removed");
    }
    if (!stopping && o.isCurrent && !o.isCurrent()) stop("the CLI changed");
  }, RESIDENT_WATCH_MS);
  watch.unref();

  const serve = (sock: Socket): void => {
    let hello: Hello | null = null;
    let invocation: Invocation | null = null;
    const helloTimer = setTimeout(() => sock.destroy(), RESIDENT_HELLO_TIMEOUT_MS);
    const read = frameReader(
      (type, payload) => {
        if (hello === null) {
          clearTimeout(helloTimer);
          if (type !== HELLO) return void sock.destroy();
          const h =
            payload.length > HELLO_MAX_BYTES ? `HELLO of ${payload.length} bytes (argv and environment), at most ${HELLO_MAX_BYTES}` : parseHello(payload);
          if (typeof h === "string") {
            sock.end(Buffer.concat(frame(BUSY, h)));
            return;
          }
          if (running >= RESIDENT_MAX_RUNNING || stopping || !residentCommand(h.argv[0])) {
            sock.end(Buffer.concat(frame(BUSY, stopping ? "stopping" : running >= RESIDENT_MAX_RUNNING ? "busy" : "not a resident command")));
            return;
          }
          hello = h;
          running++;
          armIdle();
          invocation = startInvocation(sock, h, () => {
            running--;
            if (o.isCurrent && !stopping && !o.isCurrent()) stop("the CLI changed");
            armIdle();
          });
          return;
        }
        invocation?.onFrame(type, payload);
      },
      Math.max(HELLO_MAX_BYTES, FRAME_MAX_BYTES),
    );
    sock.on("data", (chunk: Buffer) => {
      try {
        read(chunk);
      } catch (e) {
        log(`resident: ${(e as Error).message}`);
        sock.destroy();
      }
    });
    sock.on("error", () => {});
    sock.on("close", () => {
      clearTimeout(helloTimer);
      invocation?.clientGone();
    });
  };

  return new Promise((resolve, reject) => {
    server = createServer(serve);
    server.on("error", reject);
    server.listen(o.socket, () => {
      ino = statSync(o.socket).ino;
      log(`resident: listening on ${o.socket}, idle exit after ${o.idleMs} ms (pid ${process.pid})`);
      armIdle();
    });
    server.on("close", () => {
      clearInterval(watch);
      if (idleTimer) clearTimeout(idleTimer);
      resolve();
    });
  });
}

interface Invocation {
  onFrame(type: number, payload: Buffer): void;
  clientGone(): void;
}

function startInvocation(sock: Socket, h: Hello, done: () => void): Invocation {
  let ended = false;
  let gone = false;
  const send = (type: number, payload: Uint8Array | string, cb?: (e?: Error | null) => void): boolean => {
    if (gone || sock.destroyed) {
      cb?.(closedError("EPIPE", "the rvbox client went away"));
      return false;
    }
    const [head, body] = frame(type, payload);
    sock.write(head);
    return sock.write(body, cb);
  };
  const output = (type: number): Writable =>
    new Writable({
      highWaterMark: OUTPUT_HIGH_WATER_BYTES,
      write(chunk: Buffer, _enc, cb) {
        // Split to frames; the callback runs once the last piece is in the kernel's socket buffer.
        for (let at = 0; at < chunk.length; at += FRAME_MAX_BYTES) {
          const piece = chunk.subarray(at, Math.min(chunk.length, at + FRAME_MAX_BYTES));
          const last = at + FRAME_MAX_BYTES >= chunk.length;
          send(type, piece, last ? (e) => cb(e ?? null) : undefined);
        }
        if (chunk.length === 0) cb();
      },
    });
  const stdout = output(STDOUT);
  const stderr = output(STDERR);

  // Stdin: asked for from the client on first use only (a command line that never
  // reads it must not take the terminal's input).
  let stdin: Readable | null = null;
  let buffered = 0;
  const makeStdin = (): Readable => {
    if (stdin) return stdin;
    stdin = new Readable({
      highWaterMark: 64 * 1024,
      read() {
        if (buffered <= RESIDENT_STDIN_BUFFER_BYTES && sock.isPaused()) sock.resume();
      },
    });
    stdin.on("data", (b: Buffer) => {
      buffered -= b.length;
    });
    send(WANT_STDIN, "");
    if (gone) stdin.push(null);
    return stdin;
  };

  const interrupts = new Set<() => void>();
  const terminates = new Set<(s: TerminateSignal) => void>();
  const io: OperatorIO = {
    stdout,
    stderr,
    get stdin() {
      return makeStdin();
    },
    env: h.env,
    cwd: h.cwd,
    ...(h.stdinIsDirectory !== undefined ? { stdinIsDirectory: h.stdinIsDirectory } : {}),
    onInterrupt: (cb) => {
      interrupts.add(cb);
      return () => interrupts.delete(cb);
    },
    onTerminate: (cb) => {
      terminates.add(cb);
      return () => terminates.delete(cb);
    },
    runTui: () => Promise.reject(new Error("the TUI does not run in the resident client")),
  };

  const finish = (code: number): void => {
    if (ended) return;
    ended = true;
    send(EXIT, String(code), () => sock.end());
    done();
  };
  // A failed write ends the command line as it ends a process (cli.ts endOnOutputError).
  let failed = false;
  for (const s of [stdout, stderr])
    s.on("error", (e) => {
      if (failed) return;
      failed = true;
      endOnOutputError(io, s, e, finish);
    });

  void runOperatorCliOn(io, h.argv).then(
    (code) => finish(code),
    (e: unknown) => {
      if (!failed) stderr.write(`rvbox: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
      finish(CODES.ERROR);
    },
  );

  const fail = (s: Writable, e: NodeJS.ErrnoException): void => {
    if (!s.destroyed) s.destroy(e);
  };
  return {
    onFrame(type, payload) {
      switch (type) {
        case STDIN: {
          const s = makeStdin();
          buffered += payload.length;
          s.push(Buffer.from(payload));
          if (buffered > RESIDENT_STDIN_BUFFER_BYTES) sock.pause();
          return;
        }
        case STDIN_END:
          makeStdin().push(null);
          return;
        case SIGNAL: {
          const name = payload.toString("utf8");
          if (name === "SIGINT" && interrupts.size > 0) for (const cb of [...interrupts]) cb();
          else if ((name === "SIGTERM" || name === "SIGHUP") && terminates.size > 0) for (const cb of [...terminates]) cb(name);
          else if (name === "SIGINT" || name === "SIGTERM" || name === "SIGHUP") {
            // Nothing handles it: the process would end by it. So does the command line.
            if (!ended) {
              ended = true;
              send(DIE, name, () => sock.end());
              done();
            }
            gone = true;
            fail(stdout, closedError("EPIPE", `ended by ${name}`));
            fail(stderr, closedError("EPIPE", `ended by ${name}`));
          }
          return;
        }
        case OUT_CLOSED: {
          const [which, code] = payload.toString("utf8").split(" ");
          const e = closedError(code || "EPIPE", `the ${which} of the rvbox client failed: ${code}`);
          fail(which === "stderr" ? stderr : stdout, e);
          return;
        }
        default:
          sock.destroy();
      }
    },
    clientGone() {
      if (gone && ended) return;
      gone = true;
      fail(stdout, closedError("EPIPE", "the rvbox client went away"));
      fail(stderr, closedError("EPIPE", "the rvbox client went away"));
      if (stdin) stdin.push(null);
      // Whatever ends it now is told to no one.
      if (!ended) {
        ended = true;
        done();
      }
    },
  };
}

/** `rvbox __resident --socket PATH --idle MS`: started detached by bin/rvbox-client.js. */
export async function residentMain(argv: string[], isCurrent?: () => boolean): Promise<number> {
  const at = (flag: string): string | undefined => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const socket = at("--socket");
  const idleMs = Number(at("--idle") ?? "600000");
  if (!socket || !Number.isFinite(idleMs) || idleMs <= 0) {
    process.stderr.write("usage: rvbox __resident --socket PATH --idle MS\n");
    return CODES.USAGE;
  }
  // A socket file left by a resident that died: take its place if nothing answers there.
  if (existsSync(socket)) {
    const live = await new Promise<boolean>((resolve) => {
      const s = new Socket();
      s.once("connect", () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
      s.connect(socket);
    });
    if (live) return 0; // another resident serves it
    try {
      unlinkSync(socket);
    } catch {
      // raced with another starter: listen reports it
    }
  }
  const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);
  try {
    await runResident({ socket, idleMs, log, ...(isCurrent ? { isCurrent } : {}) });
  } catch (e) {
    // EADDRINUSE: another resident started at the same time and won.
    log(`resident: ${(e as Error).message}`);
    return (e as NodeJS.ErrnoException).code === "EADDRINUSE" ? 0 : 1;
  }
  return 0;
}
