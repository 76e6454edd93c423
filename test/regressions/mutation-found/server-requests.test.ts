// A real (minor) bug found while writing the mutation-survivor tests for the
// server reducer. The test states the behaviour R-S5 asks for and FAILS
// against the core before the fix (the "signal" case of handleControl, now
// core/server/signals.ts controlSignal, with remember()); fixed by refusing before remembering;
// kept as the regression test.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultServerConfig, newServer, serverInvariants, serverStep, type ControlRequest, type ControlResult } from "../../../core/index.js";
import { MAX_REQUEST_IDS_PER_COMMAND } from "../../../core/limits.js";
import { testPorts } from "../../support/ports.js";
import { lenient } from "../../support/server-rig.js";

const T0 = 1_700_000_000_000;

describe("found bugs (red until fixed): server request-id memory", () => {
  it("R-S5: a refused request does not evict the remembered answer of an earlier request", () => {
    const st = newServer(defaultServerConfig(), 1);
    const replies = new Map<string, ControlResult>();
    const control = (request: ControlRequest): ControlResult | undefined => {
      const r = serverStep(st, { type: "control", request: lenient(request) }, T0, { ports: testPorts });
      serverInvariants(st);
      let last = r.effects.filter((e) => e.type === "persist").at(-1) as { id: number } | undefined;
      for (const e of r.effects) if (e.type === "reply") replies.set(e.requestId, e.result);
      while (last) {
        const d = serverStep(st, { type: "durable", through: last.id }, T0, { ports: testPorts });
        for (const e of d.effects) if (e.type === "reply") replies.set(e.requestId, e.result);
        last = d.effects.filter((e) => e.type === "persist").at(-1) as { id: number } | undefined;
      }
      return replies.get(request.requestId);
    };
    // A command whose agent is offline: it stays queued and takes stdin.
    control({
      op: "submit",
      requestId: "submit",
      uuid: "c1",
      clientId: "offline",
      spec: create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true }),
    });
    // Fill the request-id memory exactly: the submit plus 1023 stdin writes.
    for (let i = 1; i < MAX_REQUEST_IDS_PER_COMMAND; i++) {
      expect(control({ op: "stdin", requestId: `w${i}`, uuid: "c1", data: new Uint8Array(0), appendNewline: false })).toEqual({
        ok: true,
        uuid: "c1",
        writeSeq: i,
      });
    }
    const refused = (id: string) => expect(control({ op: "signal", requestId: id, uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: false });
    // With the memory full, one more accepted request forgets exactly the oldest
    // (the submit's id). Refused requests (a queued command does not take USER1)
    // must not forget anything: here one refusal, one accepted write, one refusal.
    refused("sig-a");
    expect(control({ op: "stdin", requestId: "w-extra", uuid: "c1", data: new Uint8Array(0), appendNewline: false })).toEqual({
      ok: true,
      uuid: "c1",
      writeSeq: MAX_REQUEST_IDS_PER_COMMAND,
    });
    refused("sig-b");
    // So w1 is still remembered and its retry answers write 1 again. Today each refusal
    // first remembers its id (evicting the oldest entry) and then deletes it again: the
    // refusals cost the submit's id and then w1's, and the retry of w1 is applied as a
    // new, duplicate write.
    expect(control({ op: "stdin", requestId: "w1", uuid: "c1", data: new Uint8Array(0), appendNewline: false })).toEqual({ ok: true, uuid: "c1", writeSeq: 1 });
  });
});
