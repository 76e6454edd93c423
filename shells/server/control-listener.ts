/**
 * The control port speaks HTTP/1.1 and HTTP/2 without TLS ("h2c" with prior
 * knowledge, what gRPC clients, grpcurl and `buf curl --http2-prior-knowledge`
 * send) on one listening socket. Node's `http2.createServer({ allowHTTP1 })`
 * falls back to HTTP/1.1 only after TLS's ALPN, so the choice is made here:
 * each new connection's first bytes are compared with the HTTP/2 client
 * preface (RFC 9113, 3.4); a connection that starts with it goes to an
 * `http2` server, any other to the `http.Server` that listens, exactly as
 * before (its timeouts, connection tracking and `closeAllConnections` keep
 * working for HTTP/1.1). The bytes read to decide are put back
 * (`socket.unshift`) before either server sees the socket.
 *
 * ConnectRPC serves the Connect, gRPC and gRPC-web protocols on both; gRPC
 * needs HTTP/2 (its trailers), which is why this exists.
 */
import * as http from "node:http";
import * as http2 from "node:http2";
import type { Socket } from "node:net";

/** RFC 9113, 3.4: what an HTTP/2 client sends first on a connection it knows speaks HTTP/2. */
export const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
/** A connection that sends too few bytes to tell its protocol within this long is closed (http.Server's headersTimeout). */
export const CONTROL_SNIFF_TIMEOUT_MS = 60_000;
/** HTTP/2 streams (calls) one connection may have open at once: the SETTINGS_MAX_CONCURRENT_STREAMS the server announces. */
export const CONTROL_H2_MAX_STREAMS = 128;

export type ControlRequest = http.IncomingMessage | http2.Http2ServerRequest;
export type ControlResponse = http.ServerResponse | http2.Http2ServerResponse;
export type ControlHandler = (req: ControlRequest, res: ControlResponse) => void;

/** Bytes that decide: "PRI " starts no HTTP/1.x request (there is no such method); the HTTP/2 session checks the rest of the preface. */
const DECIDING_BYTES = 4;

/** "h2" once the first 4 bytes are the preface's, "h1" as soon as one differs, undefined while too few to tell. */
export function classifyPreface(head: Buffer): "h1" | "h2" | undefined {
  const n = Math.min(head.length, DECIDING_BYTES);
  for (let i = 0; i < n; i++) if (head[i] !== H2_PREFACE[i]) return "h1";
  return n === DECIDING_BYTES ? "h2" : undefined;
}

export class ControlListener {
  /** Listens; serves HTTP/1.1 connections. */
  readonly h1: http.Server;
  /** Never listens; is handed the HTTP/2 connections. */
  readonly h2: http2.Http2Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly sniffing = new Set<Socket>();

  constructor(handler: ControlHandler) {
    this.h1 = http.createServer(handler);
    this.h2 = http2.createServer({ settings: { maxConcurrentStreams: CONTROL_H2_MAX_STREAMS } }, handler);
    this.h2.on("session", (s) => {
      this.sessions.add(s);
      s.once("close", () => this.sessions.delete(s));
    });
    // http.Server's own listener (Node's connectionListener) runs once a connection is known to be HTTP/1.x.
    const serveH1 = this.h1.listeners("connection")[0] as (socket: Socket) => void;
    this.h1.removeListener("connection", serveH1);
    this.h1.on("connection", (socket: Socket) => this.sniff(socket, serveH1));
    this.h1.on("clientError", (_err, socket) => socket.destroy());
  }

  private sniff(socket: Socket, serveH1: (socket: Socket) => void): void {
    this.sniffing.add(socket);
    let head: Buffer = Buffer.alloc(0);
    const fail = (): void => {
      done();
      socket.destroy();
    };
    const onData = (chunk: Buffer): void => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      const kind = classifyPreface(head);
      if (kind === undefined) return;
      done();
      socket.pause();
      socket.unshift(head);
      if (kind === "h2") {
        this.h2.emit("connection", socket);
      } else {
        serveH1.call(this.h1, socket);
        socket.resume();
      }
    };
    const done = (): void => {
      this.sniffing.delete(socket);
      socket.setTimeout(0);
      socket.removeListener("data", onData);
      socket.removeListener("error", fail);
      socket.removeListener("timeout", fail);
      socket.removeListener("end", fail);
    };
    socket.setTimeout(CONTROL_SNIFF_TIMEOUT_MS);
    socket.on("timeout", fail);
    socket.on("error", fail);
    socket.on("end", fail);
    socket.on("data", onData);
  }

  /** Ends every connection now (HTTP/1.1 ones through the server's own tracking). */
  destroyAll(): void {
    for (const s of this.sniffing) s.destroy();
    this.sniffing.clear();
    for (const s of this.sessions) s.destroy();
    this.h1.closeAllConnections();
  }
}
