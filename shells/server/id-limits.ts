/**
 * The control API's edge check of identifiers: every id field of every
 * request (issue uuids, client, instance, job, incident and request ids,
 * label keys and values, selectors, page tokens, operator names) against its
 * named bound (core/limits.ts), before any lookup, access check, suggestion,
 * audit summary or error message sees the value. A value over its bound is
 * refused with INVALID_ARGUMENT naming the field, its length and a short
 * prefix, never the whole value: a 15 MB uuid once came back three times in
 * a 52 MB NOT_FOUND.
 *
 * The table's type names every method of ControlService, so a new RPC does
 * not compile until it says which of its fields are ids (none: `none`).
 */
import type { MessageShape } from "@bufbuild/protobuf";
import {
  MAX_CLIENT_ID_CHARS,
  MAX_INCIDENT_ID_CHARS,
  MAX_INSTANCE_ID_CHARS,
  MAX_ISSUE_UUID_CHARS,
  MAX_JOB_ID_CHARS,
  MAX_JOB_TARGETS,
  MAX_LABEL_KEY_CHARS,
  MAX_LABEL_VALUE_CHARS,
  MAX_LABELS_PER_CLIENT,
  MAX_OPERATOR_NAME_CHARS,
  MAX_PAGE_TOKEN_CHARS,
  MAX_REQUEST_ID_CHARS,
  MAX_SELECTOR_CHARS,
} from "../../core/index.js";
import type { ControlService } from "../../protos/gen/rvbox/v1/control_pb.js";
import type { MethodName } from "./access.js";

/** WatchFleet's command_clients bound (one request names at most this many). */
export const MAX_WATCHED_CLIENTS = 10_000;

type Methods = (typeof ControlService)["method"];
type Req<K extends MethodName> = MessageShape<Methods[K]["input"]>;

/** One id field of a request: its proto name, its value, its bound in characters. */
export type IdField = readonly [field: string, value: string, max: number];
/** A repeated id field: its proto name, its values, how many it may hold, the bound of each. */
type IdList = readonly [field: string, values: readonly string[], maxItems: number, maxChars: number];

interface IdRule<R> {
  ids: (r: R) => IdField[];
  lists?: (r: R) => IdList[];
}

const uuid = (v: string): IdField => ["issue_uuid", v, MAX_ISSUE_UUID_CHARS];
const client = (v: string): IdField => ["client_id", v, MAX_CLIENT_ID_CHARS];
const request = (v: string): IdField => ["request_id", v, MAX_REQUEST_ID_CHARS];
const job = (v: string): IdField => ["job_id", v, MAX_JOB_ID_CHARS];
const selector = (v: string): IdField => ["selector", v, MAX_SELECTOR_CHARS];
const none = { ids: () => [] };
const byUuid = { ids: (r: { issueUuid: string; requestId?: string }) => [uuid(r.issueUuid), request(r.requestId ?? "")] };
const byClient = { ids: (r: { clientId: string; requestId?: string }) => [client(r.clientId), request(r.requestId ?? "")] };
const labels = (set: Record<string, string>, remove: readonly string[]): IdList[] => [
  ["set", Object.keys(set), MAX_LABELS_PER_CLIENT, MAX_LABEL_KEY_CHARS],
  ["set (values)", Object.values(set), MAX_LABELS_PER_CLIENT, MAX_LABEL_VALUE_CHARS],
  ["remove", remove, MAX_LABELS_PER_CLIENT, MAX_LABEL_KEY_CHARS],
];

export const ID_FIELDS: { [K in MethodName]: IdRule<Req<K>> } = {
  submitCommand: { ids: (r) => [client(r.clientId), uuid(r.issueUuid), request(r.requestId)] },
  getCommand: byUuid,
  listCommands: { ids: (r) => [client(r.clientId), ["page_token", r.pageToken, MAX_PAGE_TOKEN_CHARS], selector(r.selector)] },
  followOutput: byUuid,
  writeStdin: { ids: (r) => [uuid(r.issueUuid), request(r.requestId), ["after_request_id", r.afterRequestId, MAX_REQUEST_ID_CHARS]] },
  closeStdin: byUuid,
  signalCommand: byUuid,
  listClients: { ids: (r) => [selector(r.selector)] },
  listSessions: none,
  listClaims: none,
  authorizeInstance: { ids: (r) => [client(r.clientId), ["instance_id", r.instanceId, MAX_INSTANCE_ID_CHARS], request(r.requestId)] },
  listIncidents: none,
  acknowledgeIncident: { ids: (r) => [["incident_id", r.incidentId, MAX_INCIDENT_ID_CHARS], request(r.requestId)] },
  watchFleet: { ids: () => [], lists: (r) => [["command_clients", r.commandClients, MAX_WATCHED_CLIENTS, MAX_CLIENT_ID_CHARS]] },
  forgetClient: byClient,
  revokeAuthorization: byClient,
  dismissClaim: byClient,
  setClientDraining: byClient,
  setClientLabels: { ids: (r) => [client(r.clientId), request(r.requestId)], lists: (r) => labels(r.set, r.remove) },
  listAudit: { ids: (r) => [["operator", r.operator, MAX_OPERATOR_NAME_CHARS], client(r.clientId)] },
  cancelJob: { ids: (r) => [job(r.jobId), request(r.requestId)] },
  submitJob: {
    ids: (r) => [job(r.jobId), request(r.requestId), selector(r.selector)],
    lists: (r) => [["client_ids", r.clientIds, MAX_JOB_TARGETS, MAX_CLIENT_ID_CHARS]],
  },
  getJob: { ids: (r) => [job(r.jobId)] },
  listJobs: none,
};

/** Characters of an over-long value an error shows. */
export const ID_PREFIX_CHARS = 16;

/** A value shown in an error: whole if short, else its first characters and its length. */
export function shortValue(v: string): string {
  return v.length <= ID_PREFIX_CHARS ? JSON.stringify(v) : `${JSON.stringify(v.slice(0, ID_PREFIX_CHARS))}… (${v.length} characters)`;
}

function tooLong([field, v, max]: IdField): string | null {
  return v.length > max ? `${field} may be at most ${max} characters; got ${shortValue(v)}` : null;
}

/** Why this request's ids are out of bounds (null: they are not). Cost: one length check per field. */
export function idProblem(method: MethodName, req: unknown): string | null {
  const rule = ID_FIELDS[method] as IdRule<unknown> | undefined;
  if (!rule || req === undefined) return null;
  for (const f of rule.ids(req)) {
    const why = tooLong(f);
    if (why) return why;
  }
  for (const [field, values, maxItems, maxChars] of rule.lists?.(req) ?? []) {
    if (values.length > maxItems) return `${field} may hold at most ${maxItems} entries; got ${values.length}`;
    for (const v of values) {
      const why = tooLong([field, v, maxChars]);
      if (why) return why;
    }
  }
  return null;
}
