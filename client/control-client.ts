/**
 * The operator's ConnectRPC client of the control API, with the bearer token
 * added by an interceptor, and the translation of its errors into one clear
 * sentence and an exit code (no stack traces).
 */
import { readFileSync } from "node:fs";
import * as tls from "node:tls";
import { Code as ConnectCode, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Code as RvCode, ControlErrorSchema } from "../protos/gen/rvbox/v1/common_pb.js";
import { ControlService } from "../protos/gen/rvbox/v1/control_pb.js";
import { EXIT } from "./exit-codes.js";

export type ControlClient = Client<typeof ControlService>;

export interface ControlOptions {
  /** http://HOST:PORT of the server's control API. */
  baseUrl: string;
  token: string;
  httpVersion?: "1.1" | "2";
  /** PEM CA bundle to verify an https:// server (a self-signed nginx), in addition to the system's. */
  ca?: string | Buffer;
}

export function createControlClient(o: ControlOptions): ControlClient {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${o.token}`);
    return next(req);
  };
  const nodeOptions = o.ca !== undefined ? { ca: [...tls.rootCertificates, o.ca.toString()] } : undefined;
  return createClient(
    ControlService,
    createConnectTransport({ baseUrl: o.baseUrl, httpVersion: "1.1", interceptors: [auth], ...(nodeOptions ? { nodeOptions } : {}) }),
  );
}

/** An error the CLI reports as one line with an exit code. */
export class OperatorError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

/** Why a file named on the command line could not be read, in words (not `EISDIR: illegal operation …`). */
export function fileProblem(e: unknown): string {
  switch ((e as NodeJS.ErrnoException).code) {
    case "ENOENT":
      return "no such file";
    case "EISDIR":
      return "is a directory, not a file";
    case "EACCES":
      return "permission denied";
    default:
      return (e as Error).message;
  }
}

/** `file` as the operator named it (for messages); `at`: where to read it (resolved against the command line's working directory). */
export function readTokenFile(file: string, at: string = file): string {
  let s: string;
  try {
    s = readFileSync(at, "utf8").trim();
  } catch (e) {
    throw new OperatorError(`cannot read the token file ${file}: ${fileProblem(e)}`, EXIT.USAGE);
  }
  // The server's --operator-token file may hold several tokens, one per line
  // (a rotation): the CLI sends the first; `#` comments are skipped.
  const first = s
    .split("\n")
    .map((l) => l.replace(/#.*$/, "").trim())
    .find((l) => l !== "");
  if (first === undefined) throw new OperatorError(`the token file ${file} is empty`, EXIT.USAGE);
  return first;
}

/** How the server words its own UNAVAILABLE (shells/server: server-daemon.ts, store-errors.ts, probes.ts), as against a transport's. */
const SERVER_SAYS_UNAVAILABLE = /^the server('s store is not| is starting)/;

/** Why a call failed, in the operator's words, with the exit code to use. */
export function describeError(err: unknown, ctx: { server?: string; what?: string } = {}): OperatorError {
  if (err instanceof OperatorError) return err;
  const ce = ConnectError.from(err);
  const detail = ce.findDetails(ControlErrorSchema)[0];
  const msg = detail?.message || ce.rawMessage;
  const what = ctx.what ? `${ctx.what}: ` : "";
  if (detail) {
    switch (detail.code) {
      case RvCode.NOT_FOUND:
        return new OperatorError(msg, EXIT.NOT_FOUND);
      case RvCode.VALIDATION:
      case RvCode.CONFLICT:
      case RvCode.PAYLOAD_TOO_LARGE:
      case RvCode.UNSUPPORTED_PLATFORM:
        return new OperatorError(`${what}refused: ${msg}`, EXIT.INVALID);
      case RvCode.CAPACITY:
        return new OperatorError(`${what}temporarily refused (capacity): ${msg}; try again`, EXIT.TEMPORARY);
      default:
        break;
    }
  }
  if (!detail && /self[- ]signed|unable to (verify|get local issuer)|certificate/i.test(ce.rawMessage))
    return new OperatorError(
      `cannot verify the TLS certificate of ${ctx.server ?? "the server"} (${ce.rawMessage}); pass its CA with --ca FILE or RVBOX_CA`,
      EXIT.UNAVAILABLE,
    );
  switch (ce.code) {
    case ConnectCode.PermissionDenied:
      // Access control (the caller's role or label selector): the message names the rule.
      return new OperatorError(`${what}permission denied: ${ce.rawMessage}`, EXIT.UNAUTHENTICATED);
    case ConnectCode.Unauthenticated:
      return new OperatorError(
        `the server${ctx.server ? ` at ${ctx.server}` : ""} refused the operator token (HTTP 401); check --token / RVBOX_TOKEN_FILE`,
        EXIT.UNAUTHENTICATED,
      );
    case ConnectCode.Unavailable: {
      // The server answered: it is up, but starting or its store takes no writes (a state that passes).
      if (SERVER_SAYS_UNAVAILABLE.test(ce.rawMessage)) return new OperatorError(`${what}temporarily unavailable: ${ce.rawMessage}`, EXIT.TEMPORARY);
      const cause = /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ECONNRESET|ETIMEDOUT|EAI_AGAIN/.exec(ce.rawMessage)?.[0];
      return new OperatorError(
        `cannot reach the server${ctx.server ? ` at ${ctx.server}` : ""}${cause ? ` (${cause})` : `: ${ce.rawMessage}`}; is it running? (--server / RVBOX_SERVER)`,
        EXIT.UNAVAILABLE,
      );
    }
    case ConnectCode.Unimplemented:
      return new OperatorError(
        `${ctx.server ?? "the server"} does not serve the RVBox control API (${ce.rawMessage}); --server must name the control address, not the agent endpoint`,
        EXIT.UNAVAILABLE,
      );
    case ConnectCode.NotFound:
      return new OperatorError(msg.replace(/^NOT_FOUND: /, ""), EXIT.NOT_FOUND);
    case ConnectCode.InvalidArgument:
    case ConnectCode.AlreadyExists:
    case ConnectCode.FailedPrecondition:
      return new OperatorError(`${what}refused: ${msg}`, EXIT.INVALID);
    case ConnectCode.ResourceExhausted:
      // A request over the server's (or this client's) message size limit: trying again cannot help.
      if (/is larger than configured (read|write)MaxBytes/.test(ce.rawMessage))
        return new OperatorError(`${what}refused as too large: ${ce.rawMessage}`, EXIT.INVALID);
      return new OperatorError(`${what}temporarily refused: ${msg}; try again`, EXIT.TEMPORARY);
    case ConnectCode.DeadlineExceeded:
      return new OperatorError(`${what}the server${ctx.server ? ` at ${ctx.server}` : ""} did not answer in time (--request-timeout)`, EXIT.UNAVAILABLE);
    default:
      return new OperatorError(`${what}${msg || String(err)}`, EXIT.ERROR);
  }
}

/** True when retrying the same call later may work (connection trouble). */
export function isTransient(err: unknown): boolean {
  const c = ConnectError.from(err).code;
  return (
    c === ConnectCode.Unavailable || c === ConnectCode.DeadlineExceeded || c === ConnectCode.Aborted || c === ConnectCode.Unknown || c === ConnectCode.Internal
  );
}
