// Operator requests: one router to the module that answers each.

import { unreachable } from "../errors.js";
import type { ControlRequest, ServerEnv, ServerState } from "./server-types.js";
import { authorize, dismissClaim, forgetClient, revokeAuthorization, setDraining, setLabels } from "./clients.js";
import { ackIncident } from "./incidents.js";
import { submitJob } from "./jobs.js";
import type { ServerCtx } from "./io.js";
import { controlSignal } from "./signals.js";
import { controlStdin } from "./stdin.js";
import { submit } from "./submit.js";

/** Route one operator request to the module that answers it. */
export function handleControl(st: ServerState, ctx: ServerCtx, r: ControlRequest, env: ServerEnv): void {
  switch (r.op) {
    case "submit":
      return submit(st, ctx, r, env);
    case "stdin":
    case "close_stdin":
      return controlStdin(st, ctx, r);
    case "signal":
      return controlSignal(st, ctx, r);
    case "authorize":
      return authorize(st, ctx, r);
    case "revoke_authorization":
      return revokeAuthorization(st, ctx, r);
    case "dismiss_claim":
      return dismissClaim(st, ctx, r);
    case "ack_incident":
      return ackIncident(st, ctx, r);
    case "forget_client":
      return forgetClient(st, ctx, r.requestId, r.clientId);
    case "set_draining":
      return setDraining(st, ctx, r);
    case "set_labels":
      return setLabels(st, ctx, r);
    case "submit_job":
      return submitJob(st, ctx, r, env);
    default:
      return unreachable(r, "control request");
  }
}
