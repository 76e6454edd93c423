/**
 * Exit codes of the operator CLI.
 *
 * `rvbox run --follow` (and `rvbox logs -f --exit-code`) exit with the
 * command's outcome:
 *
 *   0–255   the process exited normally with that code (succeeded: 0)
 *   128+N   the process died of signal N that nobody asked for (failed)
 *   130     cancelled: an operator cancel or a requested signal ended it
 *           (also before launch)
 *   124     expired: its queue expiry passed before it was launched
 *   125     rejected: it could never run (validation, unsupported platform,
 *           script checksum or preparation) and was never launched
 *   123     interrupted: the outcome is unknown (lost across a crash)
 *
 * A command that exits 123–125 or 130 by itself is indistinguishable by code
 * alone; `rvbox get ID` (or `--json`) tells them apart.
 *
 * Every subcommand fails with:
 *
 *   2    usage error (bad flags or arguments)
 *   65   the server refused the request as invalid (CODE_VALIDATION, conflict)
 *   66   unknown id (command, client, incident)
 *   69   the server is unreachable
 *   75   temporary refusal (capacity); try again
 *   77   the operator token was refused (HTTP 401), or its role or label
 *        selector does not allow the call (permission denied)
 *   1    anything else (the message says what)
 */
import { constants as osConstants } from "node:os";
import type { CommandInfo, Lifecycle } from "./model.js";

export const EXIT = {
  OK: 0,
  ERROR: 1,
  USAGE: 2,
  INTERRUPTED: 123,
  EXPIRED: 124,
  REJECTED: 125,
  CANCELLED: 130,
  INVALID: 65,
  NOT_FOUND: 66,
  UNAVAILABLE: 69,
  TEMPORARY: 75,
  UNAUTHENTICATED: 77,
  /** The reader of stdout went away (`| head`): what a shell reports for SIGPIPE. */
  OUTPUT_CLOSED: 141,
  /** The CLI's terminal closed (SIGHUP) under `--cancel-on-interrupt`: the cancel was sent, the end not followed. */
  HANGUP: 129,
  /** The program does not exist on the agent (a shell's 127). */
  NOT_FOUND_PROGRAM: 127,
  /** The program exists but cannot be executed (a shell's 126). */
  NOT_EXECUTABLE: 126,
} as const;

/** Linux numbers: the agent's platform decides, the local table is a fallback. */
const LINUX_SIGNALS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGCHLD: 17,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGTSTP: 20,
  SIGXCPU: 24,
  SIGXFSZ: 25,
  SIGSYS: 31,
};

export function signalNumber(name: string): number | null {
  const n = name.toUpperCase().startsWith("SIG") ? name.toUpperCase() : `SIG${name.toUpperCase()}`;
  return LINUX_SIGNALS[n] ?? (osConstants.signals as Record<string, number>)[n] ?? null;
}

/**
 * The exit code for a command as it stands; null while it is not terminal.
 */
/**
 * The agent's reason when a program could not be started: `could not launch: ENOENT: …`. A
 * working directory that is missing or closed (`could not launch: ENOENT: cwd is not usable …`)
 * is not the program's fault: that stays 125, so a script never reads "command not found" into it.
 */
const LAUNCH_FAILURE = /^could not launch: (ENOENT|EACCES)\b(?!: cwd )/;

/** 127 (not found) or 126 (not executable) as a shell reports them, for a launch failure; null otherwise. */
export function launchFailureCode(reason: string): number | null {
  const m = LAUNCH_FAILURE.exec(reason);
  return m ? (m[1] === "ENOENT" ? EXIT.NOT_FOUND_PROGRAM : EXIT.NOT_EXECUTABLE) : null;
}

export function exitCodeFor(c: Pick<CommandInfo, "state" | "exitCode" | "signalName"> & { reason?: string }): number | null {
  const s: Lifecycle = c.state;
  switch (s) {
    case "succeeded":
      return c.exitCode ?? 0;
    case "failed": {
      if (c.exitCode !== null) return c.exitCode & 0xff;
      const n = c.signalName ? signalNumber(c.signalName) : null;
      return n !== null ? 128 + n : EXIT.ERROR;
    }
    case "cancelled":
      return EXIT.CANCELLED;
    case "rejected":
      return launchFailureCode(c.reason ?? "") ?? EXIT.REJECTED;
    case "expired":
      return EXIT.EXPIRED;
    case "interrupted":
      return EXIT.INTERRUPTED;
    default:
      return null;
  }
}

export const EXIT_CODE_HELP = `exit codes of run --follow / logs -f --exit-code (the command's outcome):
  0-255  the process's own exit code     128+N  killed by signal N nobody asked for
  130    cancelled (operator cancel or requested signal)
  124    expired before launch    125  rejected (never launched)    123  interrupted (outcome unknown)
  127    rejected: program not found on the agent    126  rejected: program not executable
errors (every subcommand):
  2 usage   65 refused as invalid   66 unknown id   69 server unreachable
  75 temporary refusal (capacity)   77 operator token refused or permission denied   1 other`;
