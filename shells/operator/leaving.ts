/**
 * What a follow (`run --follow`, `run --clients … --follow`) does when its
 * operator goes away. Without --cancel-on-interrupt, Ctrl-C detaches and the
 * rest (SIGTERM, SIGHUP, a closed stdout) end the CLI as they end any
 * process. With it, whatever takes the operator away cancels what is being
 * followed, as ssh's hang-up ends the remote command:
 *
 *   Ctrl-C, SIGTERM   cancel, and the follow goes on to the end; the same
 *                     again detaches
 *   SIGHUP            cancel, and end (129) once the server has the cancel:
 *                     there is no terminal to follow on to
 *   a closed stdout   cancel, and end (141) once the server has it (the
 *                     process-wide output error handler waits for it)
 *
 * The cancel is sent once, whatever asks for it.
 */
import type { OperatorIO, TerminateSignal } from "./cli.js";

/**
 * Work that must finish before a failed write to stdout or stderr ends the
 * command line, per command line (its OperatorIO: the resident client runs
 * several in one process). One at a time: the first follow that registers it
 * owns it.
 */
const beforeOutputExit = new WeakMap<OperatorIO, () => Promise<unknown>>();

/** For the stdout/stderr error handler of `io`: what to wait for before it ends the command line, or null. */
export function pendingBeforeOutputExit(io: OperatorIO): (() => Promise<unknown>) | null {
  return beforeOutputExit.get(io) ?? null;
}

export interface Leaving {
  /** The operator detached (a second Ctrl-C, or one without the flag): stop following, leave it running. */
  readonly detached: boolean;
  /** The terminal closed (SIGHUP) under the flag: the cancel is sent; end without following. */
  readonly hungUp: boolean;
  /** Send the cancel now (once), with this note on stderr; resolves when the server has it (or gave up). */
  cancel(note: string): Promise<void>;
  /** The pending cancel, if one was sent. */
  readonly cancelling: Promise<void> | null;
  /** Unsubscribe everything. */
  off(): void;
}

export function watchLeaving(
  io: OperatorIO,
  err: (line: string) => void,
  o: {
    cancelOnInterrupt: boolean;
    /** "abc-123" or "job J": what the notes name. */
    what: string;
    /** Sends the cancel request (idempotent, retried); its failure is reported, not thrown. */
    sendCancel: () => Promise<unknown>;
    /** Stops the follow. */
    abort: () => void;
  },
): Leaving {
  let detached = false;
  let hungUp = false;
  let cancelling: Promise<void> | null = null;
  const cancel = (note: string): Promise<void> => {
    if (cancelling) return cancelling;
    err(note);
    cancelling = o.sendCancel().then(
      () => undefined,
      (e: unknown) => err(`rvbox: cancel: ${e instanceof Error ? e.message : String(e)}`),
    );
    return cancelling;
  };
  const detach = (): void => {
    detached = true;
    o.abort();
  };
  const offInterrupt = io.onInterrupt(() => {
    if (o.cancelOnInterrupt && !cancelling) return void cancel(`\nrvbox: cancelling ${o.what} (Ctrl-C again to detach)`);
    detach();
  });
  const offTerminate = o.cancelOnInterrupt
    ? io.onTerminate((signal: TerminateSignal) => {
        if (signal === "SIGHUP") {
          hungUp = true;
          void cancel(`\nrvbox: hang-up: cancelling ${o.what}`);
          o.abort();
          return;
        }
        if (!cancelling) return void cancel(`\nrvbox: ${signal}: cancelling ${o.what} (${signal} again to detach)`);
        detach();
      })
    : () => {};
  const onLostOutput = (): Promise<void> => cancel(`rvbox: the output was closed: cancelling ${o.what}`);
  const ownsExitHook = o.cancelOnInterrupt && !beforeOutputExit.has(io);
  if (ownsExitHook) beforeOutputExit.set(io, onLostOutput);
  return {
    get detached() {
      return detached;
    },
    get hungUp() {
      return hungUp;
    },
    get cancelling() {
      return cancelling;
    },
    cancel,
    off() {
      offInterrupt();
      offTerminate();
      if (ownsExitHook && beforeOutputExit.get(io) === onLostOutput) beforeOutputExit.delete(io);
    },
  };
}
