// Issue 38 items 1 and 10 with a real server and a real agent on loopback:
// an oversized submit is refused at SubmitCommand and SubmitJob while the
// agent stays on its session and runs the next command; an admin ends a
// command stuck on an agent that is gone and forgets its client; a script
// too large to run is refused as invalid (exit 65) whatever its size, never
// "temporarily refused, try again" (75).
import { closeSync, ftruncateSync, openSync, writeFileSync, writeSync } from "node:fs";
import * as path from "node:path";
import { ConnectError, Code as ConnectCode } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { EXIT } from "../../../client/exit-codes.js";
import { MAX_SCRIPT_BYTES, MAX_SPEC_STRING_BYTES, MiB } from "../../../core/limits.js";
import { cli } from "../../cli/helpers.js";
import { cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, tempDir, waitFor } from "./helpers.js";

const invalidArgument = (message: string) => (e: unknown) =>
  e instanceof ConnectError && e.code === ConnectCode.InvalidArgument && e.rawMessage.includes(message);

/** A script file of `size` bytes that starts with a #! line (the rest sparse zeros). */
function scriptFile(dir: string, name: string, size: number): string {
  const file = path.join(dir, name);
  const fd = openSync(file, "w");
  writeSync(fd, "#!/bin/sh\n");
  ftruncateSync(fd, size);
  closeSync(fd);
  return file;
}

describe("e2e: admission limits at the server (issue 38 items 1 and 10)", () => {
  afterAll(cleanupTemp);

  it("R-T2 R-D4: a 2 MiB argv item is refused at SubmitCommand and SubmitJob; the agent keeps its session and runs the next command", async () => {
    const s = await startServer();
    const agent = await startAgent(s.url, "adm-1");
    try {
      await waitFor("agent connected", () => agent.connected);
      const generation = async () => (await s.client.listClients({})).clients.find((c) => c.clientId === "adm-1")!.generation;
      const before = await generation();
      const huge = { case: "argv" as const, value: { argv: ["echo", "x".repeat(2 * MiB)] } };
      const figure = `argv[1] is ${2 * MiB} bytes; the limit is ${MAX_SPEC_STRING_BYTES}`;
      await expect(s.client.submitCommand({ clientId: "adm-1", issueUuid: "huge", program: huge })).rejects.toSatisfy(invalidArgument(figure));
      await expect(s.client.submitJob({ clientIds: ["adm-1"], jobId: "huge-job", program: huge })).rejects.toSatisfy(invalidArgument(figure));
      expect((await s.client.listCommands({})).commands).toEqual([]);
      // The agent was never sent anything it cannot take: same session, and the next command runs.
      const next = await s.client.submitCommand({ clientId: "adm-1", issueUuid: "next", program: { case: "argv", value: { argv: ["echo", "hi"] } } });
      expect(next.command?.issueUuid).toBe("next");
      await waitFor("next succeeded", async () => (await s.client.getCommand({ issueUuid: "next" })).command?.state === L.SUCCEEDED);
      expect(agent.connected).toBe(true);
      expect(await generation()).toBe(before);
    } finally {
      await agent.close({ killProcesses: true });
      await s.close();
    }
  });

  it("R-D11 R-F6: an admin force-cancels a command left running on an agent that is gone, then forgets the client with a queued command", async () => {
    const work = await tempDir("rvbox-admission-");
    const s = await startServer();
    const agent = await startAgent(s.url, "adm-2");
    const env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") };
    writeFileSync(path.join(work, "token"), `${OPERATOR_TOKEN}\n`);
    try {
      await waitFor("agent connected", () => agent.connected);
      await s.client.submitCommand({ clientId: "adm-2", issueUuid: "long", program: { case: "argv", value: { argv: ["sleep", "600"] } } });
      await waitFor("running", async () => (await s.client.getCommand({ issueUuid: "long" })).command?.state === L.RUNNING);
    } finally {
      await agent.close({ killProcesses: true });
    }
    try {
      await waitFor("agent offline", async () => !(await s.client.listClients({})).clients.find((c) => c.clientId === "adm-2")?.connected);
      // Nobody will ever answer for it: a plain cancel leaves it running, a forced one ends it.
      const plain = await cli(["cancel", "long"], { env });
      expect(plain.code).toBe(0);
      expect((await s.client.getCommand({ issueUuid: "long" })).command?.state).toBe(L.RUNNING);
      const forced = await cli(["cancel", "--force", "long"], { env });
      expect([forced.code, forced.stdout.trim()]).toEqual([0, expect.stringMatching(/^long ended cancelled \(revision \d+\)$/)]);
      const ended = (await s.client.getCommand({ issueUuid: "long" })).command!;
      expect(ended.state).toBe(L.CANCELLED);
      expect(ended.reason).toContain("force-cancelled (cancel) by an admin while running");
      const incidents = (await s.client.listIncidents({})).incidents;
      expect(incidents.map((i) => [i.issueUuid, i.kind])).toEqual([["long", "force_cancelled"]]);
      // A queued command no longer stops forgetting the client: it ends cancelled.
      await s.client.submitCommand({ clientId: "adm-2", issueUuid: "waiting", program: { case: "argv", value: { argv: ["true"] } } });
      const forget = await cli(["forget-client", "adm-2"], { env });
      expect([forget.code, forget.stdout.trim()]).toEqual([0, "client adm-2 forgotten (1 non-terminal command ended cancelled)"]);
      expect((await s.client.getCommand({ issueUuid: "waiting" })).command?.state).toBe(L.CANCELLED);
      expect((await s.client.listClients({})).clients).toEqual([]);
    } finally {
      await s.close();
    }
  });

  it('a script over the limit is refused as too large (65) at 17 MB and at 100 MB, as the server would, never "try again" (75)', async () => {
    const work = await tempDir("rvbox-admission-script-");
    const s = await startServer();
    const env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") };
    writeFileSync(path.join(work, "token"), `${OPERATOR_TOKEN}\n`);
    try {
      for (const size of [17_000_000, 100_000_000]) {
        const file = scriptFile(work, `s-${size}`, size);
        const r = await cli(["run", "adm-3", "--allow-unknown-client", "--script", file], { env });
        expect([r.code, r.stderr.trim()], `${size} bytes`).toEqual([
          EXIT.INVALID,
          expect.stringContaining(`refused: --script ${file} is ${size} bytes; the limit is ${MAX_SCRIPT_BYTES}`),
        ]);
      }
      expect((await s.client.listCommands({})).commands).toEqual([]);
    } finally {
      await s.close();
    }
  });
});
