/**
 * FollowOutput over the Connect protocol's binary streaming form
 * (`application/connect+proto`, what the CLI and the TUI speak), served
 * straight from the follow loop: each batch of events is laid out once, with
 * its envelope, in one buffer (follow-wire.ts) and written to the response;
 * the next batch is read only after the socket has taken this one ('drain'),
 * so a slow reader holds the server to one batch. Going through
 * connect-node's handler instead costs three more copies of every output
 * byte (protobuf-es's writer, its final slice, Connect's envelope) and their
 * garbage, which was most of the server's CPU on a read-back.
 *
 * Everything else (JSON, gRPC, gRPC-web, compressed requests, other
 * methods, and anything over HTTP/2) is left to connect-node:
 * `serveFollowFast` returns false for it. The CLI and the TUI speak
 * HTTP/1.1; over HTTP/2 connect-node writes the same wire.
 * The wire is Connect's own: a 200 with enveloped messages, then the
 * end-of-stream message (flag 2) carrying `{}` or the error as JSON, as
 * connect-node writes them (endStreamToJson), so clients see no difference.
 */
import type * as http from "node:http";
import { storeReadUnavailable } from "./store-errors.js";
import type { ControlRequest, ControlResponse } from "./control-listener.js";
import { fromBinary } from "@bufbuild/protobuf";
import { ConnectError, Code as ConnectCode } from "@connectrpc/connect";
import { endStreamFlag, endStreamToJson } from "@connectrpc/connect/protocol-connect";
import { type FollowOutputRequest, FollowOutputRequestSchema } from "../../protos/gen/rvbox/v1/control_pb.js";
import { FOLLOW_BATCH_BYTES, follow, openStream } from "./control-service.js";
import type { Identity } from "./operators.js";
import { batchEnvelope, singleEnvelope } from "./follow-wire.js";
import type { ServerDaemon } from "./server-daemon.js";

export const FOLLOW_PATH = "/rvbox.v1.ControlService/FollowOutput";
/** A FollowOutputRequest is a few dozen bytes; anything much larger is not one. */
const MAX_REQUEST_BYTES = 64 * 1024;

/** True if this request is FollowOutput in the binary Connect streaming form (and is now being served). */
export function serveFollowFast(d: ServerDaemon, req: ControlRequest, res: ControlResponse, who: Identity): boolean {
  // Over HTTP/1.x these are Node's http classes (the casts below); HTTP/2 goes to connect-node.
  if (req.httpVersionMajor !== 1) return false;
  if (req.method !== "POST" || req.url !== FOLLOW_PATH) return false;
  if (req.headers["content-type"] !== "application/connect+proto") return false;
  const enc = req.headers["connect-content-encoding"];
  if (enc !== undefined && enc !== "identity") return false;
  void serve(d, req as http.IncomingMessage, res as http.ServerResponse, who);
  return true;
}

async function readBody(req: http.IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > MAX_REQUEST_BYTES) throw new ConnectError(`FollowOutput request larger than ${MAX_REQUEST_BYTES} bytes`, ConnectCode.ResourceExhausted);
    parts.push(c);
  }
  return Buffer.concat(parts);
}

function endStream(err: ConnectError | undefined): Buffer {
  const json = Buffer.from(JSON.stringify(endStreamToJson(new Headers(), err, undefined)));
  const b = Buffer.allocUnsafe(5 + json.length);
  b[0] = endStreamFlag;
  b.writeUInt32BE(json.length, 1);
  json.copy(b, 5);
  return b;
}

async function serve(d: ServerDaemon, req: http.IncomingMessage, res: http.ServerResponse, who: Identity): Promise<void> {
  const abort = new AbortController();
  const gone = (): void => abort.abort();
  res.once("close", gone);
  res.on("error", gone);
  req.once("aborted", gone);
  let uuid = "";
  try {
    res.writeHead(200, { "content-type": "application/connect+proto" });
    let failure: ConnectError | undefined;
    try {
      const body = await readBody(req);
      if (body.length < 5 || (body[0]! & 1) !== 0 || body.readUInt32BE(1) !== body.length - 5) {
        throw new ConnectError("FollowOutput: expected one uncompressed enveloped request", ConnectCode.InvalidArgument);
      }
      const r = fromBinary(FollowOutputRequestSchema, body.subarray(5));
      uuid = r.issueUuid.slice(0, 128);
      const s = openStream(d, "followOutput", who, req.headers.authorization ?? "", r);
      try {
        await stream(d, r, res, AbortSignal.any([abort.signal, s.signal]));
        if (s.ended) throw s.ended;
      } finally {
        d.streams.close(s);
      }
    } catch (err) {
      if (abort.signal.aborted) return;
      const away = storeReadUnavailable(err, d.opts.store !== undefined);
      if (!away && !(err instanceof ConnectError))
        d.log.error("FollowOutput failed", { uuid, err: err instanceof Error ? (err.stack ?? err.message) : String(err) });
      failure = away ?? ConnectError.from(err);
    }
    res.end(endStream(failure));
  } catch {
    // The reader went away while we wrote.
    res.destroy();
  } finally {
    res.removeListener("close", gone);
    res.removeListener("error", gone);
    req.removeListener("aborted", gone);
  }
}

/** The follow loop's batches to the response, each written once the socket has taken the one before. */
async function stream(d: ServerDaemon, r: FollowOutputRequest, res: http.ServerResponse, signal: AbortSignal): Promise<void> {
  const batched = r.maxBatchBytes > 0;
  const budget = batched ? Math.min(r.maxBatchBytes, FOLLOW_BATCH_BYTES) : FOLLOW_BATCH_BYTES;
  for await (const batch of follow(d, r.issueUuid, Number(r.fromEventSeq), r.follow, { signal }, budget, batched && r.acceptZstd)) {
    if (signal.aborted) return;
    if (batched && batch.length > 1) await write(res, batchEnvelope(r.issueUuid, batch), signal);
    else for (const it of batch) await write(res, singleEnvelope(it), signal);
  }
}

/** Write and wait until the socket has taken it (or the reader is gone: 'close' aborts). */
function write(res: http.ServerResponse, b: Buffer, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    if (res.write(b)) return resolve();
    const done = (): void => {
      res.removeListener("drain", done);
      signal.removeEventListener("abort", done);
      resolve();
    };
    res.once("drain", done);
    signal.addEventListener("abort", done, { once: true });
  });
}
