/**
 * A request body that does not decode as its protobuf message is the
 * caller's error (INVALID_ARGUMENT, HTTP 400), but connect-es's binary
 * deserializer reports every decode failure as `Code.Internal` ("parse
 * binary: premature EOF", "illegal tag …", invalid UTF-8), before any
 * interceptor runs; fuzz:control counted hundreds of HTTP 500s for them.
 * Each of the router's handlers is wrapped to answer those as
 * INVALID_ARGUMENT instead, on the Connect protocol (a unary error's JSON
 * body) and on gRPC and gRPC-web (the status in the trailers, looked at once
 * the body has run, or in the headers of a trailers-only reply). Nothing else
 * is touched.
 */
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";

const DECODE_FAILURE = "parse binary: ";
/** A Connect unary error body is small; anything larger is not one of these. */
const MAX_ERROR_BODY = 64 * 1024;

async function* once(b: Uint8Array): AsyncIterable<Uint8Array> {
  yield b;
}

/** A gRPC status 13 whose message is a decode failure, as status 3 (in place). */
function remapGrpc(h: Headers | undefined): boolean {
  if (h?.get("grpc-status") !== "13") return false;
  const m = decodeURIComponent(h.get("grpc-message") ?? "");
  if (!m.startsWith(DECODE_FAILURE)) return false;
  h.set("grpc-status", "3");
  return true;
}

async function remapConnect(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  if (res.status !== 500 || !res.body || !res.header?.get("content-type")?.startsWith("application/json")) return res;
  const parts: Uint8Array[] = [];
  let n = 0;
  for await (const p of res.body) {
    parts.push(p);
    n += p.length;
    if (n > MAX_ERROR_BODY) break;
  }
  const bytes = Buffer.concat(parts);
  let err: { code?: unknown; message?: unknown } | null = null;
  try {
    err = JSON.parse(bytes.toString("utf8")) as { code?: unknown; message?: unknown };
  } catch {
    // not a Connect error body: pass it on as it was
  }
  if (err?.code !== "internal" || typeof err.message !== "string" || !err.message.startsWith(DECODE_FAILURE)) return { ...res, body: once(bytes) };
  const body = Buffer.from(JSON.stringify({ code: "invalid_argument", message: err.message }));
  const header = new Headers(res.header);
  header.set("content-length", String(body.length));
  return { ...res, status: 400, header, body: once(body) };
}

/** `h`, answering an undecodable request body as INVALID_ARGUMENT rather than INTERNAL. */
export function decodeErrorsAsInvalid(h: UniversalHandler): UniversalHandler {
  const wrapped = async (req: Parameters<UniversalHandler>[0]): Promise<UniversalServerResponse> => {
    const res = await h(req);
    if (remapGrpc(res.header)) return res;
    if (res.header?.get("content-type")?.startsWith("application/grpc") && res.trailer && res.body) {
      // gRPC sets its status in the trailers once the body has run: look again after it.
      const { body, trailer } = res;
      return {
        ...res,
        body: (async function* () {
          yield* body;
          remapGrpc(trailer);
        })(),
      };
    }
    return remapConnect(res);
  };
  return Object.assign(wrapped, h);
}
