// R-T6: the shipped deploy/nginx/rvbox.conf, run by a real nginx with a
// self-signed certificate, terminates TLS in front of the server: an agent's
// session runs over wss:// and operators use the control API over https://.
import { selfSignedCert } from "../../support/tls.js";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, writeFileSync, mkdirSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { ControlService } from "../../../protos/gen/rvbox/v1/control_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { cleanupTemp, collect, OPERATOR_TOKEN, ROOT, startAgent, startServer, tempDir, waitFor, type TestServer } from "./helpers.js";
import { freePort } from "./tcp-proxy.js";
import { RawAgent } from "./raw-client.js";

function findNginx(): string | null {
  for (const p of ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"]) if (existsSync(p)) return p;
  try {
    return execFileSync("sh", ["-c", "command -v nginx"], { encoding: "utf8" }).trim() || null;
  } catch {
    return null;
  }
}

const NGINX = findNginx();
if (!NGINX) console.warn("nginx.test.ts: SKIPPED — no nginx binary found (install Debian's nginx-light or nginx; .ci/run does)");

describe.skipIf(!NGINX)("e2e: behind nginx (TLS termination)", () => {
  let s: TestServer;
  let nginx: ChildProcess;
  let agent: AgentDaemon | undefined;
  let port = 0;
  let cert: Buffer;
  let log = "";

  beforeAll(async () => {
    const dir = await tempDir("rvbox-nginx-");
    s = await startServer();
    cert = selfSignedCert(dir, { cn: "localhost", san: "DNS:localhost,IP:127.0.0.1", keyName: "privkey.pem", certName: "fullchain.pem" }).cert;
    port = await freePort();
    // The shipped site file, with this test's ports and paths.
    const site = readFileSync(path.join(ROOT, "deploy/nginx/rvbox.conf"), "utf8")
      .replace("server 127.0.0.1:7400;", `server 127.0.0.1:${s.daemon.agentAddress.port};`)
      .replace("server 127.0.0.1:7401;", `server 127.0.0.1:${s.daemon.controlAddress.port};`)
      .replace(/listen 443 ssl;/, `listen 127.0.0.1:${port} ssl;`)
      .replace(/\n\s*listen \[::\]:443 ssl;/, "")
      .replace("/etc/rvbox/tls/fullchain.pem", path.join(dir, "fullchain.pem"))
      .replace("/etc/rvbox/tls/privkey.pem", path.join(dir, "privkey.pem"));
    expect(site).toContain(`127.0.0.1:${port} ssl`);
    writeFileSync(path.join(dir, "rvbox.conf"), site);
    for (const t of ["body", "proxy", "fastcgi", "uwsgi", "scgi"]) mkdirSync(path.join(dir, "tmp", t), { recursive: true });
    const isRoot = process.getuid?.() === 0;
    writeFileSync(
      path.join(dir, "nginx.conf"),
      `${isRoot ? "user root;\n" : ""}worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/tmp/body;
  proxy_temp_path ${dir}/tmp/proxy;
  fastcgi_temp_path ${dir}/tmp/fastcgi;
  uwsgi_temp_path ${dir}/tmp/uwsgi;
  scgi_temp_path ${dir}/tmp/scgi;
  include ${dir}/rvbox.conf;
}
`,
    );
    execFileSync(NGINX!, ["-t", "-p", dir, "-c", path.join(dir, "nginx.conf")], { stdio: "pipe" });
    nginx = spawn(NGINX!, ["-p", dir, "-c", path.join(dir, "nginx.conf"), "-g", "daemon off;"], { stdio: ["ignore", "pipe", "pipe"] });
    nginx.stderr!.on("data", (d: Buffer) => (log += d.toString()));
    await waitFor(
      "nginx listening",
      async () => {
        try {
          await fetch(`https://127.0.0.1:${port}/`).catch(() => null);
          return existsSync(path.join(dir, "nginx.pid"));
        } catch {
          return false;
        }
      },
      15_000,
    );
  });

  afterAll(async () => {
    await agent?.close();
    nginx?.kill("SIGTERM");
    await s?.close();
    await cleanupTemp();
  });

  it("R-T6: an agent over wss:// through nginx runs a command end to end; the control API works over https:// through nginx, and refuses a missing token", async () => {
    agent = await startAgent(`wss://localhost:${port}/v1/agent`, "tls-host", { ca: cert });
    await waitFor("agent registered through nginx", () => agent!.connected, 20_000).catch((e) => {
      throw new Error(`${String(e)}\nnginx log:\n${log}`);
    });
    const auth: Interceptor = (next) => (req) => {
      req.header.set("Authorization", `Bearer ${OPERATOR_TOKEN}`);
      return next(req);
    };
    const ctl = createClient(
      ControlService,
      createConnectTransport({ baseUrl: `https://localhost:${port}`, httpVersion: "1.1", nodeOptions: { ca: cert }, interceptors: [auth] }),
    );
    const r = await ctl.submitCommand({
      clientId: "tls-host",
      program: { case: "shell", value: { commandLine: "echo through nginx; head -c 300000 /dev/zero | tr '\\0' 'z'" } },
    });
    const got = await collect(ctl, r.command!.issueUuid);
    expect(got.finished?.state).toBe(L.SUCCEEDED);
    expect(got.stdout.subarray(0, 14).toString()).toBe("through nginx\n");
    expect(got.stdout.length).toBe(14 + 300000);
    const sessions = (await ctl.listSessions({})).sessions.filter((x) => x.clientId === "tls-host");
    expect(sessions.length).toBe(1);
    expect(sessions[0]!.remoteAddress).toMatch(/via 127\.0\.0\.1/);
    // No token: refused by the server, through nginx, before the WebSocket opens.
    const refused = await RawAgent.connect(`wss://localhost:${port}/v1/agent`, null, cert).catch((e: unknown) => e);
    expect(refused).toEqual({ status: 401 });
    const anon = createClient(ControlService, createConnectTransport({ baseUrl: `https://localhost:${port}`, httpVersion: "1.1", nodeOptions: { ca: cert } }));
    await expect(anon.listClients({})).rejects.toMatchObject({ code: 16 });
  }, 60_000);
});
