// The control API's streams and ids (issue 38 items 4-6), against a real
// in-process server and agent:
//  - a reload that removes an identity ends its open FollowOutput (both the
//    binary fast path and connect-node's JSON path) and WatchFleet streams
//    with UNAUTHENTICATED; an admin's stream on the same command goes on;
//  - every id field of every method is bounded at the edge: a 1 MB id gets
//    INVALID_ARGUMENT naming the field with a short prefix and its length,
//    in a small reply, never the value echoed back;
//  - FollowOutput streams are bounded per identity and in total, with a share
//    only admins may use: at n they open, at n+1 RESOURCE_EXHAUSTED.
import { createClient, type Client, Code as ConnectCode, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ControlService, type FollowOutputResponse } from "../../../protos/gen/rvbox/v1/control_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { ID_FIELDS } from "../../../shells/server/id-limits.js";
import type { MethodName } from "../../../shells/server/access.js";
import { mintToken, OperatorIdentities, operatorLine } from "../../../shells/server/operators.js";
import { cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, waitFor, type TestServer } from "../e2e/helpers.js";

type Ctl = Client<typeof ControlService>;

function client(baseUrl: string, token: string, json = false): Ctl {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(ControlService, createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: !json, interceptors: [auth] }));
}

/** A stream read in the background: the output text so far, and how it ended. */
interface Reading {
  text: string;
  error: ConnectError | null;
  ended: Promise<void>;
}

function read(stream: AsyncIterable<FollowOutputResponse>): Reading {
  const r: Reading = { text: "", error: null, ended: Promise.resolve() };
  r.ended = (async () => {
    try {
      for await (const m of stream)
        for (const e of m.events.length > 0 ? m.events : [m]) if (e.item.case === "output") r.text += Buffer.from(e.item.value.data).toString();
    } catch (err) {
      r.error = ConnectError.from(err);
    }
  })();
  return r;
}

const tokens = { bob: mintToken(), carol: mintToken(), op1: mintToken(), op2: mintToken() };
const line = {
  bob: operatorLine("bob", "viewer", "", tokens.bob),
  carol: operatorLine("carol", "admin", "", tokens.carol),
  op1: operatorLine("op1", "operator", "role=web", tokens.op1),
  op2: operatorLine("op2", "operator", "role=web", tokens.op2),
};

describe("FollowOutput bounds: configuration", () => {
  it("a server whose admin reserve is the whole of maxFollowStreams does not start, and says why", async () => {
    await expect(startServer({ limits: { maxFollowStreams: 4, followStreamsAdminReserve: 4 } })).rejects.toThrow(
      "limits: followStreamsAdminReserve (4) must be less than maxFollowStreams (4)",
    );
    await cleanupTemp();
  });
});

describe("control API streams and ids: real server and agent", () => {
  let s: TestServer;
  let a: AgentDaemon;
  const aborts: AbortController[] = [];
  const signal = (): AbortSignal => {
    const c = new AbortController();
    aborts.push(c);
    return c.signal;
  };
  beforeAll(async () => {
    s = await startServer({
      operators: OperatorIdentities.parse(Object.values(line).join("\n")),
      limits: { maxFollowStreams: 4, maxFollowStreamsPerIdentity: 3, followStreamsAdminReserve: 1 },
    });
    a = await startAgent(s.url, "web-1", { maxRunning: 4 });
    await waitFor("agent connected", () => a.connected);
    await s.client.setClientLabels({ clientId: "web-1", set: { role: "web" } });
  });
  afterAll(async () => {
    for (const c of aborts) c.abort();
    await a?.close({ killProcesses: true });
    await s?.close();
    await cleanupTemp();
  });

  /** A running `cat` that printed "ready": its follows stay open until stdin closes. */
  async function cat(): Promise<string> {
    const r = await s.client.submitCommand({ clientId: "web-1", program: { case: "shell", value: { commandLine: "echo ready; cat" } }, stdinOpen: true });
    return r.command!.issueUuid;
  }
  const follow = (c: Ctl, uuid: string): Reading => read(c.followOutput({ issueUuid: uuid, follow: true, maxBatchBytes: 65536 }, { signal: signal() }));
  const stdin = (uuid: string, text: string) => s.client.writeStdin({ issueUuid: uuid, data: Buffer.from(text) });

  it("a reload that removes a viewer ends its FollowOutput (binary and JSON) and WatchFleet with UNAUTHENTICATED; an admin's follow goes on", async () => {
    const uuid = await cat();
    const bobFast = follow(client(s.controlUrl, tokens.bob), uuid);
    const bobJson = follow(client(s.controlUrl, tokens.bob, true), uuid);
    const carol = follow(client(s.controlUrl, tokens.carol), uuid);
    const watch = { n: 0, error: null as ConnectError | null, ended: Promise.resolve() };
    watch.ended = (async () => {
      try {
        for await (const _ of client(s.controlUrl, tokens.bob).watchFleet({ commandClients: ["web-1"] }, { signal: signal() })) watch.n++;
      } catch (err) {
        watch.error = ConnectError.from(err);
      }
    })();
    await stdin(uuid, "one\n");
    await waitFor("every follower has 'one'", () => [bobFast, bobJson, carol].every((r) => r.text === "ready\none\n") && watch.n > 0);

    // bob is gone from the file; the daemon re-reads it (what SIGHUP does in server-cli.ts).
    const ended = s.daemon.reloadOperators(OperatorIdentities.parse([line.carol, line.op1, line.op2].join("\n")), undefined);
    expect(ended).toBe(3);
    await Promise.all([bobFast.ended, bobJson.ended, watch.ended]);
    for (const e of [bobFast.error, bobJson.error, watch.error]) {
      expect(e?.code).toBe(ConnectCode.Unauthenticated);
      expect(e?.rawMessage).toContain("bob's token is no longer valid");
    }
    await stdin(uuid, "two\n");
    await waitFor("the admin's follow goes on", () => carol.text === "ready\none\ntwo\n");
    expect(carol.error).toBeNull();
    expect(bobFast.text).toBe("ready\none\n");
    // A new call with bob's token is refused too.
    await expect(client(s.controlUrl, tokens.bob).listClients({})).rejects.toMatchObject({ code: ConnectCode.Unauthenticated });
    await s.client.closeStdin({ issueUuid: uuid });
    await carol.ended;
    expect(carol.error).toBeNull();
  });

  it("FollowOutput streams: at most 3 per identity, 3 for non-admins in all, the 4th for an admin (at n open, at n+1 RESOURCE_EXHAUSTED)", async () => {
    s.daemon.reloadOperators(OperatorIdentities.parse(Object.values(line).join("\n")), undefined);
    const uuid = await cat();
    const op1 = client(s.controlUrl, tokens.op1);
    const open = [follow(op1, uuid), follow(op1, uuid), follow(op1, uuid)];
    await waitFor("op1's three follows are open", () => open.every((r) => r.text === "ready\n"));
    const refused = async (c: Ctl): Promise<string> => {
      const r = follow(c, uuid);
      await r.ended;
      expect(r.error?.code).toBe(ConnectCode.ResourceExhausted);
      return r.error!.rawMessage;
    };
    // n+1 for one identity (over JSON too: connect-node's path has the same bound).
    expect(await refused(op1)).toContain("at most 3 per identity");
    expect(await refused(client(s.controlUrl, tokens.op1, true))).toContain("at most 3 per identity");
    // The shared part (4 - 1 reserved) is full: another operator, and a viewer, are refused.
    expect(await refused(client(s.controlUrl, tokens.op2))).toContain("at most 3 for non-admin identities");
    expect(await refused(client(s.controlUrl, tokens.bob))).toContain("of which 1 are kept for admins");
    // An admin still gets in (the reserved one); past the total even an admin is refused.
    const admin = follow(client(s.controlUrl, tokens.carol), uuid);
    await waitFor("the admin's follow is open", () => admin.text === "ready\n");
    expect(await refused(client(s.controlUrl, OPERATOR_TOKEN))).toContain("at most 4 (limits.maxFollowStreams)");
    // One ends: another operator gets its place.
    await stdin(uuid, "x\n");
    await s.client.closeStdin({ issueUuid: uuid });
    await Promise.all([...open, admin].map((r) => r.ended));
    for (const r of [...open, admin]) expect(r.error).toBeNull();
    const uuid2 = await cat();
    const op2 = follow(client(s.controlUrl, tokens.op2), uuid2);
    await waitFor("op2 gets in once the others ended", () => op2.text === "ready\n");
    await s.client.closeStdin({ issueUuid: uuid2 });
    await op2.ended;
    expect(op2.error).toBeNull();
  });

  const MB = "u".repeat(1024 * 1024);
  /** One request per method that takes ids, with a 1 MB value in one id field (JSON names). */
  const OVERLONG: Partial<Record<MethodName, Record<string, unknown>>> = {
    submitCommand: { clientId: "web-1", issueUuid: MB, argv: { argv: ["true"] } },
    getCommand: { issueUuid: MB },
    listCommands: { clientId: MB },
    writeStdin: { issueUuid: "x", requestId: MB },
    closeStdin: { issueUuid: MB },
    signalCommand: { issueUuid: MB },
    listClients: { selector: MB },
    authorizeInstance: { clientId: "web-1", instanceId: MB },
    acknowledgeIncident: { incidentId: MB },
    forgetClient: { clientId: MB },
    revokeAuthorization: { clientId: MB },
    dismissClaim: { clientId: MB },
    setClientDraining: { clientId: MB },
    setClientLabels: { clientId: "web-1", set: { [MB]: "v" } },
    listAudit: { operator: MB },
    cancelJob: { jobId: MB },
    submitJob: { clientIds: ["web-1"], jobId: MB, argv: { argv: ["true"] } },
    getJob: { jobId: MB },
  };

  it("every method that takes ids is in the table of this test (streams below)", () => {
    const withIds = ControlService.methods
      .map((m) => m.localName as MethodName)
      .filter((m) => m !== "followOutput" && m !== "watchFleet")
      .filter((m) => (ID_FIELDS[m] as { ids: (r: unknown) => unknown[] }).ids(new Proxy({}, { get: () => "" })).length > 0);
    expect(withIds.sort()).toEqual(Object.keys(OVERLONG).sort());
  });

  for (const [method, body] of Object.entries(OVERLONG)) {
    it(`${method}: a 1 MB id is INVALID_ARGUMENT in a small reply that does not echo it`, async () => {
      const rpc = ControlService.methods.find((m) => m.localName === method)!.name;
      const res = await fetch(`${s.controlUrl}/rvbox.v1.ControlService/${rpc}`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${OPERATOR_TOKEN}` },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      expect(res.status).toBe(400);
      expect(text.length).toBeLessThan(1024);
      const j = JSON.parse(text) as { code: string; message: string };
      expect(j.code).toBe("invalid_argument");
      expect(j.message).toMatch(/may (be at most \d+ characters|hold at most).*"u{16}"… \(1048576 characters\)/);
    });
  }

  it("the refused mutating call is audited (with the refusals, apart) with the short message, not the id", async () => {
    const audit = await s.client.listAudit({ operator: "admin" });
    expect(audit.entries.find((x) => x.rpc === "CloseStdin" && x.result !== "OK")).toBeUndefined();
    const e = audit.refusals.find((x) => x.rpc === "CloseStdin" && x.result === "INVALID_ARGUMENT");
    expect(e?.message).toBe('issue_uuid may be at most 128 characters; got "uuuuuuuuuuuuuuuu"… (1048576 characters)');
    expect(e?.summary).not.toContain("uuuuuuuuuuuuuuuuu");
  });

  it("streams: FollowOutput (JSON: 1 MB, binary fast path: 60 KB) and WatchFleet refuse an over-long id with INVALID_ARGUMENT", async () => {
    const refusal = async (stream: AsyncIterable<unknown>): Promise<ConnectError> => {
      try {
        for await (const _ of stream);
      } catch (err) {
        return ConnectError.from(err);
      }
      throw new Error("not refused");
    };
    const json = client(s.controlUrl, OPERATOR_TOKEN, true);
    const e1 = await refusal(json.followOutput({ issueUuid: MB, follow: true }));
    const e2 = await refusal(s.client.followOutput({ issueUuid: "u".repeat(60_000), follow: true }));
    const e3 = await refusal(s.client.watchFleet({ commandClients: [MB] }));
    for (const e of [e1, e2, e3]) {
      expect(e.code).toBe(ConnectCode.InvalidArgument);
      expect(e.rawMessage.length).toBeLessThan(200);
    }
    expect(e2.rawMessage).toContain("(60000 characters)");
    expect(e3.rawMessage).toContain("command_clients may be at most 128 characters");
  });
});
