// The envelope table (core/protocol/envelopes.ts) against the schema and
// against what the two reducers do on the wire.
import { create, type DescMessage } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { encodeEnvelope, type Payload, type PayloadCase } from "../../../core/codec/frame-codec.js";
import { Code } from "../../../core/errors.js";
import { agentAccepts, ENVELOPES, isReconcileGatedWork, isSentBy, laneOf, PAYLOAD_CASES, serverAccepts } from "../../../core/protocol/envelopes.js";
import * as pb from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { AgentEnvelopeSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { decode, Harness } from "../../support/harness.js";

/** An empty payload of each kind (its message schema found by the oneof field). */
function emptyPayload(kind: PayloadCase): Payload {
  const field = AgentEnvelopeSchema.fields.find((f) => f.localName === kind)!;
  const schema = (field as { message: DescMessage }).message;
  return { case: kind, value: create(schema) } as Payload;
}

/** A harness with one registered, reconciled agent "a" and one finished and one running command. */
function busyPair(): Harness {
  const h = new Harness();
  h.addAgent("a");
  h.submit("a", "c1");
  h.output("a", "c1", "out\n");
  h.exit("a", "c1", 0);
  h.submit("a", "c2", { argv: ["cat"], stdinOpen: true });
  h.control({ op: "stdin", requestId: "s1", uuid: "c2", data: new TextEncoder().encode("x"), appendNewline: true });
  h.control({ op: "close_stdin", requestId: "s2", uuid: "c2" });
  h.control({ op: "signal", requestId: "s3", uuid: "c2", signal: SignalKind.TERMINATE });
  h.cutLink("a");
  h.reconnectNow("a");
  return h;
}

describe("envelope table", () => {
  it("R-T5: classifies exactly the payload kinds of AgentEnvelope, no more and no fewer", () => {
    const oneof = AgentEnvelopeSchema.oneofs.find((o) => o.name === "payload")!;
    expect(new Set(PAYLOAD_CASES)).toEqual(new Set(oneof.fields.map((f) => f.localName)));
    for (const k of PAYLOAD_CASES) {
      const row = ENVELOPES[k];
      // A kind is accepted only by a side it can be sent to.
      if (row.from === "agent") expect(row.agentPhases, k).toHaveLength(0);
      if (row.from === "server") expect(row.serverPhases, k).toHaveLength(0);
    }
    void pb;
  });

  it("R-W4: every frame either node sends comes from the side the table names, on the lane it names", () => {
    const h = busyPair();
    const seen = new Set<string>();
    for (const e of h.serverEffects) {
      if (e.type !== "send") continue;
      seen.add(e.kind);
      expect(isSentBy(e.kind as PayloadCase, "server"), `server sent ${e.kind}`).toBe(true);
      expect(e.lane, e.kind).toBe(laneOf(e.kind as PayloadCase));
    }
    for (const { e } of h.agentEffects) {
      if (e.type !== "send") continue;
      seen.add(e.kind);
      expect(isSentBy(e.kind as PayloadCase, "agent"), `agent sent ${e.kind}`).toBe(true);
      expect(e.lane, e.kind).toBe(laneOf(e.kind as PayloadCase));
    }
    // The scenario exercised most of the table, so the check above means something.
    for (const k of [
      "clientHello",
      "serverWelcome",
      "commandDispatch",
      "commandAccepted",
      "commandEvent",
      "eventAck",
      "stdinWrite",
      "closeStdin",
      "signalCommand",
      "reconcileRequest",
      "reconcileSnapshot",
      "reconcileResult",
    ])
      expect(seen.has(k), k).toBe(true);
  });

  it("R-T5: the server closes a session with PROTOCOL_ERROR on any kind the table gives only to the server", () => {
    for (const kind of PAYLOAD_CASES.filter((k) => ENVELOPES[k].from === "server")) {
      const h = new Harness();
      h.addAgent("a");
      const a = h.agents.get("a")!;
      const session = h.sessionFor("a")!;
      expect(session.phase).toBe("ready");
      const before = h.serverEffects.length;
      h.serverInput({
        type: "frame",
        conn: a.serverConn,
        data: encodeEnvelope({ sessionId: session.sessionId, generation: Number(session.generation) }, emptyPayload(kind)),
      });
      const after = h.serverEffects.slice(before);
      const err = after.find((e) => e.type === "send" && e.kind === "error");
      expect(err, kind).toBeDefined();
      const env = decode((err as { data: Uint8Array }).data);
      expect(env.payload.case === "error" && env.payload.value.error?.code, kind).toBe(Code.PROTOCOL_ERROR);
      expect(
        after.some((e) => e.type === "close"),
        kind,
      ).toBe(true);
    }
  });

  it("R-T5: the agent fails its session with PROTOCOL_ERROR on any kind the table gives only to the agent", () => {
    for (const kind of PAYLOAD_CASES.filter((k) => ENVELOPES[k].from === "agent")) {
      const h = new Harness();
      h.addAgent("a");
      const a = h.agents.get("a")!;
      const fence = a.st.session.fence!; // setup: to fence the crafted frame
      expect(h.sessionFor("a")?.phase).toBe("ready");
      const before = h.agentEffects.length;
      h.agentInput("a", { type: "frame", conn: a.conn, data: encodeEnvelope(fence, emptyPayload(kind)) });
      const after = h.agentEffects.slice(before).map((x) => x.e);
      const err = after.find((e) => e.type === "send" && e.kind === "error");
      expect(err, kind).toBeDefined();
      const env = decode((err as { data: Uint8Array }).data);
      expect(env.payload.case === "error" && env.payload.value.error?.code, kind).toBe(Code.PROTOCOL_ERROR);
      expect(h.linkUp("a"), kind).toBe(false);
    }
  });

  it("R-T5: a kind is sent by the side its row names and by no other ('both': by either)", () => {
    for (const k of PAYLOAD_CASES) {
      const from = ENVELOPES[k].from;
      expect(isSentBy(k, "agent"), k).toBe(from !== "server");
      expect(isSentBy(k, "server"), k).toBe(from !== "agent");
    }
    expect(isSentBy("error", "agent") && isSentBy("error", "server")).toBe(true);
    expect(isSentBy("clientHello", "server")).toBe(false);
    expect(isSentBy("commandDispatch", "agent")).toBe(false);
  });

  it("R-D8: exactly the server's work kinds wait for the session's ReconcileResult", () => {
    expect(PAYLOAD_CASES.filter(isReconcileGatedWork).sort()).toEqual(
      ["closeStdin", "commandDispatch", "scriptChunk", "scriptCommit", "signalCommand", "stdinWrite"].sort(),
    );
    // Agent-sent work that the agent holds back itself is not gated by the server's rule.
    expect(ENVELOPES.commandEvent.needsReconcile && !isReconcileGatedWork("commandEvent")).toBe(true);
  });

  it("R-T5: each side accepts a kind in exactly the phases its row lists", () => {
    expect(serverAccepts("clientHello", "hello")).toBe(true);
    expect(serverAccepts("clientHello", "ready")).toBe(false);
    expect(serverAccepts("reconcileSnapshot", "reconciling")).toBe(true);
    expect(serverAccepts("reconcileSnapshot", "ready")).toBe(false);
    expect(agentAccepts("serverWelcome", "registering")).toBe(true);
    expect(agentAccepts("serverWelcome", "established")).toBe(false);
    expect(agentAccepts("commandDispatch", "registering")).toBe(false);
    expect(laneOf("error")).toBe("priority");
    expect(laneOf("commandEvent")).toBe("data");
  });
});
