// The real agent daemon against a scripted server speaking the protocol with
// the core's codec: script checksum failures end `rejected` (never `failed`)
// and never launch (R-C2, R-C4); a dispatch for another generation is refused
// (R-F7); a malformed frame gets a structured error, a close and a reconnect
// (R-W10).
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import * as path from "node:path";
import { create, fromBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, describe, expect, it } from "vitest";
import { WebSocketServer, type WebSocket } from "ws";
import { encodeEnvelope, type Fence, type Payload } from "../../../core/index.js";
import {
  AgentEnvelopeSchema,
  CommandDispatchSchema,
  EventAckSchema,
  ReconcileRequestSchema,
  ReconcileResultSchema,
  ScriptChunkSchema,
  ScriptCommitSchema,
  ServerWelcomeSchema,
  type AgentEnvelope,
} from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { Code, CommandLifecycle as L, ExecutionSpecSchema, ProtocolVersionSchema, ScriptDescriptorSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, startAgent, tempDir, waitFor } from "./helpers.js";

const sha = (b: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest());

class FakeServer {
  wss!: WebSocketServer;
  port = 0;
  conns: Array<{ ws: WebSocket; fence: Fence; inbox: AgentEnvelope[] }> = [];
  hellos: AgentEnvelope[] = [];
  private gen = 0;

  async start(): Promise<void> {
    this.wss = new WebSocketServer({ port: 0, host: "127.0.0.1", path: "/v1/agent" });
    await new Promise<void>((r) => this.wss.once("listening", () => r()));
    this.port = (this.wss.address() as { port: number }).port;
    this.wss.on("connection", (ws) => {
      const c = { ws, fence: { sessionId: `sess-${++this.gen}`, generation: this.gen }, inbox: [] as AgentEnvelope[] };
      this.conns.push(c);
      ws.on("message", (d: Buffer) => {
        const env = fromBinary(AgentEnvelopeSchema, d);
        c.inbox.push(env);
        if (env.payload.case === "clientHello") {
          this.hellos.push(env);
          this.send(c, {
            case: "serverWelcome",
            value: create(ServerWelcomeSchema, {
              selectedProtocol: create(ProtocolVersionSchema, { major: 1, minor: 0 }),
              serverTime: timestampFromMs(Date.now()),
            }),
          });
          this.send(c, { case: "reconcileRequest", value: create(ReconcileRequestSchema, { targets: [] }) });
        } else if (env.payload.case === "reconcileSnapshot") {
          this.send(c, { case: "reconcileResult", value: create(ReconcileResultSchema, {}) });
        } else if (env.payload.case === "commandEvent") {
          const ev = env.payload.value;
          this.send(c, { case: "eventAck", value: create(EventAckSchema, { issueUuid: ev.issueUuid, throughEventSeq: ev.eventSeq }) });
        }
      });
    });
  }

  get current() {
    return this.conns[this.conns.length - 1]!;
  }

  send(c: { ws: WebSocket; fence: Fence }, p: Payload): void {
    c.ws.send(encodeEnvelope(c.fence, p), { binary: true });
  }

  events(uuid: string) {
    return this.conns
      .flatMap((c) => c.inbox)
      .filter((e) => e.payload.case === "commandEvent" && e.payload.value.issueUuid === uuid)
      .map((e) => (e.payload.value as { event: { case: string; value: unknown } }).event);
  }

  accepted(uuid: string) {
    return this.conns.flatMap((c) => c.inbox).find((e) => e.payload.case === "commandAccepted" && e.payload.value.issueUuid === uuid)?.payload.value as
      | { accepted: boolean; rejection?: { code: number } }
      | undefined;
  }

  dispatchScript(uuid: string, content: Uint8Array, declaredSha: Uint8Array, commitSha: Uint8Array, generation = this.current.fence.generation): void {
    const spec = create(ExecutionSpecSchema, {
      program: { case: "script", value: create(ScriptDescriptorSchema, { sizeBytes: BigInt(content.length), sha256: declaredSha, interpreter: "/bin/sh" }) },
    });
    const c = this.current;
    this.send(c, {
      case: "commandDispatch",
      value: create(CommandDispatchSchema, {
        issueUuid: uuid,
        commandRevision: 1n,
        targetSessionGeneration: BigInt(generation),
        issueTime: timestampFromMs(Date.now()),
        spec,
        queueExpiryTime: timestampFromMs(Date.now() + 60_000),
        immutableRequestSha256: sha(Buffer.from(uuid)),
      }),
    });
    if (generation !== c.fence.generation) return;
    for (let off = 0; off < content.length; off += 1000) {
      const data = content.subarray(off, off + 1000);
      this.send(c, { case: "scriptChunk", value: create(ScriptChunkSchema, { issueUuid: uuid, offset: BigInt(off), data, sha256: sha(data) }) });
    }
    this.send(c, { case: "scriptCommit", value: create(ScriptCommitSchema, { issueUuid: uuid, sizeBytes: BigInt(content.length), sha256: commitSha }) });
  }

  async close(): Promise<void> {
    for (const c of this.conns) c.ws.terminate();
    await new Promise<void>((r) => this.wss.close(() => r()));
  }
}

describe("e2e: the agent against a scripted server", () => {
  afterAll(cleanupTemp);

  it("R-C2 R-C4 R-D4 R-F7 R-W10: bad script checksums end rejected without launch; a dispatch for another generation is refused; a malformed frame gets an error, a close and a reconnect", async () => {
    const fake = new FakeServer();
    await fake.start();
    const work = await tempDir("rvbox-rogue-");
    const agent = await startAgent(`ws://127.0.0.1:${fake.port}/v1/agent`, "victim");
    try {
      await waitFor("registered", () => agent.connected && fake.conns.length === 1);
      await waitFor("snapshot", () => fake.current.inbox.some((e) => e.payload.case === "reconcileSnapshot"));
      const marker = path.join(work, "launched");
      const content = Buffer.from(`#!/bin/sh\necho launched > ${marker}\n${"# padding\n".repeat(400)}`);
      // 1. The bytes do not match the declared digest (commit repeats the declared one).
      const wrong = sha(Buffer.from("not the script"));
      fake.dispatchScript("script-bad-1", content, wrong, wrong);
      // 2. The declared digest is right but the commit names another.
      fake.dispatchScript("script-bad-2", content, sha(content), wrong);
      for (const uuid of ["script-bad-1", "script-bad-2"]) {
        await waitFor(`${uuid} ends`, () => fake.events(uuid).some((e) => e.case === "lifecycle" && (e.value as { state: L }).state !== L.RUNNING));
        const lifecycle = fake
          .events(uuid)
          .filter((e) => e.case === "lifecycle")
          .map((e) => e.value as { state: L; error?: { code: Code } });
        expect(lifecycle.map((l) => l.state)).toEqual([L.REJECTED]);
        expect(lifecycle[0]!.error?.code).toBe(Code.VALIDATION);
        expect(fake.accepted(uuid)?.accepted).toBe(true);
      }
      expect(existsSync(marker)).toBe(false);
      expect(agent.stats.spawned).toBe(0);
      // 3. The good one runs.
      fake.dispatchScript("script-good", content, sha(content), sha(content));
      await waitFor("good script succeeded", () =>
        fake.events("script-good").some((e) => e.case === "lifecycle" && (e.value as { state: L }).state === L.SUCCEEDED),
      );
      expect(existsSync(marker)).toBe(true);
      // 4. A dispatch naming another generation is refused (transient STALE_GENERATION), never admitted.
      fake.dispatchScript("stale-gen", content, sha(content), sha(content), fake.current.fence.generation + 3);
      await waitFor("stale refused", () => fake.accepted("stale-gen"));
      expect(fake.accepted("stale-gen")).toMatchObject({ accepted: false, rejection: { code: Code.STALE_GENERATION } });
      // 5. Garbage from the server: structured error, close, and a reconnect with the same instance id.
      const first = fake.current;
      first.ws.send(new Uint8Array([0xff, 0xfe, 0xfd]));
      await waitFor("agent error", () => first.inbox.some((e) => e.payload.case === "error"));
      const err = first.inbox.find((e) => e.payload.case === "error")!.payload.value as { error?: { code: Code }; closeSession: boolean };
      expect(err).toMatchObject({ error: { code: Code.PROTOCOL_ERROR }, closeSession: true });
      await waitFor("reconnected", () => fake.conns.length >= 2 && agent.connected, 15_000);
      const ids = fake.hellos.map((h) => (h.payload.value as { clientInstanceId: string }).clientInstanceId);
      expect(new Set(ids).size).toBe(1);
      expect(agent.fatal).toBeNull();
    } finally {
      await agent.close({ killProcesses: true });
      await fake.close();
    }
  }, 60_000);
});
