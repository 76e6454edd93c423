/**
 * `rvbox demo` (npm start): a local server and two agents with embedded
 * storage under ./.rvbox-demo (fresh each run), a few sample commands through
 * the control API, and what came back. Exits 0 when every sample ended as
 * expected.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { CommandLifecycle, OutputStream, ShellType, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { ControlService } from "../../protos/gen/rvbox/v1/control_pb.js";
import { AgentDaemon } from "../agent/agent-daemon.js";
import { settings } from "../cli/config.js";
import { createLogger, parseLogLevel } from "../runtime/log.js";
import { AgentTokens, OperatorToken } from "../server/auth.js";
import { ServerDaemon } from "../server/server-daemon.js";

const USAGE = `usage: rvbox demo [--dir DIR] [--log-level LEVEL]

Starts a server and two agents (demo-a, demo-b) under DIR (default ./.rvbox-demo,
wiped first), runs sample commands through the control API and prints the results.`;

type Ctl = Client<typeof ControlService>;

async function follow(ctl: Ctl, uuid: string): Promise<{ stdout: string; stderr: string; state: string; exit: string; notes: string[] }> {
  let stdout = "";
  let stderr = "";
  const notes: string[] = [];
  let state = "?";
  let exit = "";
  for await (const m of ctl.followOutput({ issueUuid: uuid, follow: true })) {
    const it = m.item;
    switch (it.case) {
      case "output":
        if (it.value.stream === OutputStream.STDOUT) stdout += Buffer.from(it.value.data).toString();
        else stderr += Buffer.from(it.value.data).toString();
        break;
      case "lifecycle":
        notes.push(`#${m.eventSeq} lifecycle ${CommandLifecycle[it.value.state]}${it.value.reason ? ` (${it.value.reason})` : ""}`);
        break;
      case "stdinAck":
        notes.push(`#${m.eventSeq} stdin ack write_seq=${it.value.writeSeq}${it.value.closed ? " closed" : ""}`);
        break;
      case "signalResult":
        notes.push(`#${m.eventSeq} signal ${SignalKind[it.value.signal]} delivered=${it.value.delivered}`);
        break;
      case "scriptUpload":
        notes.push(`#${m.eventSeq} script upload ${it.value.receivedBytes} bytes${it.value.complete ? " complete" : ""}`);
        break;
      case "truncation":
      case "retention":
      case "incomplete":
        notes.push(`#${m.eventSeq} ${it.case}`);
        break;
      case "finished":
        state = CommandLifecycle[it.value.state] ?? String(it.value.state);
        exit = it.value.exitCode !== undefined ? `exit ${it.value.exitCode}` : it.value.signalName ? it.value.signalName : "";
        break;
    }
  }
  return { stdout, stderr, state, exit, notes };
}

function show(title: string, r: Awaited<ReturnType<typeof follow>>): void {
  console.log(`\n== ${title}`);
  console.log(`   state: ${r.state}${r.exit ? ` (${r.exit})` : ""}`);
  for (const n of r.notes) console.log(`   ${n}`);
  if (r.stdout)
    console.log(
      r.stdout
        .replace(/\n$/, "")
        .split("\n")
        .map((l) => `   stdout| ${l}`)
        .join("\n"),
    );
  if (r.stderr)
    console.log(
      r.stderr
        .replace(/\n$/, "")
        .split("\n")
        .map((l) => `   stderr| ${l}`)
        .join("\n"),
    );
}

/** The demo's flags (its parser's table; shell completion reads it too). */
export const DEMO_OPTIONS = { dir: { type: "string" }, "log-level": { type: "string" } } as const;

export async function demoMain(argv: string[]): Promise<number> {
  const s = settings(argv, DEMO_OPTIONS, USAGE);
  const dir = path.resolve(s.get("dir") ?? ".rvbox-demo");
  const level = parseLogLevel(s.get("log-level"), "warn");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const operator = randomBytes(16).toString("hex");
  const fleet = randomBytes(16).toString("hex");
  writeFileSync(path.join(dir, "operator-token"), `${operator}\n`, { mode: 0o600 });
  writeFileSync(path.join(dir, "agent-tokens"), `* ${fleet}\n`, { mode: 0o600 });

  const server = await ServerDaemon.start({
    listen: { host: "127.0.0.1", port: 0 },
    control: { host: "127.0.0.1", port: 0 },
    dataDir: path.join(dir, "server"),
    agentTokens: AgentTokens.parse(`* ${fleet}\n`),
    operatorToken: new OperatorToken(operator),
    log: createLogger("server", level),
  });
  const url = `ws://127.0.0.1:${server.agentAddress.port}/v1/agent`;
  const agents = await Promise.all(
    ["demo-a", "demo-b"].map((id) =>
      AgentDaemon.start({
        serverUrl: url,
        clientId: id,
        stateDir: path.join(dir, id),
        token: fleet,
        cwd: dir,
        killGraceMs: 2000,
        log: createLogger(`agent ${id}`, level),
      }),
    ),
  );
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${operator}`);
    return next(req);
  };
  const ctl = createClient(
    ControlService,
    createConnectTransport({ baseUrl: `http://127.0.0.1:${server.controlAddress.port}`, httpVersion: "1.1", interceptors: [auth] }),
  );
  console.log(
    `rvbox demo: server ws://127.0.0.1:${server.agentAddress.port}/v1/agent, control http://127.0.0.1:${server.controlAddress.port}, data under ${dir}`,
  );
  let ok = true;
  const expect = (what: string, cond: boolean): void => {
    if (!cond) {
      ok = false;
      console.log(`   !! unexpected: ${what}`);
    }
  };
  try {
    for (let i = 0; i < 200 && !agents.every((a) => a.connected); i++) await new Promise((r) => setTimeout(r, 25));
    const clients = (await ctl.listClients({})).clients;
    console.log(
      `clients: ${clients.map((c) => `${c.clientId} (instance ${c.instanceId.slice(0, 8)}, generation ${c.generation}, ${c.connected ? "connected" : "offline"})`).join(", ")}`,
    );

    // 1. Output from a shell line.
    const c1 = await ctl.submitCommand({
      clientId: "demo-a",
      program: { case: "shell", value: { shell: ShellType.SH, commandLine: 'echo "hello from $(uname -s)"; echo "to stderr" >&2; seq 1 3' } },
    });
    const r1 = await follow(ctl, c1.command!.issueUuid);
    show(`demo-a: sh -c 'echo ...; seq 1 3'`, r1);
    expect("echo succeeded", r1.state === "SUCCEEDED" && r1.stdout.includes("hello from"));

    // 2. Stdin through cat.
    const c2 = await ctl.submitCommand({ clientId: "demo-b", program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true });
    const u2 = c2.command!.issueUuid;
    const f2 = follow(ctl, u2);
    await ctl.writeStdin({ issueUuid: u2, data: Buffer.from("first line"), appendNewline: true });
    await ctl.writeStdin({ issueUuid: u2, data: Buffer.from("second line\n"), appendNewline: false });
    await ctl.closeStdin({ issueUuid: u2 });
    const r2 = await f2;
    show("demo-b: cat, with two stdin writes and a close", r2);
    expect("cat echoed stdin", r2.state === "SUCCEEDED" && r2.stdout === "first line\nsecond line\n");

    // 3. A signal to sleep.
    const c3 = await ctl.submitCommand({ clientId: "demo-a", program: { case: "argv", value: { argv: ["sleep", "30"] } } });
    const u3 = c3.command!.issueUuid;
    for (let i = 0; i < 400; i++) {
      const g = await ctl.getCommand({ issueUuid: u3 });
      if (g.command!.state === CommandLifecycle.RUNNING) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    const sig = await ctl.signalCommand({ issueUuid: u3, signal: SignalKind.TERMINATE });
    const r3 = await follow(ctl, u3);
    show(`demo-a: sleep 30, then SIGTERM (revision ${sig.revision})`, r3);
    expect("sleep cancelled", r3.state === "CANCELLED");

    // 4. An uploaded script.
    const script = Buffer.from('#!/bin/sh\necho "script running as $(id -un) in $(pwd)"\nfor i in 1 2 3; do echo "line $i"; done\necho "done" >&2\nexit 0\n');
    const c4 = await ctl.submitCommand({ clientId: "demo-b", program: { case: "script", value: { content: script, interpreter: "/bin/sh" } } });
    const r4 = await follow(ctl, c4.command!.issueUuid);
    show(`demo-b: uploaded script (${script.length} bytes, SHA-256 checked before launch)`, r4);
    expect("script succeeded", r4.state === "SUCCEEDED" && r4.stdout.includes("line 3"));

    // 5. A failing command.
    const c5 = await ctl.submitCommand({
      clientId: "demo-a",
      program: { case: "shell", value: { shell: ShellType.SH, commandLine: "echo failing on purpose; exit 3" } },
    });
    const r5 = await follow(ctl, c5.command!.issueUuid);
    show("demo-a: exit 3", r5);
    expect("exit 3 failed", r5.state === "FAILED" && r5.exit === "exit 3");

    const list = await ctl.listCommands({});
    console.log(`\n${list.commands.length} commands stored; states: ${list.commands.map((c) => CommandLifecycle[c.state]).join(", ")}`);
  } finally {
    for (const a of agents) await a.close({ killProcesses: true });
    await server.close();
  }
  console.log(ok ? "\ndemo finished: all samples behaved as expected" : "\ndemo finished with unexpected results");
  return ok ? 0 : 1;
}
