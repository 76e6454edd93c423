// A short run of the control fuzzer (scripts/fuzz-control.ts, `npm run
// fuzz:control`; issue 38): a real server with an identities file and two
// real agents, 8 seconds of a seeded hostile mix (argv/env over the agent's
// limits, ids up to 15 MB, malformed bodies, refused floods, stream floods,
// request_id races, odd strings) while the admin keeps running `echo` on the
// web agent. Nothing may crash, the admin's every round trip must succeed,
// both agents must still be connected and run a command, and every submit the
// admin had accepted must still be in the audit log.
import { describe, expect, it } from "vitest";
import { formatReport, parseFuzzArgs, runFuzz } from "../../../scripts/fuzz-control.js";

describe("e2e: the control API under hostile operators and hostile input (npm run fuzz:control)", () => {
  it("8 s of hostile calls: no crash, no well-behaved failure, every agent still runs commands, the admin's submits all in the audit log", async () => {
    const r = await runFuzz({ seconds: 8, seed: 38, iterationTimeoutMs: 10_000, probeTimeoutMs: 10_000, log: () => {} });
    const why = formatReport(r);
    // The run did what it says: hostile calls of several kinds, and a working admin.
    expect(r.sentTotal, why).toBeGreaterThan(50);
    expect(Object.keys(r.sent).length, why).toBeGreaterThanOrEqual(4);
    expect(r.wellBehaved.iterations, why).toBeGreaterThan(0);
    expect(r.audit.adminAccepted, why).toBeGreaterThan(0);

    expect(r.crashes, why).toEqual([]);
    expect(r.wellBehaved.failures, why).toEqual([]);
    expect(r.agents, why).toEqual({ "web-1": null, "db-1": null });
    expect(r.audit.error, why).toBeUndefined();
    expect(r.audit.missing, why).toEqual([]);
    expect(r.problems, why).toEqual([]);
  }, 90_000);

  it("bad flags are refused by name", () => {
    expect(() => parseFuzzArgs(["--seconds", "0"])).toThrow(/--seconds must be an integer from 1/);
    expect(() => parseFuzzArgs(["--seconds"])).toThrow(/--seconds needs a value/);
    expect(() => parseFuzzArgs(["--only", "everything"])).toThrow(/--only: unknown kind "everything"/);
    expect(() => parseFuzzArgs(["--frobnicate"])).toThrow(/unknown flag "--frobnicate"/);
    expect(parseFuzzArgs(["--seconds", "300", "--seed", "7", "--json", "--only", "refused flood,stream flood"])).toMatchObject({
      seconds: 300,
      seed: 7,
      json: true,
      only: ["refused flood", "stream flood"],
    });
  });
});
