/**
 * Why the agent's WebSocket to the server did not open, in words a person
 * acts on: the socket error or the HTTP answer to the upgrade turned into a
 * cause (carried as the session's close reason) and a hint (which flag or
 * file to look at). Without it every failure read `websocket closed (1006)`
 * or a bare status, and the cause showed only at --log-level debug.
 */

export interface ConnectFailure {
  /** What happened, short: it becomes the close reason the core traces. */
  cause: string;
  /** What to check ("" when there is nothing better to say). */
  hint: string;
}

/** How many bytes of a refusal's body the agent reads to tell the control API from the agent endpoint. */
export const REFUSAL_BODY_BYTES = 512;

const TLS_TRUST = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_UNTRUSTED",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

function hostPort(serverUrl: string): string {
  try {
    const u = new URL(serverUrl);
    return `${u.hostname}:${u.port || (u.protocol === "wss:" ? "443" : "80")}`;
  } catch {
    return serverUrl;
  }
}

/** A socket-level failure (the `error` event of the WebSocket before it opened). */
export function socketFailure(err: { code?: string; message: string }, serverUrl: string): ConnectFailure {
  const code = err.code ?? "";
  const at = hostPort(serverUrl);
  if (TLS_TRUST.has(code)) {
    return {
      cause: `the server's TLS certificate is not trusted (${code}: ${err.message})`,
      hint:
        code === "ERR_TLS_CERT_ALTNAME_INVALID"
          ? "the certificate does not name the host in --server: connect by a name it has"
          : 'give the agent the CA that signed it: --ca FILE ("ca" in the config file)',
    };
  }
  if (code === "ECONNREFUSED")
    return {
      cause: `connection refused by ${at}`,
      hint: "nothing listens there: is the server running, and is this its agent port (rvbox server --listen), as in ws://HOST:PORT/v1/agent?",
    };
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") return { cause: `cannot resolve ${at} (${code})`, hint: "check the host name in --server" };
  if (code === "ETIMEDOUT" || code === "EHOSTUNREACH" || code === "ENETUNREACH")
    return { cause: `${at} is unreachable (${code})`, hint: "check the address in --server and the network (a firewall?)" };
  if (code === "EPROTO" || /wrong version number|packet length too long/i.test(err.message))
    return {
      cause: `the server at ${at} does not speak TLS (${err.message})`,
      hint: "use ws:// for the server's own listener; wss:// is for a TLS proxy in front of it (nginx)",
    };
  if (code === "ECONNRESET" || /socket hang up/i.test(err.message))
    return {
      cause: `${at} closed the connection before answering the upgrade (${err.message})`,
      hint: "a wss:// URL to a plain port, or a proxy that does not pass WebSocket upgrades?",
    };
  if (/handshake has timed out/i.test(err.message))
    return { cause: `${at} did not answer the WebSocket upgrade in time`, hint: "is --server the agent endpoint (ws://HOST:PORT/v1/agent)?" };
  return { cause: `cannot connect to ${at}: ${err.message}${code ? ` (${code})` : ""}`, hint: "" };
}

/** The server answered the upgrade with HTTP `status` (and this start of a body) instead of switching protocols. */
export function refusedUpgrade(status: number, body: string, serverUrl: string): ConnectFailure {
  const at = hostPort(serverUrl);
  // The control API (ConnectRPC) answers any request without an operator token with this 401.
  if (status === 401 && /operator bearer token/.test(body))
    return {
      cause: `${at} is the server's control API (operators' port), not its agent endpoint (HTTP 401)`,
      hint: "point --server at the server's agent listener (rvbox server --listen): ws://HOST:PORT/v1/agent",
    };
  if (status === 401)
    return {
      cause: "the server refused this agent's token (HTTP 401)",
      hint: 'check --token FILE ("token" in the config file) against the server\'s --agent-tokens file: a line `CLIENT_ID TOKEN` for this client id, or `* TOKEN`',
    };
  if (status === 404) return { cause: `no agent endpoint at ${serverUrl} (HTTP 404)`, hint: "the agent endpoint's path is /v1/agent: ws://HOST:PORT/v1/agent" };
  // 503: shutting down, or its store takes no writes for now; the body says which.
  if (status === 503) return { cause: `the server is not taking agents now (HTTP 503${body.trim() ? `: ${body.trim()}` : ""})`, hint: "" };
  return { cause: `the server refused the WebSocket upgrade (HTTP ${status})`, hint: "" };
}

/** Up to `max` bytes of a response body as text: at its end, once `max` arrived, on an error, or after 2 s, whichever comes first. */
export function readStart(res: NodeJS.ReadableStream, max: number): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let got = 0;
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      res.removeListener("data", onData);
      res.resume(); // drain the rest
      resolve(Buffer.concat(chunks).subarray(0, max).toString("utf8"));
    };
    const onData = (d: Buffer | string): void => {
      const b = typeof d === "string" ? Buffer.from(d) : d;
      chunks.push(b);
      got += b.length;
      if (got >= max) finish();
    };
    const timer = setTimeout(finish, 2_000);
    res.on("data", onData);
    res.once("end", finish);
    res.once("error", finish);
    res.once("close", finish);
  });
}
