// The control port serves gRPC (HTTP/2 without TLS, prior knowledge) next to
// HTTP/1.1, against a REAL server and agent on loopback: what a gRPC stub in
// Go, Python or Java, grpcurl or `buf curl --protocol grpc` sends. Checked
// with buf curl itself (unary, FollowOutput live, WatchFleet's pushes, a
// missing token), with connect-node's gRPC and HTTP/2 Connect transports, and
// with HTTP/1.1 requests whose first bytes arrive one at a time.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { ControlService } from "../../../protos/gen/rvbox/v1/control_pb.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { classifyPreface, H2_PREFACE } from "../../../shells/server/control-listener.js";
import { cleanupTemp, collect, OPERATOR_TOKEN, ROOT, startAgent, startServer, waitFor, type TestServer } from "./helpers.js";

// The native binary: node_modules/.bin/buf is a Node wrapper whose child outlives a signal to it.
const NATIVE_BUF = path.join(ROOT, `node_modules/@bufbuild/buf-${process.platform}-${process.arch}/bin/buf`);
const BUF = existsSync(NATIVE_BUF) ? NATIVE_BUF : path.join(ROOT, "node_modules/.bin/buf");
const SERVICE = "rvbox.v1.ControlService";

interface Buf {
  out: () => string;
  done: Promise<{ code: number | null; out: string; err: string }>;
  stop: () => void;
}

/** `buf curl --protocol grpc --http2-prior-knowledge` on one method, the request as JSON. */
function bufCurl(base: string, method: string, body: unknown, token: string | null = OPERATOR_TOKEN): Buf {
  const args = ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--schema", "protos", "-d", JSON.stringify(body)];
  if (token !== null) args.push("-H", `Authorization: Bearer ${token}`);
  const p = spawn(BUF, [...args, `${base}/${SERVICE}/${method}`], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  p.stdout.on("data", (d: Buffer) => (out += d.toString()));
  p.stderr.on("data", (d: Buffer) => (err += d.toString()));
  const done = new Promise<{ code: number | null; out: string; err: string }>((resolve) => p.on("close", (code) => resolve({ code, out, err })));
  return { out: () => out, done, stop: () => p.kill("SIGTERM") };
}

/** buf curl prints each response message as one pretty JSON object. */
function messages(text: string): Array<Record<string, unknown>> {
  return text
    .split(/\n(?=\{)/)
    .filter((s) => s.trim() !== "")
    .map((s) => JSON.parse(s) as Record<string, unknown>);
}

const auth: Interceptor = (next) => (req) => {
  req.header.set("Authorization", `Bearer ${OPERATOR_TOKEN}`);
  return next(req);
};

describe("gRPC and HTTP/2 on the control port (live server)", () => {
  let s: TestServer;
  let agent: AgentDaemon;
  const running: Buf[] = [];

  beforeAll(async () => {
    s = await startServer();
    agent = await startAgent(s.url, "grpc-a");
    await waitFor("agent connected", async () => (await s.client.listClients({})).clients.find((c) => c.clientId === "grpc-a" && c.connected));
  });

  afterAll(async () => {
    for (const b of running) b.stop();
    await Promise.all(running.map((b) => b.done));
    await agent?.close();
    await s?.close();
    await cleanupTemp();
  });

  it("buf curl --protocol grpc: a unary call answers over HTTP/2", async () => {
    const r = await bufCurl(s.controlUrl, "ListClients", {}).done;
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    const [m] = messages(r.out);
    expect((m!.clients as Array<{ clientId: string; connected: boolean }>).map((c) => [c.clientId, c.connected])).toEqual([["grpc-a", true]]);
  });

  it("buf curl --protocol grpc: FollowOutput streams a running command's output live, to its end", async () => {
    const sub = await s.client.submitCommand({
      clientId: "grpc-a",
      program: { case: "argv", value: { argv: ["sh", "-c", 'echo before; read x; echo "got $x"; exit 7'] } },
      stdinOpen: true,
    });
    const b = bufCurl(s.controlUrl, "FollowOutput", { issueUuid: sub.command!.issueUuid, follow: true });
    running.push(b);
    // The first output arrives while the command still waits for its stdin: the stream is live, not read at the end.
    await waitFor("first output over gRPC", () => b.out().includes(Buffer.from("before\n").toString("base64")));
    await s.client.writeStdin({ issueUuid: sub.command!.issueUuid, data: Buffer.from("hi\n") });
    await s.client.closeStdin({ issueUuid: sub.command!.issueUuid });
    const r = await b.done;
    expect(r.code).toBe(0);
    const msgs = messages(r.out);
    const stdout = msgs
      .map((m) => (m.output as { data?: string } | undefined)?.data)
      .filter((d): d is string => d !== undefined)
      .map((d) => Buffer.from(d, "base64").toString())
      .join("");
    expect(stdout).toBe("before\ngot hi\n");
    expect(msgs.at(-1)!.finished).toMatchObject({ exitCode: 7 });
  });

  it("buf curl --protocol grpc: WatchFleet sends its snapshot, then what changes, on the open stream", async () => {
    const b = bufCurl(s.controlUrl, "WatchFleet", { commandClients: ["grpc-a"] });
    running.push(b);
    await waitFor("snapshot over gRPC", () => messages(b.out()).find((m) => m.snapshot !== undefined));
    const sub = await s.client.submitCommand({ clientId: "grpc-a", program: { case: "argv", value: { argv: ["true"] } } });
    await waitFor("the new command pushed over gRPC", () => b.out().includes(sub.command!.issueUuid));
    b.stop();
    await b.done;
  });

  it("buf curl --protocol grpc without the bearer token is refused as unauthenticated", async () => {
    const r = await bufCurl(s.controlUrl, "ListClients", {}, null).done;
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('"code": "unauthenticated"');
  });

  it("connect-node's gRPC transport and Connect over HTTP/2 read the same stream as the CLI's HTTP/1.1", async () => {
    const sub = await s.client.submitCommand({ clientId: "grpc-a", program: { case: "argv", value: { argv: ["sh", "-c", "seq 1 2000; echo oops >&2"] } } });
    const grpc = createClient(ControlService, createGrpcTransport({ baseUrl: s.controlUrl, interceptors: [auth] }));
    const h2 = createClient(ControlService, createConnectTransport({ baseUrl: s.controlUrl, httpVersion: "2", interceptors: [auth] }));
    const [a, b, c] = await Promise.all([
      collect(s.client, sub.command!.issueUuid),
      collect(grpc, sub.command!.issueUuid),
      collect(h2, sub.command!.issueUuid),
    ]);
    expect(a.finished?.state).toBe(L.SUCCEEDED);
    expect(a.stdout.toString().split("\n").length).toBe(2001);
    for (const other of [b, c]) {
      expect(other.stdout.equals(a.stdout)).toBe(true);
      expect(other.stderr.toString()).toBe("oops\n");
      expect(other.finished?.state).toBe(L.SUCCEEDED);
    }
  });

  it("an HTTP/1.1 request whose first bytes arrive one by one is still served as HTTP/1.1", async () => {
    const body = "{}";
    const req =
      `POST /${SERVICE}/ListClients HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${OPERATOR_TOKEN}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`;
    const sock = net.connect(s.daemon.controlAddress.port, "127.0.0.1");
    sock.setNoDelay(true);
    let text = "";
    sock.on("data", (d: Buffer) => (text += d.toString()));
    const closed = new Promise((r) => sock.on("close", r));
    await new Promise((r) => sock.once("connect", r));
    // "P", "R": as far as the HTTP/2 preface goes; "O" tells them apart.
    for (const part of [req.slice(0, 1), req.slice(1, 2), req.slice(2, 3), req.slice(3)]) {
      sock.write(part);
      await new Promise((r) => setImmediate(r));
    }
    await closed;
    expect(text.startsWith("HTTP/1.1 200")).toBe(true);
    expect(text).toContain('"clientId":"grpc-a"');
  });

  it("tells the HTTP/2 preface from HTTP/1.1 by its first bytes", () => {
    expect(classifyPreface(Buffer.from(""))).toBeUndefined();
    expect(classifyPreface(Buffer.from("PRI"))).toBeUndefined();
    expect(classifyPreface(Buffer.from("PRI "))).toBe("h2");
    expect(classifyPreface(H2_PREFACE)).toBe("h2");
    expect(classifyPreface(Buffer.from("PO"))).toBe("h1");
    expect(classifyPreface(Buffer.from("GET / HTTP/1.1\r\n"))).toBe("h1");
    expect(classifyPreface(Buffer.from("PRI * HTTP/1.1\r\n"))).toBe("h2");
  });
});
