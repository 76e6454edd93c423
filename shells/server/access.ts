/**
 * Access control of the control API: one table, RPC method -> the role it
 * needs, whether it changes anything (mutating calls are audited), how to find
 * the client it acts on (role operator is limited to clients matching its
 * label selector) and how to summarise its arguments for the audit log.
 * The table's type names every method of ControlService, so a new RPC does
 * not compile until it has an entry (and test/shells/server/access.test.ts
 * checks the table against the service descriptor).
 *
 * Roles, each including the ones before it:
 *   viewer    reads: Get/List calls, FollowOutput, WatchFleet
 *   operator  also SubmitCommand, SubmitJob, CancelJob, WriteStdin,
 *             CloseStdin, SignalCommand, on clients matching its selector
 *             only (a job: every client it names or its selector matches)
 *   admin     everything: claims, authorizations, incidents, labels, drains,
 *             forgetting clients, the audit log
 *
 * Every call is checked here (control-interceptor in server-daemon.ts) before
 * the service reads or changes the core's state; a refusal is Connect
 * PERMISSION_DENIED naming the rule that refused it.
 */
import type { MessageShape } from "@bufbuild/protobuf";
import { formatLabels, MAX_AUDIT_SUMMARY_CHARS, matchesSelector, parseSelector, type ServerState, unmetRequirements } from "../../core/index.js";
import { SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { ControlService } from "../../protos/gen/rvbox/v1/control_pb.js";
import type { Identity, Role } from "./operators.js";

type Methods = (typeof ControlService)["method"];
export type MethodName = keyof Methods;
type Req<K extends MethodName> = MessageShape<Methods[K]["input"]>;

export interface Rule<R> {
  role: Role;
  /** A higher role some requests of the method need (a forced cancel: admin). */
  roleFor?: (req: R) => Role;
  /** Changes state: audited (with its result), refusals included. */
  mutating: boolean;
  /** The command or client it acts on: role operator is checked against its selector; the audit entry of a refusal names it. */
  target?: (req: R) => { clientId: string } | { uuid: string };
  /** Several clients it acts on (a job's targets, a selector resolved against the server's labels now). */
  targets?: (req: R, st: ServerState) => string[];
  /** Its arguments for the audit log (mutating calls). */
  summary?: (req: R) => string;
}

/** The clients a selector matches now (a malformed one matches none; the core refuses it with its own message). */
function matching(st: ServerState, selector: string): string[] {
  const sel = parseSelector(selector);
  if (!sel.ok) return [];
  return [...st.clients.values()].filter((c) => matchesSelector(c.labels, sel.value)).map((c) => c.clientId);
}

const q = (s: string): string => JSON.stringify(s);

/**
 * A list for a summary the audit log cuts to MAX_AUDIT_SUMMARY_CHARS anyway:
 * only as much of it as can show, so a million argv items or a 10 MB one (which
 * the submit then refuses) are never copied whole into a string.
 */
function cappedJson(list: readonly string[]): string {
  const shown = list.slice(0, MAX_AUDIT_SUMMARY_CHARS).map((s) => (s.length > MAX_AUDIT_SUMMARY_CHARS ? s.slice(0, MAX_AUDIT_SUMMARY_CHARS) : s));
  return JSON.stringify(shown);
}

/** A submit's program for the audit log (a script by its size, never its content). */
function programSummary(
  p:
    | { case: "argv"; value: { argv: string[] } }
    | { case: "shell"; value: { commandLine: string } }
    | { case: "script"; value: { content: Uint8Array; interpreter: string; args: string[] } }
    | { case: undefined; value?: undefined },
): string {
  switch (p.case) {
    case "argv":
      return `argv=${cappedJson(p.value.argv)}`;
    case "shell":
      return `shell=${q(p.value.commandLine)}`;
    case "script":
      return `script=${p.value.content.length}B${p.value.interpreter ? ` interpreter=${q(p.value.interpreter)}` : ""} args=${cappedJson(p.value.args)}`;
    default:
      return "no program";
  }
}
const read = { role: "viewer", mutating: false } as const;

export const ACCESS: { [K in MethodName]: Rule<Req<K>> } = {
  submitCommand: {
    role: "operator",
    mutating: true,
    target: (r) => ({ clientId: r.clientId }),
    summary: (r) => {
      const what = programSummary(r.program);
      // A terminal session (run -t) says so before the program, which the summary's bound may cut.
      const size = r.terminal?.size;
      const tty = r.terminal ? ` tty=${size ? `${size.cols}x${size.rows}` : "?"}` : "";
      return `client=${r.clientId} id=${r.issueUuid || "(new)"}${tty} ${what}${r.stdinOpen ? " stdin-open" : ""}${r.timeoutMs ? ` timeout=${r.timeoutMs}ms` : ""}`;
    },
  },
  getCommand: read,
  listCommands: read,
  followOutput: read,
  writeStdin: {
    role: "operator",
    mutating: true,
    target: (r) => ({ uuid: r.issueUuid }),
    // The bytes are not recorded (they may be secrets), only their size.
    summary: (r) =>
      `id=${r.issueUuid} bytes=${r.data.length}${r.appendNewline ? " +newline" : ""}${r.resize ? ` resize=${r.resize.cols}x${r.resize.rows}` : ""}`,
  },
  closeStdin: { role: "operator", mutating: true, target: (r) => ({ uuid: r.issueUuid }), summary: (r) => `id=${r.issueUuid}` },
  signalCommand: {
    role: "operator",
    // Ending a command without its agent's answer (force) is an admin's call.
    roleFor: (r) => (r.force ? "admin" : "operator"),
    mutating: true,
    target: (r) => ({ uuid: r.issueUuid }),
    summary: (r) => `id=${r.issueUuid} signal=${SignalKind[r.signal] ?? r.signal}${r.force ? " force" : ""}`,
  },
  listClients: read,
  listSessions: read,
  listClaims: read,
  authorizeInstance: {
    role: "admin",
    mutating: true,
    target: (r) => ({ clientId: r.clientId }),
    summary: (r) => `client=${r.clientId} instance=${r.instanceId}${r.instanceNotYetSeen ? " not-yet-seen" : ""}`,
  },
  listIncidents: read,
  acknowledgeIncident: { role: "admin", mutating: true, summary: (r) => `incident=${r.incidentId}` },
  watchFleet: read,
  forgetClient: { role: "admin", mutating: true, target: (r) => ({ clientId: r.clientId }), summary: (r) => `client=${r.clientId}` },
  revokeAuthorization: { role: "admin", mutating: true, target: (r) => ({ clientId: r.clientId }), summary: (r) => `client=${r.clientId}` },
  dismissClaim: { role: "admin", mutating: true, target: (r) => ({ clientId: r.clientId }), summary: (r) => `client=${r.clientId}` },
  setClientDraining: {
    role: "admin",
    mutating: true,
    target: (r) => ({ clientId: r.clientId }),
    summary: (r) => `client=${r.clientId} draining=${r.draining}`,
  },
  setClientLabels: {
    role: "admin",
    mutating: true,
    target: (r) => ({ clientId: r.clientId }),
    summary: (r) => `client=${r.clientId} set=${formatLabels(r.set) || "-"} remove=${r.remove.join(",") || "-"}`,
  },
  // Every operator's actions: admins only.
  listAudit: { role: "admin", mutating: false },
  cancelJob: {
    role: "operator",
    mutating: true,
    // As for submitting it: every client the job runs on must be in the operator's scope.
    targets: (r, st) => st.jobs.get(r.jobId)?.children.map((c) => c.clientId) ?? [],
    summary: (r) => `job=${r.jobId}`,
  },
  submitJob: {
    role: "operator",
    mutating: true,
    // An operator may start a job only if every client it would start on is in its scope.
    targets: (r, st) => (r.clientIds.length > 0 ? [...r.clientIds] : matching(st, r.selector)),
    summary: (r) => {
      const what = programSummary(r.program);
      const on = r.clientIds.length > 0 ? `clients=${r.clientIds.join(",")}` : `selector=${q(r.selector)}`;
      return `job=${r.jobId || "(new)"} ${on} ${what}${r.maxConcurrency ? ` max-concurrency=${r.maxConcurrency}` : ""}${r.maxErrors ? ` max-errors=${r.maxErrors}` : ""}`;
    },
  },
  getJob: read,
  listJobs: read,
};

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

/** The RPC's name as the proto spells it (SubmitCommand). */
export const rpcName = (m: MethodName): string => m.charAt(0).toUpperCase() + m.slice(1);

/**
 * Why `who` may not make this call (null: it may). `req`: the request
 * message (unary calls; streams are reads and need none).
 */
export function refusal(who: Identity, method: MethodName, req: unknown, st: ServerState): string | null {
  const rule = ACCESS[method] as Rule<unknown>;
  if (RANK[who.role] < RANK[rule.role]) return `${who.role} ${who.name} may not call ${rpcName(method)} (it needs role ${rule.role})`;
  const needs = rule.roleFor && req !== undefined ? rule.roleFor(req) : rule.role;
  if (RANK[who.role] < RANK[needs]) return `${who.role} ${who.name} may not call ${rpcName(method)} with these arguments (it needs role ${needs})`;
  if (who.role !== "operator" || req === undefined) return null;
  if (rule.targets) {
    for (const clientId of rule.targets(req, st)) {
      const why = outOfScope(who, clientId, st);
      if (why) return why;
    }
    return null;
  }
  if (!rule.target) return null;
  const t = rule.target(req);
  let clientId: string;
  if ("uuid" in t) {
    const c = st.commands.get(t.uuid)?.clientId ?? st.pruned.get(t.uuid)?.clientId;
    // An unknown command: the core answers NOT_FOUND (nothing to act on).
    if (c === undefined) return null;
    clientId = c;
  } else clientId = t.clientId;
  return outOfScope(who, clientId, st);
}

/** Why `clientId` is outside an operator's selector (null: inside it). */
function outOfScope(who: Identity, clientId: string, st: ServerState): string | null {
  const labels = st.clients.get(clientId)?.labels;
  if (labels && unmetRequirements(labels, who.selector).length === 0) return null;
  const has = !labels ? "is not a registered client (no labels)" : Object.keys(labels).length === 0 ? "has no labels" : `has labels ${formatLabels(labels)}`;
  return `operator ${who.name} may run only on clients matching ${who.selectorText}; client ${clientId} ${has}`;
}

/** The clients a call names, for the audit entry of a refused call (a command's client for the calls that name a command). */
export function targetClients(method: MethodName, req: unknown, st: ServerState): string[] {
  const rule = ACCESS[method] as Rule<unknown>;
  if (req === undefined) return [];
  if (rule.targets) return rule.targets(req, st);
  if (!rule.target) return [];
  const t = rule.target(req);
  if ("clientId" in t) return t.clientId ? [t.clientId] : [];
  const c = st.commands.get(t.uuid)?.clientId ?? st.pruned.get(t.uuid)?.clientId;
  return c ? [c] : [];
}

export function summarize(method: MethodName, req: unknown): string {
  const rule = ACCESS[method] as Rule<unknown>;
  return rule.summary && req !== undefined ? rule.summary(req) : "";
}
