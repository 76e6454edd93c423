// Access control of the control API (shells/server/access.ts) and operator
// identities (shells/server/operators.ts): the table covers every RPC of the
// service, roles nest, operators are held to their label selector, tokens
// are stored hashed and matched in constant time.
import { describe, expect, it } from "vitest";
import { newServer, defaultServerConfig, parseSelector, type ServerState } from "../../../core/index.js";
import { ControlService } from "../../../protos/gen/rvbox/v1/control_pb.js";
import { ACCESS, type MethodName, refusal, rpcName, summarize, targetClients } from "../../../shells/server/access.js";
import { OperatorToken } from "../../../shells/server/auth.js";
import {
  LEGACY_ADMIN,
  OperatorIdentities,
  identify,
  identityError,
  mintToken,
  operatorLine,
  tokenHash,
  type Identity,
} from "../../../shells/server/operators.js";

function who(name: string, role: Identity["role"], selector = ""): Identity {
  const p = parseSelector(selector);
  if (!p.ok) throw new Error(p.error.message);
  return { name, role, selector: p.value, selectorText: selector };
}

function fleet(): ServerState {
  const st = newServer(defaultServerConfig(), 1);
  const base = {
    generation: 1,
    instanceId: "i",
    conn: 0,
    pendingClaim: null,
    authorization: null,
    replaced: null,
    capacity: { running: 0, queued: 0, maxRunning: 0, maxQueued: 0 },
    lastSeen: 0,
    draining: false,
  };
  st.clients.set("web-1", { ...base, clientId: "web-1", labels: { role: "web", zone: "eu-1" } });
  st.clients.set("db-1", { ...base, clientId: "db-1", labels: { role: "db" } });
  st.clients.set("bare", { ...base, clientId: "bare", labels: {} });
  st.commands.set("cmd-db", { clientId: "db-1" } as never);
  st.commands.set("cmd-web", { clientId: "web-1" } as never);
  return st;
}

describe("access table", () => {
  it("has exactly one entry per ControlService method (a new RPC without one fails here and does not compile)", () => {
    expect(Object.keys(ACCESS).sort()).toEqual(Object.keys(ControlService.method).sort());
    expect(ControlService.methods.map((m) => rpcName(m.localName as MethodName)).sort()).toEqual(ControlService.methods.map((m) => m.name).sort());
  });

  it("reads are viewer calls; every call that changes state is mutating (audited) and needs operator or admin", () => {
    for (const m of ControlService.methods) {
      const rule = ACCESS[m.localName as MethodName];
      const isRead = /^(Get|List|Follow|Watch)/.test(m.name);
      expect({ m: m.name, mutating: rule.mutating }).toEqual({ m: m.name, mutating: !isRead });
      if (rule.mutating) expect(rule.role === "operator" || rule.role === "admin", m.name).toBe(true);
      if (rule.mutating) expect(rule.summary, `${m.name} summary`).toBeDefined();
      if (isRead && m.name !== "ListAudit") expect(rule.role, m.name).toBe("viewer");
    }
    expect(ACCESS.listAudit.role).toBe("admin");
    expect(
      Object.entries(ACCESS)
        .filter(([, r]) => r.role === "operator")
        .map(([k]) => k)
        .sort(),
    ).toEqual(["cancelJob", "closeStdin", "signalCommand", "submitCommand", "submitJob", "writeStdin"]);
  });

  it("roles nest: viewer < operator < admin; the refusal names the rule", () => {
    const st = fleet();
    const bob = who("bob", "viewer");
    expect(refusal(bob, "listClients", {}, st)).toBeNull();
    expect(refusal(bob, "submitCommand", { clientId: "web-1" }, st)).toBe("viewer bob may not call SubmitCommand (it needs role operator)");
    expect(refusal(who("alice", "operator", "role=web"), "setClientLabels", { clientId: "web-1" }, st)).toBe(
      "operator alice may not call SetClientLabels (it needs role admin)",
    );
    for (const m of Object.keys(ACCESS) as MethodName[]) expect(refusal(LEGACY_ADMIN, m, { clientId: "db-1", issueUuid: "cmd-db" }, st), m).toBeNull();
  });

  it("an operator acts only on clients matching its selector (a command's client for stdin and signals)", () => {
    const st = fleet();
    const alice = who("alice", "operator", "role=web");
    expect(refusal(alice, "submitCommand", { clientId: "web-1" }, st)).toBeNull();
    expect(refusal(alice, "submitCommand", { clientId: "db-1" }, st)).toBe(
      "operator alice may run only on clients matching role=web; client db-1 has labels role=db",
    );
    expect(refusal(alice, "submitCommand", { clientId: "bare" }, st)).toBe(
      "operator alice may run only on clients matching role=web; client bare has no labels",
    );
    expect(refusal(alice, "submitCommand", { clientId: "ghost" }, st)).toContain("client ghost is not a registered client");
    expect(refusal(alice, "signalCommand", { issueUuid: "cmd-web" }, st)).toBeNull();
    expect(refusal(alice, "writeStdin", { issueUuid: "cmd-db" }, st)).toContain("client db-1 has labels role=db");
    expect(refusal(alice, "closeStdin", { issueUuid: "cmd-db" }, st)).toContain("client db-1");
    // An unknown command: nothing to act on; the core answers NOT_FOUND.
    expect(refusal(alice, "signalCommand", { issueUuid: "nope" }, st)).toBeNull();
    // Reads are not limited by the selector.
    expect(refusal(alice, "getCommand", { issueUuid: "cmd-db" }, st)).toBeNull();
    const multi = who("carol", "operator", "role=web,zone!=eu-1");
    expect(refusal(multi, "submitCommand", { clientId: "web-1" }, st)).toContain("matching role=web,zone!=eu-1; client web-1 has labels role=web,zone=eu-1");
  });

  it("a forced cancel (ending a command without its agent) is an admin's call; a plain one stays an operator's", () => {
    const st = fleet();
    const req = (force: boolean) => ({ issueUuid: "cmd-web", signal: 1, requestId: "", force });
    const op = who("alice", "operator", "role=web");
    expect(refusal(op, "signalCommand", req(false), st)).toBeNull();
    expect(refusal(op, "signalCommand", req(true), st)).toBe("operator alice may not call SignalCommand with these arguments (it needs role admin)");
    expect(refusal(who("root", "admin"), "signalCommand", req(true), st)).toBeNull();
    expect(summarize("signalCommand", req(true))).toContain(" force");
  });

  it("a submit's audit summary copies only what the audit log can show: a million argv items or a 10 MB one stay small", () => {
    const program = (argv: string[]) => ({
      clientId: "web-1",
      issueUuid: "",
      program: { case: "argv" as const, value: { argv } },
      stdinOpen: false,
      timeoutMs: 0,
    });
    const many = summarize("submitCommand", program(Array.from({ length: 1_000_000 }, () => "a")));
    expect(many.length).toBeLessThan(5_000);
    expect(many.startsWith('client=web-1 id=(new) argv=["a","a"')).toBe(true);
    const one = summarize("submitCommand", program(["echo", "x".repeat(10_000_000)]));
    expect(one.length).toBeLessThan(1_000);
    expect(summarize("submitCommand", program(["echo", "hi"]))).toBe('client=web-1 id=(new) argv=["echo","hi"]');
  });

  it("the audit log names a terminal session (run -t) and its size, and a resize, never the keystrokes", () => {
    const tty = {
      clientId: "web-1",
      issueUuid: "s1",
      program: { case: "argv" as const, value: { argv: ["bash"] } },
      stdinOpen: true,
      timeoutMs: 0,
      terminal: { size: { rows: 24, cols: 80 }, term: "xterm" },
    };
    expect(summarize("submitCommand", tty)).toBe('client=web-1 id=s1 tty=80x24 argv=["bash"] stdin-open');
    expect(summarize("writeStdin", { issueUuid: "s1", data: new Uint8Array(3), appendNewline: false, resize: { rows: 50, cols: 132 } })).toBe(
      "id=s1 bytes=3 resize=132x50",
    );
  });

  it("an operator starts a job only if every client it names, or its selector matches, is in its scope", () => {
    const st = fleet();
    const alice = who("alice", "operator", "role=web");
    expect(refusal(alice, "submitJob", { clientIds: ["web-1"], selector: "" }, st)).toBeNull();
    expect(refusal(alice, "submitJob", { clientIds: ["web-1", "db-1"], selector: "" }, st)).toBe(
      "operator alice may run only on clients matching role=web; client db-1 has labels role=db",
    );
    expect(refusal(alice, "submitJob", { clientIds: [], selector: "zone=eu-1" }, st)).toBeNull(); // matches web-1 only
    expect(refusal(alice, "submitJob", { clientIds: [], selector: "role" }, st)).toContain("client db-1 has labels role=db");
    expect(targetClients("submitJob", { clientIds: [], selector: "role" }, st).sort()).toEqual(["db-1", "web-1"]);
    expect(refusal(who("bob", "viewer"), "submitJob", { clientIds: ["web-1"], selector: "" }, st)).toBe(
      "viewer bob may not call SubmitJob (it needs role operator)",
    );
    expect(refusal(who("bob", "viewer"), "listJobs", {}, st)).toBeNull();
  });

  it("an operator cancels a job only if every client it runs on is in its scope", () => {
    const st = fleet();
    const child = (clientId: string) => ({ clientId }) as never;
    st.jobs.set("j-web", { id: "j-web", children: [child("web-1")] } as never);
    st.jobs.set("j-mixed", { id: "j-mixed", children: [child("web-1"), child("db-1")] } as never);
    const alice = who("alice", "operator", "role=web");
    expect(refusal(alice, "cancelJob", { jobId: "j-web" }, st)).toBeNull();
    expect(refusal(alice, "cancelJob", { jobId: "j-mixed" }, st)).toBe(
      "operator alice may run only on clients matching role=web; client db-1 has labels role=db",
    );
    expect(targetClients("cancelJob", { jobId: "j-mixed" }, st)).toEqual(["web-1", "db-1"]);
    expect(refusal(who("bob", "viewer"), "cancelJob", { jobId: "j-web" }, st)).toBe("viewer bob may not call CancelJob (it needs role operator)");
  });

  it("audit summaries name the arguments but never stdin bytes; refusals name their clients", () => {
    const st = fleet();
    expect(summarize("writeStdin", { issueUuid: "cmd-web", data: new TextEncoder().encode("secret"), appendNewline: true })).toBe(
      "id=cmd-web bytes=6 +newline",
    );
    expect(summarize("setClientLabels", { clientId: "web-1", set: { role: "web" }, remove: ["zone"] })).toBe("client=web-1 set=role=web remove=zone");
    expect(summarize("listClients", {})).toBe("");
    expect(targetClients("signalCommand", { issueUuid: "cmd-db" }, st)).toEqual(["db-1"]);
    expect(targetClients("forgetClient", { clientId: "bare" }, st)).toEqual(["bare"]);
    expect(targetClients("listAudit", {}, st)).toEqual([]);
  });
});

describe("operator identities", () => {
  it("a minted token is stored only as its SHA-256 and identifies its operator; any other token does not", () => {
    const t1 = mintToken();
    const t2 = mintToken();
    expect(t1).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(t1).not.toBe(t2);
    const text = `# ops\n${operatorLine("alice", "operator", "role=web", t1)}\n${operatorLine("bob", "viewer", "", t2)}\n`;
    expect(text).not.toContain(t1);
    expect(text).toContain(`sha256:${tokenHash(t1).toString("hex")}`);
    const ids = OperatorIdentities.parse(text);
    expect(ids.size).toBe(2);
    expect(ids.check(t1)).toMatchObject({ name: "alice", role: "operator", selectorText: "role=web" });
    expect(ids.check(t2)).toMatchObject({ name: "bob", role: "viewer" });
    expect(ids.check(`${t1}x`)).toBeNull();
    expect(ids.check("")).toBeNull();
  });

  it("identify: a named identity, else the legacy --operator-token as admin, else nobody", () => {
    const t = mintToken();
    const ids = OperatorIdentities.parse(operatorLine("bob", "viewer", "", t));
    const legacy = new OperatorToken("legacy-token-123");
    expect(identify(`Bearer ${t}`, ids, legacy)?.name).toBe("bob");
    expect(identify("Bearer legacy-token-123", ids, legacy)).toBe(LEGACY_ADMIN);
    expect(identify("Bearer legacy-token-123", undefined, legacy)).toEqual({ name: "admin", role: "admin", selector: [], selectorText: "" });
    expect(identify("Bearer other-token-123", ids, legacy)).toBeNull();
    expect(identify(undefined, ids, legacy)).toBeNull();
    expect(identify(`Bearer ${t}`, ids, undefined)?.role).toBe("viewer");
  });

  it("refuses malformed files with the line number, and bad names, roles and selectors", () => {
    const h = `sha256:${"a".repeat(64)}`;
    const bad = (text: string) => () => OperatorIdentities.parse(text);
    expect(bad(`alice operator ${h}`)).toThrow(/line 1: .*needs a label selector/);
    expect(bad(`alice viewer ${h} role=web`)).toThrow(/only role operator takes a selector/);
    expect(bad(`alice root ${h}`)).toThrow(/role "root"/);
    expect(bad(`al ice viewer ${h}`)).toThrow(/line 1/);
    expect(bad(`\nalice viewer sha256:XYZ`)).toThrow(/line 2: token hash/);
    expect(bad(`alice viewer ${h}\nalice admin ${h}`)).toThrow(/listed twice/);
    expect(bad(`alice operator ${h} role==`)).toThrow(/selector term/);
    expect(identityError("a".repeat(65), "viewer", "")).toContain("1-64 characters");
    expect(identityError("ok", "admin", "")).toBeNull();
  });

  it("reloads in place (SIGHUP): a removed identity no longer matches", () => {
    const t = mintToken();
    const ids = OperatorIdentities.parse(operatorLine("bob", "viewer", "", t));
    ids.replaceWith(OperatorIdentities.parse(""));
    expect(ids.check(t)).toBeNull();
  });
});
