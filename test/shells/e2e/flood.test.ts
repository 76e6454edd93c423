// A peer holding the fleet-wide agent token floods the server: a snapshot
// naming 10,005 commands the server never issued (R-D11), and more client ids
// than the server keeps (R-F6). Everything is bounded, counted, visible
// through the control API and the CLI, and survives a restart.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import type { ReconcileResult } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { Code, CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { MAX_OPEN_INCIDENTS, MAX_OPEN_INCIDENTS_PER_CLIENT } from "../../../core/limits.js";
import { cli } from "../../cli/helpers.js";
import { cleanupTemp, FLEET_TOKEN, OPERATOR_TOKEN, startServer, tempDir, waitFor, type TestServer } from "./helpers.js";
import { RawAgent } from "./raw-client.js";
import { createHash } from "node:crypto";

const sha = (s: string) => new Uint8Array(createHash("sha256").update(s).digest());

let s: TestServer | undefined;
afterAll(async () => {
  await s?.close();
  await cleanupTemp();
});

async function raw(url: string): Promise<RawAgent> {
  const r = await RawAgent.connect(url, FLEET_TOKEN);
  if (!(r instanceof RawAgent)) throw new Error(`refused with HTTP ${r.status}`);
  return r;
}

/** Hello and welcome; the snapshot is the caller's. */
async function welcomed(url: string, clientId: string): Promise<RawAgent> {
  const a = await raw(url);
  a.hello(clientId, `inst-${clientId}`);
  const w = await a.next("serverWelcome");
  a.fence = { sessionId: w.sessionId, generation: Number(w.sessionGeneration) };
  await a.next("reconcileRequest");
  return a;
}

const unknownRunning = (uuid: string) => ({
  $typeName: "rvbox.v1.ReconcileCommandState" as const,
  issueUuid: uuid,
  lifecycle: L.RUNNING,
  lastClientEventSeq: 1n,
  commandRevision: 1n,
  tombstoned: false,
  immutableRequestSha256: sha(uuid),
});

describe("e2e: floods by a peer with the fleet token", () => {
  it("R-D11 R-F6 R-W10: 10,005 unknown running commands are all terminated, incidents stay bounded and the rest are counted (control API, CLI, restart); client ids past maxClients are refused and an operator frees one with forget-client", async () => {
    const dir = await tempDir("rvbox-flood-");
    const tokenFile = path.join(dir, "operator-token");
    writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
    s = await startServer({ limits: { maxClients: 3 } });
    const env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: tokenFile };

    const n = MAX_OPEN_INCIDENTS + 5;
    const uuids = Array.from({ length: n }, (_, i) => `flood-${String(i).padStart(5, "0")}`);
    const flood = await welcomed(s.url, "flood");
    flood.send({ case: "reconcileSnapshot", value: { $typeName: "rvbox.v1.ReconcileSnapshot", retainedCommands: uuids.map(unknownRunning) } });
    const result = (await flood.next("reconcileResult", 30_000)).payload.value as ReconcileResult;
    expect(result.terminateLocalIssueUuids).toHaveLength(n);
    expect(new Set(result.terminateLocalIssueUuids)).toEqual(new Set(uuids));

    const dropped = n - MAX_OPEN_INCIDENTS_PER_CLIENT;
    const inc = await s.client.listIncidents({});
    expect(inc.incidents.filter((i) => i.clientId === "flood")).toHaveLength(MAX_OPEN_INCIDENTS_PER_CLIENT);
    expect(inc.droppedTotal).toBe(BigInt(dropped));
    expect(inc.dropped.map((d) => [d.clientId, d.count, d.lastKind])).toEqual([["flood", BigInt(dropped), "reconcile_terminate_local"]]);
    expect([inc.maxOpenPerClient, inc.maxOpen]).toEqual([MAX_OPEN_INCIDENTS_PER_CLIENT, MAX_OPEN_INCIDENTS]);
    const cl = await s.client.listClients({});
    expect(cl.maxClients).toBe(3);
    expect(cl.clients.find((c) => c.clientId === "flood")?.incidentsDropped).toBe(BigInt(dropped));

    // Another client's real incident is recorded.
    const victim = await welcomed(s.url, "victim");
    victim.send({ case: "reconcileSnapshot", value: { $typeName: "rvbox.v1.ReconcileSnapshot", retainedCommands: [unknownRunning("victim-1")] } });
    await victim.next("reconcileResult");
    const after = await s.client.listIncidents({});
    expect(after.incidents.filter((i) => i.clientId === "victim").map((i) => i.issueUuid)).toEqual(["victim-1"]);

    const text = await cli(["incidents"], { env });
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(
      `${dropped} incidents were counted, not stored (bounds: ${MAX_OPEN_INCIDENTS_PER_CLIENT} open per client, ${MAX_OPEN_INCIDENTS} in all)`,
    );
    expect(text.stdout).toMatch(new RegExp(`flood\\s+${dropped}\\s+\\d{4}-\\S+\\s+reconcile_terminate_local`));
    const js = JSON.parse((await cli(["incidents", "--dropped", "--json"], { env })).stdout) as {
      total: number;
      byClient: Array<{ clientId: string; count: number }>;
    };
    expect(js.total).toBe(dropped);
    expect(js.byClient).toMatchObject([{ clientId: "flood", count: dropped }]);

    // The client bound: a third id fits, a fourth is refused and creates no record.
    const third = await raw(s.url);
    await third.register("third", "inst-third");
    const fourth = await raw(s.url);
    fourth.hello("fourth", "inst-fourth");
    const refused = await fourth.errorAndClose();
    expect([refused.code, refused.closeSession]).toEqual([Code.CAPACITY, true]);
    const clients = await cli(["clients"], { env });
    expect(clients.stdout).toContain("3 of at most 3 client records");
    expect(clients.stdout).toMatch(new RegExp(`flood\\s+connected.*${dropped} incidents not stored`));
    expect((await s.client.listClients({})).clients.map((c) => c.clientId).sort()).toEqual(["flood", "third", "victim"]);

    // forget-client: refused while live, then frees a place.
    const live = await cli(["forget-client", "flood"], { env });
    expect(live.code).toBe(65);
    expect(live.stderr).toContain("client flood has a live session");
    await expect(s.client.forgetClient({ clientId: "flood" })).rejects.toSatisfy(
      (e: unknown) => e instanceof ConnectError && e.code === ConnectCode.FailedPrecondition,
    );
    flood.close();
    await waitFor("flood offline", async () => !(await s!.client.listClients({})).clients.find((c) => c.clientId === "flood")?.connected);
    const gone = await cli(["forget-client", "flood"], { env });
    expect([gone.code, gone.stdout.trim()]).toEqual([0, "client flood forgotten"]);
    expect((await cli(["forget-client", "flood"], { env })).code).toBe(66);
    const again = await raw(s.url);
    await again.register("fourth", "inst-fourth");

    // A restart keeps the counts and the forgetting.
    for (const a of [victim, third, again]) a.close();
    const dataDir = s.dataDir;
    await s.close();
    s = await startServer({ dataDir, limits: { maxClients: 3 } });
    const back = await s.client.listIncidents({});
    expect(back.droppedTotal).toBe(BigInt(dropped));
    expect(back.dropped).toEqual([]); // flood's own counter went with its record
    expect(back.incidents.filter((i) => i.clientId === "flood")).toHaveLength(MAX_OPEN_INCIDENTS_PER_CLIENT);
    expect((await s.client.listClients({})).clients.map((c) => c.clientId).sort()).toEqual(["fourth", "third", "victim"]);
  }, 120_000);
});
