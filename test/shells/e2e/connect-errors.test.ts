/**
 * Issue 41 item 1: an agent that cannot connect says why at the default log
 * level (info), with the hint a person needs, instead of `session_lost ...
 * websocket closed (1006)` or a bare status.
 */
import { selfSignedCert } from "../../support/tls.js";
import { createServer as createHttpsServer } from "node:https";
import { createServer as createTcpServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { createLogger } from "../../../shells/runtime/log.js";
import { cleanupTemp, startAgent, startServer, tempDir, type TestServer, waitFor } from "./helpers.js";

let s: TestServer;
beforeAll(async () => {
  s = await startServer();
});
afterAll(async () => {
  await s.close();
  await cleanupTemp();
});

const listen = (srv: Server): Promise<number> => new Promise((r) => srv.listen(0, "127.0.0.1", () => r((srv.address() as { port: number }).port)));

/** Starts an agent against `url` logging at the default level (info), waits for its "cannot connect" line, stops it. */
async function firstWarning(url: string, opts: { token?: string } = {}): Promise<string[]> {
  const lines: string[] = [];
  const agent: AgentDaemon = await startAgent(url, "web-1", { log: createLogger("agent web-1", "info", (l) => lines.push(l)), ...opts });
  try {
    await waitFor("a cannot-connect warning", () => lines.some((l) => l.includes("WARN agent web-1: cannot connect to the server: ")));
  } finally {
    await agent.close();
  }
  return lines;
}

describe("an agent that cannot connect says why at the default log level (issue 41)", () => {
  it("connection refused: nothing listens at that port; names the agent port to use", async () => {
    const srv = createTcpServer();
    const port = await listen(srv);
    await new Promise((r) => srv.close(r));
    const lines = await firstWarning(`ws://127.0.0.1:${port}/v1/agent`);
    const warn = lines.find((l) => l.includes("cannot connect"))!;
    expect(warn).toContain(`cannot connect to the server: connection refused by 127.0.0.1:${port}`);
    expect(warn).toMatch(/hint=".*rvbox server --listen.*\/v1\/agent/);
    expect(lines.join("\n")).not.toMatch(/websocket closed \(1006\)/);
  });

  it("the control port instead of the agent endpoint is named as such, not as a refused token", async () => {
    const lines = await firstWarning(`${s.controlUrl.replace("http:", "ws:")}/v1/agent`);
    const warn = lines.find((l) => l.includes("cannot connect"))!;
    expect(warn).toMatch(/is the server's control API \(operators' port\), not its agent endpoint \(HTTP 401\)/);
    expect(warn).toMatch(/hint=".*--listen.*\/v1\/agent/);
  });

  it("a refused token names --token and the server's agent-tokens file", async () => {
    const lines = await firstWarning(s.url, { token: "not-a-token-the-server-has" });
    const warn = lines.find((l) => l.includes("cannot connect"))!;
    expect(warn).toContain("the server refused this agent's token (HTTP 401)");
    expect(warn).toMatch(/hint=".*--token FILE.*--agent-tokens/);
  });

  it("a wrong path is a 404 that names /v1/agent", async () => {
    const lines = await firstWarning(s.url.replace("/v1/agent", "/agent"));
    expect(lines.find((l) => l.includes("cannot connect"))).toMatch(/no agent endpoint at .*\(HTTP 404\).*hint=".*\/v1\/agent/);
  });

  it("an untrusted certificate names the TLS error and --ca", async () => {
    const dir = await tempDir("rvbox-tls-");
    const { key, cert } = selfSignedCert(dir);
    const tls = createHttpsServer({ key, cert }, (_req, res) => res.writeHead(404).end());
    const port = await listen(tls);
    try {
      const lines = await firstWarning(`wss://127.0.0.1:${port}/v1/agent`);
      const warn = lines.find((l) => l.includes("cannot connect"))!;
      expect(warn).toContain("the server's TLS certificate is not trusted (DEPTH_ZERO_SELF_SIGNED_CERT");
      expect(warn).toMatch(/hint=".*--ca FILE/);
    } finally {
      tls.closeAllConnections();
      await new Promise((r) => tls.close(r));
    }
  });

  it("a failure that repeats while the agent retries is said once", async () => {
    const srv = createTcpServer();
    const port = await listen(srv);
    await new Promise((r) => srv.close(r));
    const lines: string[] = [];
    const agent = await startAgent(`ws://127.0.0.1:${port}/v1/agent`, "web-2", { log: createLogger("agent web-2", "info", (l) => lines.push(l)) });
    try {
      // Two attempts at least (the backoff starts below a second): both closed with the cause, one warning.
      await waitFor("two refused attempts", () => lines.filter((l) => l.includes(`session_lost`) && l.includes("connection refused")).length >= 2, 30_000);
    } finally {
      await agent.close();
    }
    expect(lines.filter((l) => l.includes("cannot connect to the server")).length).toBe(1);
  }, 40_000);
});
