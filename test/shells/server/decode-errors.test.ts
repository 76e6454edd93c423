// A control request whose body does not decode is the caller's error:
// INVALID_ARGUMENT (HTTP 400 on Connect, grpc-status 3 on gRPC), with the
// decoder's message, never INTERNAL (HTTP 500), which connect-es answers by
// itself (fuzz:control counted hundreds of them).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { cleanupTemp, OPERATOR_TOKEN, ROOT, startServer } from "../e2e/helpers.js";

afterAll(cleanupTemp);

const BODIES: Array<[string, Uint8Array]> = [
  ["random bytes", new Uint8Array(randomBytes(300))],
  ["truncated", new Uint8Array([0x0a, 0x05, 0x61])],
  ["invalid UTF-8 in a string field", new Uint8Array([0x0a, 0x02, 0xff, 0xfe])],
];

describe("undecodable control requests", () => {
  it("get INVALID_ARGUMENT with the decoder's message, over Connect and over gRPC; a valid call still works", async () => {
    const s = await startServer();
    try {
      for (const [what, body] of BODIES) {
        const r = await fetch(`${s.controlUrl}/rvbox.v1.ControlService/SubmitCommand`, {
          method: "POST",
          headers: { "content-type": "application/proto", authorization: `Bearer ${OPERATOR_TOKEN}` },
          body,
        });
        const j = (await r.json()) as { code: string; message: string };
        expect([what, r.status, j.code]).toEqual([what, 400, "invalid_argument"]);
        expect(j.message).toMatch(/^parse binary: /);
      }
      // gRPC over h2c: one length-prefixed message holding a truncated SubmitCommandRequest.
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 3]), Buffer.from([0x0a, 0x05, 0x61])]);
      const url = `${s.controlUrl}/rvbox.v1.ControlService/ListClients`;
      // (The server runs in this process: curl runs beside it, not blocking it.)
      const out = await new Promise<string>((resolve, reject) => {
        const args = ["-s", "--http2-prior-knowledge", "-D", "-", "-H", "content-type: application/grpc", "-H", "te: trailers"];
        const c = spawn("curl", [...args, "-H", `authorization: Bearer ${OPERATOR_TOKEN}`, "--data-binary", "@-", url], { cwd: ROOT });
        let text = "";
        c.stdout.on("data", (d: Buffer) => {
          text += d.toString("latin1");
        });
        c.on("error", reject);
        c.on("close", () => resolve(text));
        c.stdin.end(frame);
      });
      expect(out).toMatch(/grpc-status: 3\r?\n/);
      expect(out).not.toMatch(/grpc-status: 13/);
      const ok = await s.client.listClients({});
      expect(ok.clients).toEqual([]);
    } finally {
      await s.close();
    }
  });
});
