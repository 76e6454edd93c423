// Malformed, oversized, wrongly compressed, stale and unauthenticated input
// from a raw client: a structured AgentError and a close, while the daemons
// keep serving a well-behaved agent (R-W10, R-T1..R-T5, R-F7).
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { CommandAcceptedSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { Code, CommandEventSchema, CommandLifecycle as L, OutputChunkSchema, OutputStream } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { encodeRawZstdFrame } from "../../../shells/zstd/index.js";
import { cleanupTemp, collect, controlClient, FLEET_TOKEN, startAgent, startServer, waitFor, type TestServer } from "./helpers.js";
import { RawAgent } from "./raw-client.js";

const ALPHA_TOKEN = "alpha-only-token-123";

describe("e2e: protocol abuse and authentication", () => {
  let s: TestServer;
  let good: AgentDaemon;
  beforeAll(async () => {
    s = await startServer({ tokens: `* ${FLEET_TOKEN}\nalpha ${ALPHA_TOKEN}\n` });
    good = await startAgent(s.url, "healthy");
    await waitFor("healthy connected", () => good.connected);
  });
  afterAll(async () => {
    await good?.close();
    await s?.close();
    await cleanupTemp();
  });

  async function raw(token: string | null = FLEET_TOKEN): Promise<RawAgent> {
    const r = await RawAgent.connect(s.url, token);
    if (!(r instanceof RawAgent)) throw new Error(`refused with HTTP ${r.status}`);
    return r;
  }

  async function stillServing(): Promise<void> {
    const r = await s.client.submitCommand({ clientId: "healthy", program: { case: "argv", value: { argv: ["echo", "ok"] } } });
    const got = await collect(s.client, r.command!.issueUuid);
    expect(got.stdout.toString()).toBe("ok\n");
    expect(good.connected).toBe(true);
    expect(s.daemon.fatal).toBeNull();
  }

  it("R-T6 R-W10: HTTP 401 before the WebSocket opens without a valid bearer token; control API likewise", async () => {
    expect(await RawAgent.connect(s.url, null)).toEqual({ status: 401 });
    expect(await RawAgent.connect(s.url, "wrong-token-xyz")).toEqual({ status: 401 });
    const wrongPath = await RawAgent.connect(s.url.replace("/v1/agent", "/v1/other"), FLEET_TOKEN);
    expect(wrongPath).toEqual({ status: 404 });
    const anon = controlClient(s.controlUrl, "not-the-operator");
    await expect(anon.listClients({})).rejects.toMatchObject({ code: ConnectCode.Unauthenticated });
    const res = await fetch(`${s.controlUrl}/rvbox.v1.ControlService/ListClients`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(401);
    const ok = await fetch(`${s.controlUrl}/rvbox.v1.ControlService/ListClients`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${(await import("./helpers.js")).OPERATOR_TOKEN}` },
      body: "{}",
    });
    expect(ok.status).toBe(200);
  });

  it("R-W10: a token bound to one client id cannot register another (structured UNAUTHENTICATED, close)", async () => {
    const r = await raw(ALPHA_TOKEN);
    r.hello("beta", "inst-beta");
    const e = await r.errorAndClose();
    expect(e.code).toBe(Code.UNAUTHENTICATED);
    expect(e.closeSession).toBe(true);
    const ok = await raw(ALPHA_TOKEN);
    await ok.register("alpha", "inst-alpha");
    ok.close();
  });

  it("R-T1 R-T5 R-W10: malformed protobuf, a text frame and an envelope without a known payload are PROTOCOL_ERROR and close", async () => {
    const r1 = await raw();
    r1.sendRaw(new Uint8Array([0xff, 0xff, 0xff, 0xff, 0x0f]));
    expect(await r1.errorAndClose()).toMatchObject({ code: Code.PROTOCOL_ERROR, closeSession: true });
    const r2 = await raw();
    r2.sendRaw("hello, I am text", false);
    expect(await r2.errorAndClose()).toMatchObject({ code: Code.PROTOCOL_ERROR });
    const r3 = await raw();
    // Field 99, varint 1: unknown to this version, and no payload at all.
    r3.sendRaw(new Uint8Array([0x98, 0x06, 0x01]));
    expect(await r3.errorAndClose()).toMatchObject({ code: Code.PROTOCOL_ERROR });
    await stillServing();
  });

  it("R-T2 R-W10: an envelope over 1 MiB is refused before decoding with PAYLOAD_TOO_LARGE; a far larger frame is cut by the transport (1009)", async () => {
    const r1 = await raw();
    r1.sendRaw(new Uint8Array(1024 * 1024 + 1024));
    expect(await r1.errorAndClose()).toMatchObject({ code: Code.PAYLOAD_TOO_LARGE, closeSession: true });
    const r2 = await raw();
    r2.sendRaw(new Uint8Array(4 * 1024 * 1024));
    expect((await r2.closed).code).toBe(1009);
    await stillServing();
  });

  it("R-T4: an incompatible protocol major is refused", async () => {
    const r = await raw();
    r.hello("raw-v2", "inst-v2", { min: { major: 2, minor: 0 }, max: { major: 2, minor: 3 } });
    expect(await r.errorAndClose()).toMatchObject({ code: Code.INCOMPATIBLE_VERSION });
  });

  async function dispatched(clientId: string): Promise<{ r: RawAgent; uuid: string }> {
    const r = await raw();
    await r.register(clientId, `inst-${clientId}`);
    const sub = await s.client.submitCommand({ clientId, program: { case: "argv", value: { argv: ["true"] } } });
    const d = await r.next("commandDispatch");
    const uuid = (d.payload.value as { issueUuid: string }).issueUuid;
    expect(uuid).toBe(sub.command!.issueUuid);
    r.send({ case: "commandAccepted", value: create(CommandAcceptedSchema, { issueUuid: uuid, commandRevision: 1n, accepted: true }) });
    await waitFor("accepted", async () => (await s.client.getCommand({ issueUuid: uuid })).command!.state === L.ACCEPTED);
    return { r, uuid };
  }

  function outputEvent(uuid: string, seq: number, zstd: Uint8Array, size: number, offset = 0) {
    return {
      case: "commandEvent" as const,
      value: create(CommandEventSchema, {
        issueUuid: uuid,
        eventSeq: BigInt(seq),
        commandRevision: 1n,
        time: timestampFromMs(Date.now()),
        event: {
          case: "output",
          value: create(OutputChunkSchema, { stream: OutputStream.STDOUT, streamOffset: BigInt(offset), originalSize: size, zstdData: zstd }),
        },
      }),
    };
  }

  it("R-T3 R-O4 R-W10: wrongly compressed output (garbage, and a frame whose size lies) is BAD_COMPRESSION and close; nothing of it is stored", async () => {
    const { r, uuid } = await dispatched("raw-zstd");
    r.send(outputEvent(uuid, 1, new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3, 4, 5, 6]), 100));
    expect(await r.errorAndClose()).toMatchObject({ code: Code.BAD_COMPRESSION, closeSession: true });
    // (A new session with an empty snapshot would interrupt that command:
    // each case gets its own client and command.)
    const second = await dispatched("raw-zstd-2");
    // A valid frame of 10 bytes declared as 20.
    second.r.send(outputEvent(second.uuid, 1, encodeRawZstdFrame(new Uint8Array(10)), 20));
    const e2 = await second.r.errorAndClose();
    expect([Code.BAD_COMPRESSION, Code.PAYLOAD_TOO_LARGE]).toContain(e2.code);
    const third = await dispatched("raw-zstd-3");
    // Declared size over the 64 KiB chunk limit (R-T3).
    third.r.send(outputEvent(third.uuid, 1, encodeRawZstdFrame(new Uint8Array(10)), 70_000));
    expect(await third.r.errorAndClose()).toMatchObject({ code: Code.PAYLOAD_TOO_LARGE });
    for (const u of [uuid, second.uuid, third.uuid]) expect((await s.client.getCommand({ issueUuid: u })).command!.storedThroughEventSeq).toBe(0n);
    await stillServing();
  });

  it("R-F7 R-W10: an envelope fenced to another generation is STALE_GENERATION and close; an impossible sequence is SEQUENCE_VIOLATION", async () => {
    const { r, uuid } = await dispatched("raw-fence");
    r.send(outputEvent(uuid, 1, encodeRawZstdFrame(new Uint8Array([65])), 1), { sessionId: r.fence!.sessionId, generation: r.fence!.generation + 7 });
    expect(await r.errorAndClose()).toMatchObject({ code: Code.STALE_GENERATION, closeSession: true });
    expect((await s.client.getCommand({ issueUuid: uuid })).command!.storedThroughEventSeq).toBe(0n);
    const gap = await dispatched("raw-seq");
    gap.r.send(outputEvent(gap.uuid, 5, encodeRawZstdFrame(new Uint8Array([65])), 1));
    expect(await gap.r.errorAndClose()).toMatchObject({ code: Code.SEQUENCE_VIOLATION });
    const off = await dispatched("raw-offset");
    off.r.send(outputEvent(off.uuid, 1, encodeRawZstdFrame(new Uint8Array([65])), 1, 999));
    expect(await off.r.errorAndClose()).toMatchObject({ code: Code.SEQUENCE_VIOLATION });
    await stillServing();
  });

  it("R-W10: the control API answers bad requests with errors, not crashes", async () => {
    await expect(s.client.submitCommand({ clientId: "", program: { case: "argv", value: { argv: ["x"] } } })).rejects.toBeInstanceOf(ConnectError);
    await expect(
      s.client.submitCommand({ clientId: "c", allowUnknownClient: true, issueUuid: "bad uuid with spaces", program: { case: "argv", value: { argv: ["x"] } } }),
    ).rejects.toMatchObject({
      code: ConnectCode.InvalidArgument,
    });
    await s.client.submitCommand({ clientId: "c", allowUnknownClient: true, issueUuid: "dup-1", program: { case: "argv", value: { argv: ["x"] } } });
    // Same uuid, same request: idempotent. Different request: conflict.
    await s.client.submitCommand({ clientId: "c", allowUnknownClient: true, issueUuid: "dup-1", program: { case: "argv", value: { argv: ["x"] } } });
    await expect(
      s.client.submitCommand({ clientId: "c", allowUnknownClient: true, issueUuid: "dup-1", program: { case: "argv", value: { argv: ["y"] } } }),
    ).rejects.toMatchObject({ code: ConnectCode.AlreadyExists });
    await expect(s.client.getCommand({ issueUuid: "nope" })).rejects.toMatchObject({ code: ConnectCode.NotFound });
    await expect(s.client.writeStdin({ issueUuid: "dup-1", data: new Uint8Array(70_000) })).rejects.toBeInstanceOf(ConnectError);
    await stillServing();
  });
});
