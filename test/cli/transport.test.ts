// The CLI's link to the control API: a deadline for every unary call, and a
// CA bundle for an https:// server with a private certificate.
import { selfSignedCert } from "../support/tls.js";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import { createServer as createTcpServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "rvbox-cli-transport-"));
const token = join(dir, "token");
writeFileSync(token, "t\n");
const servers: Server[] = [];
const sockets: Socket[] = [];
afterAll(() => {
  for (const s of sockets) s.destroy();
  for (const s of servers) s.close();
});

const listen = (s: Server): Promise<number> =>
  new Promise((r) => {
    servers.push(s);
    s.listen(0, "127.0.0.1", () => r((s.address() as { port: number }).port));
  });

describe("CLI transport", () => {
  it("--request-timeout: a server that accepts and never answers ends the call with exit 69 and says so", async () => {
    const port = await listen(createTcpServer((sock) => void sockets.push(sock)));
    const t0 = Date.now();
    const r = await cli(["ls", "--server", `http://127.0.0.1:${port}`, "--token", token, "--request-timeout", "300ms"]);
    expect(r.code).toBe(69);
    expect(r.stderr).toContain("did not answer in time (--request-timeout)");
    expect(Date.now() - t0).toBeLessThan(20_000); // retries of an idempotent call included, not the 30 s default
    expect((await cli(["ls", "--token", token, "--request-timeout", "soon"])).code).toBe(2);
  });

  it("--ca FILE trusts a private CA for an https:// control API; without it the error names the certificate and --ca", async () => {
    const { key, cert, certFile } = selfSignedCert(dir);
    // Not an RVBox server: any answer past the TLS handshake proves the certificate was accepted.
    const port = await listen(createHttpsServer({ key, cert }, (_req, res) => res.writeHead(404).end()));
    const url = `https://127.0.0.1:${port}`;
    const without = await cli(["ls", "--server", url, "--token", token]);
    expect(without.code).toBe(69);
    expect(without.stderr).toMatch(/cannot verify the TLS certificate .*--ca FILE or RVBOX_CA/);
    const withCa = await cli(["ls", "--server", url, "--token", token, "--ca", certFile]);
    expect(withCa.stderr).not.toMatch(/certificate/);
    expect(withCa.stderr).toMatch(/does not serve the RVBox control API/);
    expect((await cli(["ls", "--server", url, "--token", token], { env: { RVBOX_CA: certFile } })).stderr).toMatch(/does not serve the RVBox control API/);
    const missing = await cli(["ls", "--server", url, "--token", token, "--ca", join(dir, "nope.pem")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("--ca");
  });
});
