// Two operators' calls in flight at once with the same request_id (issue 38
// item 3): each caller gets the reply to its own call. The daemon routes a
// reply by an internal call id; request_id keeps its idempotency meaning
// (R-S5) within one operator identity, so the same request_id from two
// operators is two requests, and a retry by one operator is still one.
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { OperatorIdentities, mintToken, operatorLine } from "../../../shells/server/operators.js";
import { cleanupTemp, collect, controlClient, startAgent, startServer, waitFor } from "../e2e/helpers.js";

describe("control replies are routed per call, not per request_id", () => {
  const stops: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const s of stops.reverse()) await s();
    await cleanupTemp();
  });

  it("R-S5: alice's WriteStdin and bob's cancel under one request_id each get their own reply; a retry is still one write", async () => {
    const [aliceToken, bobToken] = [mintToken(), mintToken()];
    const operators = OperatorIdentities.parse(`${operatorLine("alice", "admin", "", aliceToken)}\n${operatorLine("bob", "admin", "", bobToken)}\n`);
    const s = await startServer({ operators });
    stops.push(() => s.close());
    const agent = await startAgent(s.url, "web-1");
    stops.push(() => agent.close());
    const alice = controlClient(s.controlUrl, aliceToken);
    const bob = controlClient(s.controlUrl, bobToken);
    await waitFor("agent connected", () => agent.connected);

    const cat = (await alice.submitCommand({ clientId: "web-1", program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true })).command!.issueUuid;
    const sleeps: string[] = [];
    for (let i = 0; i < 3; i++)
      sleeps.push((await bob.submitCommand({ clientId: "web-1", program: { case: "argv", value: { argv: ["sleep", "30"] } } })).command!.issueUuid);
    for (const u of [cat, ...sleeps]) await waitFor(`${u} running`, async () => (await alice.getCommand({ issueUuid: u })).command!.state === L.RUNNING);

    for (let round = 1; round <= 3; round++) {
      const id = `same-${round}`;
      const [w, c] = await Promise.all([
        alice.writeStdin({ issueUuid: cat, data: Buffer.from(`line ${round}`), appendNewline: true, requestId: id }),
        bob.signalCommand({ issueUuid: sleeps[round - 1]!, signal: SignalKind.CANCEL, requestId: id }),
      ]);
      expect(w.writeSeq, `round ${round}: alice's write`).toBe(BigInt(round));
      const revision = (await bob.getCommand({ issueUuid: sleeps[round - 1]! })).command!.revision;
      expect(c.revision, `round ${round}: bob's cancel`).toBe(revision);
    }
    // The same request_id from the other operator on the same command is its own write.
    expect((await bob.writeStdin({ issueUuid: cat, data: Buffer.from("bob"), appendNewline: true, requestId: "same-1" })).writeSeq).toBe(4n);
    // A retry by the same operator changes nothing and returns the first answer.
    expect((await alice.writeStdin({ issueUuid: cat, data: Buffer.from("again"), appendNewline: true, requestId: "same-2" })).writeSeq).toBe(2n);
    // At the daemon's door, both calls fed before either reply can leave (each waits for its audit entry's write).
    const as = (operator: string) => ({ operator, role: "admin", rpc: "SignalCommand", summary: "" });
    const [a, b] = await Promise.all([
      s.daemon.control({ op: "signal", requestId: "direct", uuid: "no-such-a", signal: SignalKind.CANCEL }, as("alice")),
      s.daemon.control({ op: "signal", requestId: "direct", uuid: "no-such-b", signal: SignalKind.CANCEL }, as("bob")),
    ]);
    expect([a.ok ? "ok" : a.error.issueUuid, b.ok ? "ok" : b.error.issueUuid]).toEqual(["no-such-a", "no-such-b"]);
    await alice.closeStdin({ issueUuid: cat });
    const out = await collect(alice, cat);
    expect(out.stdout.toString()).toBe("line 1\nline 2\nline 3\nbob\n");
    for (const u of sleeps) expect((await collect(bob, u)).finished?.state).toBe(L.CANCELLED);
  }, 60_000);
});
