// A hand-driven agent for protocol-abuse tests: raw `ws` socket, envelopes
// built with the core's codec, every inbound envelope recorded.
import { create, fromBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { WebSocket } from "ws";
import { AgentEnvelopeSchema, ClientHelloSchema, type AgentEnvelope } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { Platform, ProtocolRangeSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { encodeEnvelope, type Fence, type Payload } from "../../../core/index.js";

export class RawAgent {
  readonly inbox: AgentEnvelope[] = [];
  fence: Fence | null = null;
  closed: Promise<{ code: number; reason: string }>;
  private waiters: Array<() => void> = [];
  status = 0;

  private constructor(readonly ws: WebSocket) {
    this.closed = new Promise((r) => ws.on("close", (code, reason) => r({ code, reason: reason.toString() })));
    ws.on("message", (d: Buffer) => {
      try {
        this.inbox.push(fromBinary(AgentEnvelopeSchema, d));
      } catch {
        // ignore
      }
      for (const w of this.waiters.splice(0)) w();
    });
    ws.on("error", () => {});
  }

  /** Connect; resolves with the agent or with the refused HTTP status. */
  static connect(url: string, token: string | null, ca?: Buffer): Promise<RawAgent | { status: number }> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers: token ? { Authorization: `Bearer ${token}` } : {}, perMessageDeflate: false, ca });
      ws.on("unexpected-response", (_req, res) => {
        resolve({ status: res.statusCode ?? 0 });
        res.resume();
        ws.terminate();
      });
      ws.on("open", () => resolve(new RawAgent(ws)));
      ws.on("error", (e) => reject(e));
    });
  }

  send(payload: Payload, fence: Fence | null = this.fence): void {
    this.ws.send(encodeEnvelope(fence, payload), { binary: true });
  }

  sendRaw(data: Uint8Array | string, binary = true): void {
    this.ws.send(data, { binary });
  }

  async next(kind: string, timeoutMs = 10_000): Promise<AgentEnvelope> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const i = this.inbox.findIndex((e) => e.payload.case === kind);
      if (i >= 0) return this.inbox.splice(i, 1)[0]!;
      if (Date.now() > end) throw new Error(`no ${kind} within ${timeoutMs} ms (got ${this.inbox.map((e) => e.payload.case).join(",")})`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 50);
      });
    }
  }

  hello(clientId: string, instanceId: string, range = { min: { major: 1, minor: 0 }, max: { major: 1, minor: 0 } }): void {
    this.send(
      {
        case: "clientHello",
        value: create(ClientHelloSchema, {
          clientId,
          clientInstanceId: instanceId,
          supportedProtocol: create(ProtocolRangeSchema, range),
          daemonVersion: "raw-test",
          platform: Platform.LINUX,
          architecture: "x64",
          daemonCwd: "/",
          maxRunningCommands: 4,
          maxQueuedCommands: 4,
          sentAt: timestampFromMs(Date.now()),
        }),
      },
      null,
    );
  }

  /** Hello, welcome, empty snapshot: the session is ready for dispatches. */
  async register(clientId: string, instanceId: string): Promise<void> {
    this.hello(clientId, instanceId);
    const w = await this.next("serverWelcome");
    this.fence = { sessionId: w.sessionId, generation: Number(w.sessionGeneration) };
    await this.next("reconcileRequest");
    this.send({ case: "reconcileSnapshot", value: { $typeName: "rvbox.v1.ReconcileSnapshot", retainedCommands: [] } });
    await this.next("reconcileResult");
  }

  /** The structured error the peer sent, and the close that followed. */
  async errorAndClose(): Promise<{ code: number; closeSession: boolean; close: { code: number; reason: string } }> {
    const e = await this.next("error");
    const close = await Promise.race([
      this.closed,
      new Promise<{ code: number; reason: string }>((_, rej) => setTimeout(() => rej(new Error("not closed")), 10_000)),
    ]);
    const v = e.payload.value as { error?: { code: number }; closeSession: boolean };
    return { code: v.error?.code ?? 0, closeSession: v.closeSession, close };
  }

  close(): void {
    this.ws.terminate();
  }
}
