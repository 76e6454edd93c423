// Operator identities, roles and the audit log with a REAL server process
// (killed with -9 and restarted on its store) and real agents: a viewer is
// refused a run, an operator is refused a client outside its label selector
// and allowed inside it, the legacy --operator-token still acts as admin, and
// the audit log lists every call (refusals apart, repeats counted) after the
// crash, on both server stores.
import { readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { ConnectError, Code as ConnectCode } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { operatorAdd } from "../../../shells/cli/server-cli.js";
import { cli } from "../../cli/helpers.js";
import {
  cleanupTemp,
  collect,
  controlClient,
  describeStores,
  FLEET_TOKEN,
  OPERATOR_TOKEN,
  serverArgv,
  spawnRvbox,
  startAgent,
  tempDir,
  waitFor,
  writeTokenFiles,
  type Child,
} from "./helpers.js";
import { freePort } from "./tcp-proxy.js";

const refused = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
  } catch (e) {
    const ce = ConnectError.from(e);
    expect(ce.code).toBe(ConnectCode.PermissionDenied);
    return ce.rawMessage;
  }
  throw new Error("the call was not refused");
};

function mint(file: string, args: string[]): string {
  const out: string[] = [];
  expect(operatorAdd(["add", ...args, "--identities", file], (l) => out.push(l))).toBe(0);
  return out[0]!;
}

const children: Child[] = [];
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
  await cleanupTemp();
});

// Labels, the audit log and its refusals are the store's rows: the same calls and the same crash on each store.
describeStores("e2e: operator identities, roles and the audit log", (st) => {
  it("viewer refused a run; operator refused outside its selector, allowed inside; legacy token is admin; the audit log survives kill -9", async () => {
    const work = await tempDir("rvbox-access-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const operators = path.join(work, "operators");
    const alice = mint(operators, ["alice", "--role", "operator", "--selector", "role=web"]);
    const bob = mint(operators, ["bob", "--role", "viewer"]);
    expect(alice).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const data = path.join(work, "server-data");
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const serverArgs = ["server", "--listen", `127.0.0.1:${agentPort}`, "--control", `127.0.0.1:${controlPort}`, "--data", data];
    serverArgs.push("--agent-tokens", files.agentTokens, "--operator-token", files.operatorToken, "--identities", operators, "--log-level", "warn");
    serverArgs.push(...st.flags(await st.fresh()));
    let server = spawnRvbox(serverArgs);
    children.push(server);
    const url = `http://127.0.0.1:${controlPort}`;
    const admin = controlClient(url); // the legacy --operator-token
    const asAlice = controlClient(url, alice);
    const asBob = controlClient(url, bob);
    await waitFor("server up", async () => (await admin.listClients({})) !== undefined, 30_000);
    const agents = [await startAgent(`ws://127.0.0.1:${agentPort}/v1/agent`, "web-1"), await startAgent(`ws://127.0.0.1:${agentPort}/v1/agent`, "db-1")];
    try {
      await waitFor("agents connected", () => agents.every((a) => a.connected));
      // The old shared token still does everything (identity admin).
      await admin.setClientLabels({ clientId: "web-1", set: { role: "web" } });
      await admin.setClientLabels({ clientId: "db-1", set: { role: "db" } });

      // viewer: reads yes, a run no.
      expect((await asBob.listClients({})).clients.length).toBe(2);
      expect(await refused(asBob.submitCommand({ clientId: "web-1", program: { case: "argv", value: { argv: ["true"] } } }))).toBe(
        "viewer bob may not call SubmitCommand (it needs role operator)",
      );

      // operator: outside its selector no, inside yes (run and signal), admin calls no.
      expect(await refused(asAlice.submitCommand({ clientId: "db-1", program: { case: "argv", value: { argv: ["uptime"] } } }))).toBe(
        "operator alice may run only on clients matching role=web; client db-1 has labels role=db",
      );
      const ok = await asAlice.submitCommand({ clientId: "web-1", issueUuid: "alice-echo-1", program: { case: "argv", value: { argv: ["echo", "hi"] } } });
      const done = await collect(asAlice, ok.command!.issueUuid);
      expect(done.finished?.state).toBe(L.SUCCEEDED);
      expect(done.stdout.toString()).toBe("hi\n");
      const long = await asAlice.submitCommand({ clientId: "web-1", issueUuid: "alice-sleep-1", program: { case: "argv", value: { argv: ["sleep", "30"] } } });
      await waitFor("running", async () => (await asAlice.getCommand({ issueUuid: long.command!.issueUuid })).command!.state === L.RUNNING);
      await asAlice.signalCommand({ issueUuid: "alice-sleep-1", signal: SignalKind.CANCEL });
      expect(await refused(asAlice.setClientLabels({ clientId: "db-1", set: { role: "web" } }))).toBe(
        "operator alice may not call SetClientLabels (it needs role admin)",
      );
      expect(await refused(asAlice.listAudit({}))).toContain("needs role admin");
      // The CLI says why, and exits 77.
      const aliceFile = path.join(work, "alice-token");
      writeFileSync(aliceFile, `${alice}\n`, { mode: 0o600 });
      const r = await cli(["run", "db-1", "--", "uptime"], { env: { RVBOX_SERVER: url, RVBOX_TOKEN_FILE: aliceFile } });
      expect(r.code).toBe(77);
      expect(r.stderr).toContain("permission denied: operator alice may run only on clients matching role=web; client db-1 has labels role=db");

      const before = await admin.listAudit({});
      server.proc.kill("SIGKILL");
      await server.exited;
      server = spawnRvbox(serverArgs);
      children.push(server);
      await waitFor("server back", async () => (await admin.listClients({})) !== undefined, 30_000);

      const after = await admin.listAudit({});
      expect(after.entries.map((e) => e.seq)).toEqual(before.entries.map((e) => e.seq));
      expect(after.refusals.map((e) => [e.seq, e.count])).toEqual(before.refusals.map((e) => [e.seq, e.count]));
      const rows = after.entries.map((e) => [e.operator, e.role, e.rpc, e.clientIds.join(","), e.result]);
      expect(rows).toEqual([
        ["admin", "admin", "SetClientLabels", "web-1", "OK"],
        ["admin", "admin", "SetClientLabels", "db-1", "OK"],
        ["alice", "operator", "SubmitCommand", "web-1", "OK"],
        ["alice", "operator", "SubmitCommand", "web-1", "OK"],
        ["alice", "operator", "SignalCommand", "web-1", "OK"],
      ]);
      // The refused calls, kept apart: alice's two refused runs on db-1 (API, then CLI) are one entry counting 2.
      const refusals = after.refusals.map((e) => [e.operator, e.role, e.rpc, e.clientIds.join(","), e.result, Number(e.count)]);
      expect(refusals).toEqual([
        ["bob", "viewer", "SubmitCommand", "web-1", "PERMISSION_DENIED", 1],
        ["alice", "operator", "SubmitCommand", "db-1", "PERMISSION_DENIED", 2],
        ["alice", "operator", "SetClientLabels", "db-1", "PERMISSION_DENIED", 1],
        ["alice", "operator", "ListAudit", "", "PERMISSION_DENIED", 1],
      ]);
      expect(after.entries[2]!.summary).toBe('client=web-1 id=alice-echo-1 argv=["echo","hi"]');
      expect(after.refusals[1]!.message).toContain("client db-1 has labels role=db");
      // rvbox audit --operator alice, as the legacy admin token.
      const adminFile = files.operatorToken;
      const a = await cli(["audit", "--operator", "alice", "--since", "1h"], { env: { RVBOX_SERVER: url, RVBOX_TOKEN_FILE: adminFile } });
      expect(a.code).toBe(0);
      expect(a.stdout).toMatch(/SEQ\s+TIME\s+OPERATOR\s+ROLE\s+RPC\s+CLIENTS\s+ARGUMENTS\s+RESULT/);
      expect(a.stdout).toMatch(/SEQ\s+TIME\s+LAST\s+COUNT\s+OPERATOR\s+ROLE\s+RPC\s+CLIENTS\s+ARGUMENTS\s+RESULT/);
      expect(a.stdout.split("\n").filter((l) => /^\d+\s/.test(l))).toHaveLength(6);
      expect(a.stdout).not.toContain("bob");
      expect(OPERATOR_TOKEN).not.toBe(alice);
    } catch (err) {
      console.log(server.output());
      throw err;
    } finally {
      for (const ag of agents) await ag.close({ killProcesses: true });
      server.proc.kill("SIGTERM");
      await server.exited;
    }
  }, 120_000);
});

describe("e2e: operator identities, roles and the audit log", () => {
  it("SIGHUP after removing a viewer ends its rvbox logs -f (exit 77) and its FollowOutput stream (UNAUTHENTICATED); an admin's follow goes on", async () => {
    const work = await tempDir("rvbox-revoke-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const operators = path.join(work, "operators");
    const bob = mint(operators, ["bob", "--role", "viewer"]);
    const carol = mint(operators, ["carol", "--role", "admin"]);
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const server = spawnRvbox(serverArgv({ agentPort, controlPort, data: path.join(work, "data"), files }, "--identities", operators));
    children.push(server);
    const url = `http://127.0.0.1:${controlPort}`;
    const admin = controlClient(url, carol);
    await waitFor("server up", async () => (await admin.listClients({})) !== undefined, 30_000);
    const agent = await startAgent(`ws://127.0.0.1:${agentPort}/v1/agent`, "web-1");
    const stop = new AbortController();
    try {
      await waitFor("agent connected", () => agent.connected);
      const cmd = await admin.submitCommand({ clientId: "web-1", program: { case: "shell", value: { commandLine: "echo ready; cat" } }, stdinOpen: true });
      const uuid = cmd.command!.issueUuid;
      const bobFile = path.join(work, "bob-token");
      writeFileSync(bobFile, `${bob}\n`, { mode: 0o600 });
      const logs = spawnRvbox(["logs", uuid, "-f"], { RVBOX_SERVER: url, RVBOX_TOKEN_FILE: bobFile });
      children.push(logs);
      const seen = { bob: "", carol: "", error: null as ConnectError | null };
      const read = async (who: "bob" | "carol", token: string): Promise<void> => {
        try {
          for await (const m of controlClient(url, token).followOutput({ issueUuid: uuid, follow: true }, { signal: stop.signal }))
            if (m.item.case === "output") seen[who] += Buffer.from(m.item.value.data).toString();
        } catch (e) {
          if (who === "bob") seen.error = ConnectError.from(e);
        }
      };
      const bobDone = read("bob", bob);
      void read("carol", carol);
      await waitFor("every follower has 'ready'", () => logs.output().includes("ready") && seen.bob === "ready\n" && seen.carol === "ready\n");

      // bob's line goes; the server re-reads the file on SIGHUP.
      writeFileSync(
        operators,
        readFileSync(operators, "utf8")
          .split("\n")
          .filter((l) => !l.startsWith("bob "))
          .join("\n"),
      );
      server.proc.kill("SIGHUP");
      expect(await logs.exited).toBe(77);
      expect(logs.output()).toContain("refused the operator token");
      await bobDone;
      expect(seen.error?.code).toBe(ConnectCode.Unauthenticated);
      await admin.writeStdin({ issueUuid: uuid, data: Buffer.from("after\n") });
      await waitFor("the admin's follow goes on", () => seen.carol === "ready\nafter\n");
      expect(seen.bob).toBe("ready\n");
    } catch (err) {
      console.log(server.output());
      throw err;
    } finally {
      stop.abort();
      await agent.close({ killProcesses: true });
      server.proc.kill("SIGTERM");
      await server.exited;
    }
  }, 120_000);
});
