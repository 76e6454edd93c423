/**
 * /healthz and /readyz, for load balancers and service managers, answered
 * without a token (probes carry none) on the control port and the agent
 * port: healthz 200 "ok" while the process serves HTTP at all; readyz 200
 * "ready" only while the server has restored its state and its store takes
 * writes, 503 "not ready: REASON" otherwise.
 *
 * While the server starts (waiting for its database, loading its state) the
 * control port already listens and answers them, and every other request
 * with 503 (Connect's and gRPC's UNAVAILABLE) naming what it waits for.
 */
import type { ControlHandler, ControlRequest, ControlResponse } from "./control-listener.js";

/** Answers `req` if it is a probe; `notReady` says why the server is not ready (null: ready). Returns whether it answered. */
export function serveProbe(notReady: () => string | null, req: ControlRequest | { url?: string }, res: ControlResponse): boolean {
  const path = (req.url ?? "").split("?")[0];
  if (path !== "/healthz" && path !== "/readyz") return false;
  const why = path === "/readyz" ? notReady() : null;
  res.statusCode = why === null ? 200 : 503;
  res.setHeader("content-type", "text/plain");
  res.setHeader("cache-control", "no-store");
  res.end(why === null ? (path === "/readyz" ? "ready\n" : "ok\n") : `not ready: ${why}\n`);
  return true;
}

/** The control port's handler until the server has started: probes, and 503 UNAVAILABLE for every call. */
export function startingHandler(why: () => string): ControlHandler {
  return (req, res) => {
    if (serveProbe(why, req, res)) return;
    res.statusCode = 503;
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ code: "unavailable", message: `the server is starting (${why()}): try again shortly` }));
  };
}
