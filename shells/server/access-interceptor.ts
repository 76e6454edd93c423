/**
 * The control API's access check (the ACCESS table in access.ts), run for
 * every ConnectRPC call before its handler: the caller's identity (resolved
 * from its bearer token by the daemon) must hold the role the method needs,
 * and role operator only acts on clients matching its selector. A refusal is
 * PERMISSION_DENIED naming the rule; it is audited through the core (an
 * `audit_refusal` op that only appends the entry) before the error leaves.
 * A mutating call the service refuses before it reaches the core (a missing
 * field) is audited the same way, so no mutating call goes unrecorded.
 */
import { randomUUID } from "node:crypto";
import { Code as ConnectCode, ConnectError, type Interceptor } from "@connectrpc/connect";
import { type AuditCall, Code } from "../../core/index.js";
import { ACCESS, type MethodName, refusal, rpcName, summarize, targetClients } from "./access.js";
import { AUDIT_KEY, IDENTITY_KEY, toConnectError } from "./control-service.js";
import { idProblem } from "./id-limits.js";
import type { ServerDaemon } from "./server-daemon.js";

export { IDENTITY_KEY };

export function accessInterceptor(d: ServerDaemon): Interceptor {
  return (next) => async (req) => {
    const method = req.method.localName as MethodName;
    const rule = ACCESS[method];
    const who = req.contextValues.get(IDENTITY_KEY);
    if (!rule || !who) throw new ConnectError(`no access rule for ${req.method.name}`, ConnectCode.PermissionDenied);
    const message = req.stream ? undefined : (req.message as unknown);
    // Ids first, before any lookup, summary or message echoes them (streams check theirs in the handler).
    const overlong = idProblem(method, message);
    if (overlong !== null) {
      const bad: AuditCall = { operator: who.name, role: who.role, rpc: rpcName(method), summary: "(ids over their bounds)" };
      if (rule.mutating) await record(d, bad, [], "INVALID_ARGUMENT", overlong);
      throw toConnectError({ code: Code.VALIDATION, message: overlong });
    }
    const call: AuditCall = { operator: who.name, role: who.role, rpc: rpcName(method), summary: summarize(method, message) };
    const why = refusal(who, method, message, d.state);
    if (why !== null) {
      await record(d, call, targetClients(method, message, d.state), "PERMISSION_DENIED", why);
      throw new ConnectError(why, ConnectCode.PermissionDenied);
    }
    if (!rule.mutating) return next(req);
    const a = { call, recorded: false };
    req.contextValues.set(AUDIT_KEY, a);
    try {
      return await next(req);
    } catch (err) {
      if (!a.recorded) {
        const e = ConnectError.from(err);
        await record(d, call, targetClients(method, message, d.state), snake(ConnectCode[e.code] ?? String(e.code)), e.rawMessage);
      }
      throw err;
    }
  };
}

/** InvalidArgument -> INVALID_ARGUMENT (like PERMISSION_DENIED). */
const snake = (s: string): string => s.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();

async function record(d: ServerDaemon, call: AuditCall, clients: string[], code: string, message: string): Promise<void> {
  await d.control({ op: "audit_refusal", requestId: `audit-${randomUUID()}`, clients, code, message }, call);
}
