/**
 * An argument that is not valid UTF-8 is refused by the process the operator
 * started, naming its index, with the usage exit code (2), and nothing is
 * sent: Node would have replaced its bad bytes with U+FFFD and the command
 * would have run with other arguments than the ones typed. Each way the
 * command line starts is covered: `node bin/rvbox.js`, the compiled entry's
 * source (bin/rvbox.ts), and the resident client (RVBOX_PERSIST); the
 * snapshot's restored process is in snapshot.test.ts. Valid non-ASCII
 * arguments pass as before.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { invalidUtf8Arg } from "../../bin/argv-utf8.js";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { BIN, OPERATOR_TOKEN, ROOT, startAgent, startServer, waitFor, type TestServer } from "../shells/e2e/helpers.js";

const tmp = mkdtempSync(path.join(tmpdir(), "rvbox-argv-"));
let server: TestServer;
let agent: AgentDaemon;
const env: NodeJS.ProcessEnv = { ...process.env };
for (const k of ["RVBOX_BUNDLE", "RVBOX_SNAPSHOT", "RVBOX_PERSIST", "RVBOX_LAUNCH"]) delete env[k];

beforeAll(async () => {
  server = await startServer();
  agent = await startAgent(server.url, "argv-a");
  const tokenFile = path.join(tmp, "operator-token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  Object.assign(env, { RVBOX_SERVER: server.controlUrl, RVBOX_TOKEN_FILE: tokenFile, XDG_RUNTIME_DIR: path.join(tmp, "run") });
  await waitFor("agent connected", () => agent.connected);
}, 60_000);

afterAll(async () => {
  await agent?.close();
  await server?.close();
  rmSync(tmp, { recursive: true, force: true });
});

/**
 * `program ...args LAST` where LAST is the bytes printf makes of `printfBytes` (`a\377b`): a shell puts
 * them in argv as they are, which Node's spawn cannot (it takes strings).
 */
function withRawLast(
  program: string[],
  printfBytes: string,
  extra: NodeJS.ProcessEnv = {},
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn("/bin/sh", ["-c", 'exec "$@" "$(printf "$RVBOX_TEST_RAW")"', "sh", ...program], {
      cwd: ROOT,
      env: { ...env, ...extra, RVBOX_TEST_RAW: printfBytes },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    p.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    p.on("error", reject);
    p.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

const commandsOnAgent = async () => (await server.client.listCommands({ clientId: "argv-a" })).commands.length;

describe.runIf(process.platform === "linux")("arguments that are not valid UTF-8", () => {
  it("node bin/rvbox.js: refused with the argument's index and exit 2; nothing is submitted", async () => {
    const before = await commandsOnAgent();
    const r = await withRawLast([process.execPath, BIN, "run", "argv-a", "--follow", "--", "echo"], "a\\377b");
    expect(r.stderr).toContain('rvbox: argument 6 is not valid UTF-8: "a\\xffb"');
    expect(r.status).toBe(2);
    expect(r.stdout).toBe("");
    expect(await commandsOnAgent()).toBe(before);
  });

  it("the compiled entry's source (bin/rvbox.ts, what dist/bin/rvbox.js runs): refused the same way", async () => {
    const r = await withRawLast([process.execPath, "--import", "tsx", path.join(ROOT, "bin/rvbox.ts"), "ls", "--client"], "\\376");
    expect(r.stderr).toContain('rvbox: argument 3 is not valid UTF-8: "\\xfe"');
    expect(r.status).toBe(2);
  });

  it("the resident client (RVBOX_PERSIST): refused before it reaches or starts a resident", async () => {
    const before = await commandsOnAgent();
    const r = await withRawLast([BIN, "run", "argv-a", "--", "echo"], "x\\200", { RVBOX_PERSIST: "1m" });
    expect(r.stderr).toContain('rvbox: argument 5 is not valid UTF-8: "x\\x80"');
    expect(r.status).toBe(2);
    expect(readdirSync(tmp)).not.toContain("run");
    expect(await commandsOnAgent()).toBe(before);
  });

  it("a valid non-ASCII argument still runs as typed", async () => {
    const r = await withRawLast([process.execPath, BIN, "run", "argv-a", "--follow", "--", "echo"], "\\303\\251t\\303\\251");
    expect(r.stderr).not.toContain("not valid UTF-8");
    expect(r.stdout).toBe("été\n");
    expect(r.status).toBe(0);
  });
});

describe("invalidUtf8Arg", () => {
  const cmdline = (...parts: Array<string | number[]>) =>
    Buffer.concat(parts.flatMap((p) => [typeof p === "string" ? Buffer.from(p) : Buffer.from(p), Buffer.from([0])]));

  it("names the first bad argument, counting from 1 after the program and script", () => {
    const c = cmdline("node", "bin/rvbox.js", "run", [0x61, 0xff], [0xfe]);
    expect(invalidUtf8Arg(["run", "a\uFFFD", "\uFFFD"], c)).toMatch(/^rvbox: argument 2 is not valid UTF-8: "a\\xff"/);
  });

  it("passes valid UTF-8, U+FFFD typed as such included", () => {
    expect(invalidUtf8Arg(["été", "\uFFFD"], cmdline("node", "x.js", "été", "\uFFFD"))).toBeNull();
  });

  it("claims nothing when the cmdline's last entries are not these arguments (a rewritten title)", () => {
    expect(invalidUtf8Arg(["run", "a\uFFFD"], cmdline("rvbox-resident"))).toBeNull();
    expect(invalidUtf8Arg(["other", "a\uFFFD"], cmdline("node", "x.js", "run", [0x61, 0xff]))).toBeNull();
  });
});
