// The agent's half of the session: registration (ClientHello, then
// ServerWelcome or a refusal), the actions the session reducer
// (session/agent-session.ts: phases, fence, heartbeat, backoff) asks for,
// protocol failures, server errors, and CODE_REPLACED (another instance
// took over this client id).

import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ShellType } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentEnvelope, AgentError, ServerWelcome } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { Code, codeName, unreachable } from "../errors.js";
import { laneOf } from "../protocol/envelopes.js";
import { encodeEnvelope } from "../codec/frame-codec.js";
import { rangeToWire, versionInRange } from "../codec/version.js";
import { BACKOFF_CAP_MS } from "../limits.js";
import { sessionFail, sessionHoldOff, sessionWelcome, type SessionAction } from "../session/agent-session.js";
import type { AgentState } from "./agent-types.js";
import { sendError, trace, type AgentCtx } from "./io.js";
import { endLocalWork } from "./reconcile.js";

/** ServerWelcome while registering: check the selected version and the fence, then establish. */
export function onWelcome(
  st: AgentState,
  ctx: AgentCtx,
  acts: SessionAction[],
  env0: Pick<AgentEnvelope, "sessionId" | "sessionGeneration">,
  w: ServerWelcome,
): void {
  const s = st.session;
  const sel = w.selectedProtocol;
  const gen = Number(env0.sessionGeneration);
  if (!sel || !versionInRange({ major: sel.major, minor: sel.minor }, st.config.protocol)) {
    protocolFailure(st, ctx, acts, Code.INCOMPATIBLE_VERSION, "server selected a version outside our range");
    return;
  }
  if (env0.sessionId === "" || gen <= 0 || !Number.isSafeInteger(gen) || gen < s.maxGeneration) {
    protocolFailure(st, ctx, acts, Code.STALE_GENERATION, `welcome with unusable fence (generation ${gen})`);
    return;
  }
  sessionWelcome(s, s.conn, { sessionId: env0.sessionId, generation: gen }, { major: sel.major, minor: sel.minor }, ctx.now, acts);
}

/** An AgentError while registering: the registration was refused. */
export function onRefused(st: AgentState, ctx: AgentCtx, acts: SessionAction[], e: AgentError): void {
  sessionFail(st.session, `registration refused: ${codeName(e.error?.code ?? 0)} ${e.error?.message ?? ""}`, ctx.now, st.rng, acts);
  if (e.error?.code === Code.REPLACED) onReplaced(st, ctx, e.error.message);
}

/** An AgentError on an established session: traced, or the end of the session when it says so. */
export function onServerError(st: AgentState, ctx: AgentCtx, acts: SessionAction[], e: AgentError): void {
  if (e.closeSession) sessionFail(st.session, `server error: ${codeName(e.error?.code ?? 0)} ${e.error?.message ?? ""}`, ctx.now, st.rng, acts);
  else ctx.emit(trace("server_error", { code: codeName(e.error?.code ?? 0), message: e.error?.message ?? "" }));
  if (e.closeSession && e.error?.code === Code.REPLACED) onReplaced(st, ctx, e.error.message);
}

/**
 * An operator authorized another instance to take over this client id. What
 * this instance still runs is out of everyone's reach (the server ended those
 * commands when the new instance reconciled), so it is ended here: processes
 * killed, every local command tombstoned (never launched again, its output
 * never sent). The agent then retries only at the backoff cap, so it does not
 * keep claiming the id; an operator may authorize it again.
 */
function onReplaced(st: AgentState, ctx: AgentCtx, message: string): void {
  const ended = endLocalWork(st, ctx, "this instance was replaced by another one (CODE_REPLACED)");
  st.replaced = message;
  sessionHoldOff(st.session, ctx.now + BACKOFF_CAP_MS);
  ctx.emit(trace("replaced", { message, ended, retryInMs: BACKOFF_CAP_MS }));
}

/** Send a structured error and close the session (R-W10). */
export function protocolFailure(st: AgentState, ctx: AgentCtx, acts: SessionAction[], code: Code, message: string): void {
  ctx.emit(trace("protocol_failure", { code: codeName(code), message }));
  sendError(st, ctx, code, message, true);
  sessionFail(st.session, `${codeName(code)}: ${message}`, ctx.now, st.rng, acts);
}

export function applySessionActions(st: AgentState, ctx: AgentCtx, acts: SessionAction[]): void {
  for (let i = 0; i < acts.length; i++) {
    const a = acts[i]!;
    switch (a.type) {
      case "connect":
        st.reconciled = false;
        ctx.emit({ type: "connect", conn: a.conn });
        ctx.emit(trace("connect", { conn: a.conn }));
        break;
      case "send_hello": {
        const c = st.config;
        ctx.emit({
          type: "send",
          conn: a.conn,
          lane: laneOf("clientHello"),
          kind: "clientHello",
          data: encodeEnvelope(null, {
            case: "clientHello",
            value: {
              $typeName: "rvbox.v1.ClientHello",
              clientId: c.clientId,
              supportedProtocol: rangeToWire(c.protocol),
              daemonVersion: c.daemonVersion,
              platform: c.platform,
              architecture: c.architecture,
              daemonCwd: c.daemonCwd,
              supportedShells: [...c.supportedShells] as ShellType[],
              clientInstanceId: st.instanceId,
              maxRunningCommands: c.maxRunning,
              maxQueuedCommands: c.maxQueued,
              sentAt: timestampFromMs(ctx.wall),
            },
          }),
        });
        break;
      }
      case "ping":
        ctx.emit({ type: "ping", conn: a.conn });
        break;
      case "close":
        ctx.emit({ type: "close", conn: a.conn, reason: a.reason });
        break;
      case "lost":
        st.reconciled = false;
        st.lastCapacity = "";
        ctx.emit(trace("session_lost", { conn: a.conn, reason: a.reason }));
        break;
      case "established":
        st.lastCapacity = "";
        st.replaced = null;
        ctx.emit(trace("established", { conn: a.conn, generation: st.session.fence?.generation ?? 0 }));
        break;
      default:
        unreachable(a, "session action");
    }
  }
}
