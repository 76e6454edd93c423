// Soak: one compiled server and agent, many short commands, both daemons'
// RSS sampled as the commands accumulate.
//
// The agent should level off: its per-command state is bounded (the
// tombstone ledger, MAX_TOMBSTONES). The server does not yet: it keeps every
// command's record in memory and in sql.js (see "Known limits of the shells"
// in docs/ARCHITECTURE.md); this script is how that growth is measured.
//
//   npm run build && npx tsx scripts/soak.ts [commands=5000] [inFlight=8]
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { CommandLifecycle } from "../protos/gen/rvbox/v1/common_pb.js";
import { ControlService } from "../protos/gen/rvbox/v1/control_pb.js";

const ROOT = path.resolve(import.meta.dirname, "..");
const BIN = path.join(ROOT, "dist/bin/rvbox.js");
const total = Number(process.argv[2] ?? 5000);
const inFlight = Number(process.argv[3] ?? 8);
const rssMiB = (pid: number): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;

async function freePort(): Promise<number> {
  const net = await import("node:net");
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
  const p = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return p;
}

const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-soak-"));
const op = randomBytes(16).toString("hex");
const fleet = randomBytes(16).toString("hex");
writeFileSync(path.join(dir, "operator-token"), op + "\n");
writeFileSync(path.join(dir, "agent-tokens"), `* ${fleet}\n`);
writeFileSync(path.join(dir, "agent-token"), fleet + "\n");
const [ap, cp] = [await freePort(), await freePort()];
const server = spawn(process.execPath, [BIN, "server", "--listen", `127.0.0.1:${ap}`, "--control", `127.0.0.1:${cp}`, "--data", path.join(dir, "server"), "--agent-tokens", path.join(dir, "agent-tokens"), "--operator-token", path.join(dir, "operator-token"), "--log-level", "warn"], { stdio: "inherit" });
const agent = spawn(process.execPath, [BIN, "agent", "--server", `ws://127.0.0.1:${ap}/v1/agent`, "--client-id", "soak", "--state", path.join(dir, "agent"), "--token", path.join(dir, "agent-token"), "--log-level", "warn", "--max-running", "16", "--max-queued", "64"], { stdio: "inherit" });
const auth: Interceptor = (next) => (req) => {
  req.header.set("Authorization", `Bearer ${op}`);
  return next(req);
};
const ctl = createClient(ControlService, createConnectTransport({ baseUrl: `http://127.0.0.1:${cp}`, httpVersion: "1.1", interceptors: [auth] }));
try {
  for (let i = 0; ; i++) {
    try {
      if ((await ctl.listClients({})).clients.some((c) => c.clientId === "soak" && c.connected)) break;
    } catch {
      // server not up yet
    }
    if (i > 300) throw new Error("agent did not connect");
    await new Promise((r) => setTimeout(r, 100));
  }
  console.log(`soak: ${total} x true, ${inFlight} in flight; agent RSS ${rssMiB(agent.pid!).toFixed(1)} MiB idle, server ${rssMiB(server.pid!).toFixed(1)} MiB`);
  let next = 0;
  let done = 0;
  const every = Math.max(1, Math.floor(total / 10));
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < total) {
        next++;
        const r = await ctl.submitCommand({ clientId: "soak", program: { case: "argv", value: { argv: ["true"] } } });
        for await (const m of ctl.followOutput({ issueUuid: r.command!.issueUuid, follow: true })) {
          if (m.item.case === "finished") {
            if (m.item.value.state !== CommandLifecycle.SUCCEEDED) throw new Error(`command ended ${CommandLifecycle[m.item.value.state]}`);
            break;
          }
        }
        if (++done % every === 0) console.log(`  ${String(done).padStart(7)} commands: agent RSS ${rssMiB(agent.pid!).toFixed(1)} MiB, server ${rssMiB(server.pid!).toFixed(1)} MiB, ${((done / (performance.now() - t0)) * 1000).toFixed(0)} commands/s`);
      }
    }),
  );
} finally {
  agent.kill("SIGTERM");
  server.kill("SIGTERM");
  await new Promise((r) => setTimeout(r, 500));
  rmSync(dir, { recursive: true, force: true });
}
