// The limits of a command spec, checked in one place by both sides: the
// agent's admission of a CommandDispatch (core/agent/admission.ts, R-D4) and
// the server's admission of a submit or a job (core/server/submit.ts, jobs.ts),
// so the server refuses at submit everything an agent would refuse (issue 38
// item 1). The server also checks that the CommandDispatch that will carry
// the spec fits one envelope (R-T2, `checkDispatchSize`): a frame over
// MAX_ENVELOPE_BYTES can never reach an agent.
//
// Strings are measured in UTF-8 bytes. Counts are checked before any item, so
// a spec with a million argv items costs one comparison to refuse.

import { create } from "@bufbuild/protobuf";
import { CommandDispatchSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import type { ExecutionSpec, TerminalSize, TerminalSpec } from "../../protos/gen/rvbox/v1/common_pb.js";
import { encodeEnvelope } from "../codec/frame-codec.js";
import { Code, type CoreError, coreError, unreachable } from "../errors.js";
import {
  MAX_ARGV_ITEMS,
  MAX_ENV_ITEMS,
  MAX_ENVELOPE_BYTES,
  MAX_SCRIPT_BYTES,
  MAX_SPEC_STRING_BYTES,
  MAX_TERM_NAME_CHARS,
  MAX_TERMINAL_CELLS,
} from "../limits.js";

/** UTF-8 bytes of `s` (a lone surrogate counts 3, as TextEncoder writes U+FFFD). */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2; // a pair: 2 UTF-16 units, 4 bytes
      i++;
    } else n += 2;
  }
  return n;
}

const invalid = (message: string): CoreError => coreError(Code.VALIDATION, message);

/** One string of a spec: at most MAX_SPEC_STRING_BYTES UTF-8 bytes, no NUL. */
function checkString(what: string, s: string): CoreError | null {
  // Fewer UTF-16 units than a third of the limit: under it whatever they hold.
  if (s.length * 3 > MAX_SPEC_STRING_BYTES) {
    const n = utf8Length(s);
    if (n > MAX_SPEC_STRING_BYTES) return invalid(`${what} is ${n} bytes; the limit is ${MAX_SPEC_STRING_BYTES}`);
  }
  if (s.includes("\0")) return invalid(`${what} contains a NUL character`);
  return null;
}

function checkStrings(what: string, list: readonly string[]): CoreError | null {
  for (let i = 0; i < list.length; i++) {
    const bad = checkString(`${what}[${i}]`, list[i]!);
    if (bad) return bad;
  }
  return null;
}

function checkProgram(p: ExecutionSpec["program"]): CoreError | null {
  switch (p.case) {
    case "argv": {
      const argv = p.value.argv;
      if (argv.length === 0 || argv[0] === "") return invalid("argv is empty");
      if (argv.length > MAX_ARGV_ITEMS) return invalid(`argv has ${argv.length} items; the limit is ${MAX_ARGV_ITEMS}`);
      return checkStrings("argv", argv);
    }
    case "shell":
      if (p.value.commandLine === "") return invalid("the command line is empty");
      return checkString("the command line", p.value.commandLine);
    case "script": {
      const size = p.value.sizeBytes;
      if (size === 0n) return invalid("the script is empty");
      if (size < 0n || size > BigInt(MAX_SCRIPT_BYTES)) return invalid(`the script is ${size} bytes; the limit is ${MAX_SCRIPT_BYTES}`);
      if (p.value.sha256.length !== 32) return invalid(`the script's sha256 is ${p.value.sha256.length} bytes; it must be 32`);
      if (p.value.args.length > MAX_ARGV_ITEMS) return invalid(`the script has ${p.value.args.length} args; the limit is ${MAX_ARGV_ITEMS}`);
      return checkString("the script interpreter", p.value.interpreter) ?? checkStrings("script args", p.value.args);
    }
    case undefined:
      return invalid("the execution spec names no program (argv, shell or script)");
    default:
      return unreachable(p, "execution spec program");
  }
}

/**
 * Every limit of an execution spec an agent checks, except the agent's own
 * platform (which shells it supports): null when the spec is within them, else
 * a CODE_VALIDATION error naming the limit and the figure.
 */
export function checkSpecLimits(spec: ExecutionSpec | undefined): CoreError | null {
  if (!spec) return invalid("no execution spec");
  const bad = checkProgram(spec.program) ?? checkString("cwd", spec.cwd);
  if (bad) return bad;
  const env = spec.environment;
  if (env.length > MAX_ENV_ITEMS) return invalid(`the environment has ${env.length} variables; the limit is ${MAX_ENV_ITEMS}`);
  for (const e of env) {
    const name = JSON.stringify(e.name.slice(0, 64));
    if (e.name === "") return invalid("an environment variable has an empty name");
    if (e.name.includes("=")) return invalid(`environment variable name ${name} contains "="`);
    const why = checkString(`environment variable name ${name}`, e.name) ?? checkString(`the value of environment variable ${name}`, e.value);
    if (why) return why;
  }
  return spec.terminal ? checkTerminal(spec.terminal, spec.stdinOpen) : null;
}

/** A window size: rows and columns each 1..MAX_TERMINAL_CELLS. */
export function checkTerminalSize(size: Pick<TerminalSize, "rows" | "cols"> | undefined): CoreError | null {
  if (!size) return invalid("the terminal has no window size");
  const { rows, cols } = size;
  if (rows < 1 || cols < 1 || rows > MAX_TERMINAL_CELLS || cols > MAX_TERMINAL_CELLS)
    return invalid(`the terminal is ${cols}x${rows}; columns and rows must each be 1..${MAX_TERMINAL_CELLS}`);
  return null;
}

const TERM_NAME = /^[A-Za-z0-9._+-]*$/;

/** A terminal (protocol 1.1): a valid size, a plain TERM name, and open stdin (its keystrokes and resizes travel there). */
function checkTerminal(t: TerminalSpec, stdinOpen: boolean): CoreError | null {
  if (!stdinOpen) return invalid("a terminal needs open stdin (its keystrokes and window size travel there)");
  if (t.term.length > MAX_TERM_NAME_CHARS || !TERM_NAME.test(t.term))
    return invalid(`TERM must be at most ${MAX_TERM_NAME_CHARS} characters of [A-Za-z0-9._+-]`);
  return checkTerminalSize(t.size);
}

const MAX_UINT64 = 2n ** 64n - 1n;
/** The latest instant a Timestamp carries (9999-12-31T23:59:59.999999999Z): its longest encoding. */
const LATEST = { seconds: 253_402_300_799n, nanos: 999_999_999 };

/**
 * The envelope of a CommandDispatch with no uuid and no spec, every other
 * field at its longest (fence, revision, generation, timestamps, digest).
 * Encoded once, when the module loads.
 */
const DISPATCH_WITHOUT_UUID_OR_SPEC = encodeEnvelope(
  { sessionId: "f".repeat(64), generation: Number.MAX_SAFE_INTEGER },
  {
    case: "commandDispatch",
    value: create(CommandDispatchSchema, {
      commandRevision: MAX_UINT64,
      targetSessionGeneration: MAX_UINT64,
      issueTime: LATEST,
      queueExpiryTime: LATEST,
      immutableRequestSha256: new Uint8Array(32),
    }),
  },
).length;

/** Bytes of a length-delimited field (tag under 16) holding `n` bytes. */
const field = (n: number): number => 1 + (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5) + n;

/**
 * An upper bound on the encoded size of the envelope that carries a
 * CommandDispatch of command `uuid` whose spec encodes to `specBytes` bytes:
 * the envelope with every other field at its longest, plus the uuid and spec
 * fields, plus the growth of the dispatch's own length prefix (at most 4).
 */
export function dispatchEnvelopeBound(uuid: string, specBytes: number): number {
  const u = utf8Length(uuid);
  return DISPATCH_WITHOUT_UUID_OR_SPEC + (u > 0 ? field(u) : 0) + field(specBytes) + 4;
}

/** R-T2: the dispatch of this spec must fit one envelope, or no agent can ever receive it. */
export function checkDispatchSize(uuid: string, specBytes: number): CoreError | null {
  const n = dispatchEnvelopeBound(uuid, specBytes);
  if (n <= MAX_ENVELOPE_BYTES) return null;
  return coreError(
    Code.VALIDATION,
    `the command's dispatch would be ${n} bytes (its spec ${specBytes}); the limit is ${MAX_ENVELOPE_BYTES}, one envelope (R-T2)`,
  );
}
