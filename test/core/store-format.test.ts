// The on-disk format of both nodes' tables, pinned. test/fixtures/
// store-tables-5df9f4e.json is what the code before issue 13's typed schema
// (commit 5df9f4e) stored for the scenario in test/fixtures/scenario.ts.
// A record/restore mapping used in both directions round-trips any field
// name, so only a pinned copy shows that a rename changed what is on disk and
// that a store written by an older build no longer opens as it did.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { agentInvariants, defaultAgentConfig, defaultServerConfig, restoreAgent, restoreServer, serverInvariants } from "../../core/index.js";
import { commandRecord as agentCommandRecord } from "../../core/agent/store.js";
import { clientRecord as serverClientRecord, commandRecord as serverCommandRecord } from "../../core/server/store.js";
import { canonical, scenarioTables } from "../fixtures/scenario.js";

type Tables = Record<string, Record<string, unknown>>;
const fixture = JSON.parse(readFileSync(resolve(import.meta.dirname, "../fixtures/store-tables-5df9f4e.json"), "utf8")) as { server: Tables; agent: Tables };

/** The fixture's JSON back into stored values (hex -> bytes, bigint strings -> bigint). */
function revive(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(revive);
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1 && keys[0] === "hex") return new Uint8Array(Buffer.from(o.hex as string, "hex"));
    if (keys.length === 1 && keys[0] === "bigint") return BigInt(o.bigint as string);
    return Object.fromEntries(keys.map((k) => [k, revive(o[k])]));
  }
  return v;
}

function tablesOf(t: Tables): { get(name: string): ReadonlyMap<string, unknown> | undefined } {
  const m = new Map<string, Map<string, unknown>>();
  for (const [name, rows] of Object.entries(t)) m.set(name, new Map(Object.entries(rows).map(([k, v]) => [k, revive(v)])));
  return { get: (name) => m.get(name) };
}

describe("storage format", () => {
  it("R-O3 R-F1: both nodes store exactly what the pre-schema code stored for the same run (keys, field names, values), plus the server's stdin table", () => {
    // The one intended change since 5df9f4e: the server keeps each taken stdin write in a row
    // of its own (table `stdin`, deleted when acknowledged) instead of inside the command
    // record. This scenario's writes are all acknowledged, so the table is there and empty,
    // and every command record is unchanged.
    expect(canonical(scenarioTables())).toEqual({ ...fixture, server: { ...fixture.server, stdin: {} } });
  });

  it("R-O3 R-D7: tables written by the pre-schema code restore, pass the invariants, and record back to the same rows", () => {
    const server = restoreServer(defaultServerConfig(), tablesOf(fixture.server) as never, 2);
    serverInvariants(server);
    expect([...server.commands.keys()].sort()).toEqual(Object.keys(fixture.server.command!).sort());
    for (const c of server.commands.values()) {
      const r = serverCommandRecord(c);
      expect(canonical(r.value), c.uuid).toEqual(fixture.server.command![c.uuid]);
    }
    const agent = restoreAgent(defaultAgentConfig("a"), tablesOf(fixture.agent) as never, 8);
    agentInvariants(agent);
    for (const [uuid, row] of Object.entries(fixture.agent.command!)) {
      const c = agent.commands.get(uuid);
      expect(c, uuid).toBeDefined();
      expect(canonical(agentCommandRecord(c!).value), uuid).toEqual(row);
    }
  });

  it("client rows written before labels restore with no labels and record back to the same rows", () => {
    const server = restoreServer(defaultServerConfig(), tablesOf(fixture.server) as never, 2);
    serverInvariants(server);
    const rows = fixture.server["client"]!;
    expect(Object.keys(rows).length).toBeGreaterThan(0);
    for (const [id, row] of Object.entries(rows)) {
      expect(row, id).not.toHaveProperty("labels");
      const c = server.clients.get(id);
      expect(c, id).toBeDefined();
      expect(c!.labels).toEqual({});
      expect(canonical(serverClientRecord(c!).value), id).toEqual(row);
    }
  });
});
