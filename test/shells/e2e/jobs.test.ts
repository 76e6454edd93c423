// Jobs with real daemons on loopback: `rvbox run --clients … --max-concurrency
// 2 --max-errors 1 --follow` across 6 agents where two clients fail (start
// order and stop point), and a server kill -9 mid-job after which the job
// completes with no client launched twice and never more than 2 at once.
import { mkdirSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { JobChildPhase } from "../../../protos/gen/rvbox/v1/control_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { cli } from "../../cli/helpers.js";
import {
  cleanupTemp,
  controlClient,
  describeStores,
  FLEET_TOKEN,
  OPERATOR_TOKEN,
  spawnRvbox,
  startAgent,
  startServer,
  tempDir,
  waitFor,
  writeTokenFiles,
  type Child,
  serverArgv,
  fileLines,
} from "./helpers.js";
import { freePort } from "./tcp-proxy.js";

const IDS = ["web-1", "web-2", "web-3", "web-4", "web-5", "web-6"];

/** Agents web-1..6, each in its own working directory. */
async function fleet(url: string, work: string): Promise<{ agents: AgentDaemon[]; dirs: Map<string, string> }> {
  const dirs = new Map<string, string>();
  const agents: AgentDaemon[] = [];
  for (const id of IDS) {
    const d = path.join(work, id);
    mkdirSync(d);
    dirs.set(id, d);
    agents.push(await startAgent(url, id, { cwd: d }));
  }
  await waitFor("agents connected", () => agents.every((a) => a.connected), 30_000);
  return { agents, dirs };
}

const children: Child[] = [];
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
  await cleanupTemp();
});

describe("e2e: jobs", () => {
  it("run --clients --follow under the server's bound of one follow per identity: every client's output still arrives, as the follows before it end", async () => {
    const work = await tempDir("rvbox-jobs-bound-");
    const s = await startServer({ limits: { maxFollowStreamsPerIdentity: 1 } });
    const { agents } = await fleet(s.url, work);
    try {
      writeFileSync(path.join(work, "token"), `${OPERATOR_TOKEN}\n`);
      const r = await cli(
        ["run", "--clients", IDS.join(","), "--max-concurrency", "6", "--follow", "--id", "job-bound", "--shell", "--", "echo hi; sleep 1; echo bye"],
        {
          env: { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") },
        },
      );
      expect(r.code, r.stderr).toBe(0);
      for (const id of IDS) {
        expect(r.stdout).toContain(`${id}: hi\n`);
        expect(r.stdout).toContain(`${id}: bye\n`);
      }
      expect(r.stderr).toContain("the server holds back some output streams");
      expect(r.stderr).toContain("rvbox: job job-bound done: 6 targets: 6 succeeded");
    } finally {
      for (const a of agents) await a.close({ killProcesses: true });
      await s.close();
    }
  }, 90_000);

  it("rvbox cancel JOB: the running children are cancelled, the rest never start, the job ends; a job of one child is cancelled as a job", async () => {
    const work = await tempDir("rvbox-jobs-cancel-");
    const s = await startServer();
    const { agents, dirs } = await fleet(s.url, work);
    const env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") };
    try {
      writeFileSync(path.join(work, "token"), `${OPERATOR_TOKEN}\n`);
      const r = await cli(
        [
          "run",
          "--clients",
          IDS.join(","),
          "--max-concurrency",
          "2",
          "--id",
          "job-cancel",
          "--shell",
          "--",
          "echo ran >> ran.txt; sleep 30; echo finished >> ran.txt",
        ],
        { env },
      );
      expect(r.code, r.stderr).toBe(0);
      await waitFor(
        "two running",
        async () =>
          (await fileLines(path.join(dirs.get("web-2")!, "ran.txt"))).length === 1 && (await fileLines(path.join(dirs.get("web-1")!, "ran.txt"))).length === 1,
        30_000,
      );
      const c = await cli(["cancel", "job-cancel"], { env });
      expect(c.code, c.stderr).toBe(0);
      expect(c.stdout).toBe("cancel requested for job job-cancel: 4 not started, 2 running cancelled\n");
      await waitFor("job ended", async () => (await s.client.getJob({ jobId: "job-cancel" })).job!.endedTime !== undefined, 30_000);
      const job = (await s.client.getJob({ jobId: "job-cancel" })).job!;
      expect(job.stoppedReason).toBe("cancelled by an operator");
      expect(job.children.map((ch) => [ch.clientId, ch.phase, ch.state])).toEqual([
        ["web-1", JobChildPhase.DONE, L.CANCELLED],
        ["web-2", JobChildPhase.DONE, L.CANCELLED],
        ...IDS.slice(2).map((id) => [id, JobChildPhase.CANCELLED, L.CANCELLED]),
      ]);
      for (const [i, id] of IDS.entries()) expect(await fileLines(path.join(dirs.get(id)!, "ran.txt"))).toEqual(i < 2 ? ["ran"] : []);
      const again = await cli(["cancel", "job-cancel"], { env });
      expect(again.code).toBe(0);
      expect(again.stdout).toContain("nothing to cancel");
      // One child: its command's id begins with the job's, but the job's id names the job.
      await cli(["run", "--clients", "web-3", "--id", "job-one", "--", "sleep", "30"], { env });
      await waitFor("job-one.1 running", async () => (await s.client.getCommand({ issueUuid: "job-one.1" })).command?.state === L.RUNNING, 30_000);
      const one = await cli(["cancel", "job-one"], { env });
      expect(one.stdout).toBe("cancel requested for job job-one: 0 not started, 1 running cancelled\n");
      await waitFor("job-one ended", async () => (await s.client.getJob({ jobId: "job-one" })).job!.stoppedReason === "cancelled by an operator", 30_000);
      expect((await cli(["cancel", "no-such-job"], { env })).code).toBe(66);
    } finally {
      for (const a of agents) await a.close({ killProcesses: true });
      await s.close();
    }
  }, 90_000);

  it("run --clients -f --cancel-on-interrupt: Ctrl-C cancels the job and the CLI follows it to its end (130); without the flag Ctrl-C detaches and the job goes on", async () => {
    const work = await tempDir("rvbox-jobs-interrupt-");
    const s = await startServer();
    const { agents, dirs } = await fleet(s.url, work);
    const env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") };
    try {
      writeFileSync(path.join(work, "token"), `${OPERATOR_TOKEN}\n`);
      const script = "echo ran >> ran.txt; echo started; sleep 30";
      const r = await cli(
        ["run", "--clients", "web-1,web-2,web-3", "--max-concurrency", "2", "-f", "--cancel-on-interrupt", "--id", "job-int", "--shell", "--", script],
        {
          env,
          interruptAfterMs: 2500,
        },
      );
      expect(r.code, r.stderr).toBe(130);
      expect(r.stderr).toContain("cancelling job job-int (Ctrl-C again to detach)");
      expect(r.stderr).toContain("rvbox: job job-int done: 3 targets: 2 failed, 1 cancelled (stopped: cancelled by an operator)");
      expect(r.stdout).toContain("web-1: started\n");
      const job = (await s.client.getJob({ jobId: "job-int" })).job!;
      expect(job.children.map((ch) => [ch.clientId, ch.state])).toEqual([
        ["web-1", L.CANCELLED],
        ["web-2", L.CANCELLED],
        ["web-3", L.CANCELLED],
      ]);
      expect(await fileLines(path.join(dirs.get("web-3")!, "ran.txt"))).toEqual([]);
      const d = await cli(["run", "--clients", "web-4", "-f", "--id", "job-detach", "--", "sleep", "30"], { env, interruptAfterMs: 2500 });
      expect(d.code).toBe(130);
      expect(d.stderr).toContain("detached; job job-detach keeps running");
      expect((await s.client.getJob({ jobId: "job-detach" })).job!.endedTime).toBeUndefined();
      await cli(["cancel", "job-detach"], { env });
    } finally {
      for (const a of agents) await a.close({ killProcesses: true });
      await s.close();
    }
  }, 90_000);
});

// A job and its children are stored rows (the job table, each child's command): the
// job's own run and its survival of a server crash, on each store.
describeStores("e2e: jobs", (st) => {
  it("run --clients over 6 agents, --max-concurrency 2 --max-errors 1, two clients fail: start order, stop point, prefixed output, exit 1; run -l", async () => {
    const work = await tempDir("rvbox-jobs-");
    const s = await startServer(await st.fresh());
    const { agents, dirs } = await fleet(s.url, work);
    try {
      writeFileSync(path.join(work, "token"), `${OPERATOR_TOKEN}\n`);
      // web-2 and web-3 fail at once; web-1 runs long enough for both to fail meanwhile.
      for (const id of ["web-2", "web-3"]) writeFileSync(path.join(dirs.get(id)!, "fail"), "");
      writeFileSync(path.join(dirs.get("web-1")!, "slow"), "");
      const script =
        'echo ran >> ran.txt; echo "hello from $(basename $(pwd))"; if [ -e slow ]; then sleep 2; fi; if [ -e fail ]; then echo oops >&2; exit 3; fi; echo bye';
      const r = await cli(
        ["run", "--clients", IDS.join(","), "--max-concurrency", "2", "--max-errors", "1", "--follow", "--id", "job-e2e", "--shell", "--", script],
        { env: { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") } },
      );
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout).toContain("web-1: hello from web-1\n");
      expect(r.stdout).toContain("web-1: bye\n");
      expect(r.stdout).toContain("web-2: hello from web-2\n");
      expect(r.stderr).toContain("web-2: oops\n");
      expect(r.stderr).toContain("web-3: oops\n");
      expect(r.stdout).not.toContain("web-4:");
      expect(r.stderr).toContain(
        "rvbox: job job-e2e done: 6 targets: 1 succeeded, 2 failed, 3 cancelled (stopped: error budget exceeded: 2 failed, max-errors 1)",
      );
      const job = (await s.client.getJob({ jobId: "job-e2e" })).job!;
      expect(job.children.map((c) => [c.clientId, c.phase, c.state, c.exitCode ?? null])).toEqual([
        ["web-1", JobChildPhase.DONE, L.SUCCEEDED, 0],
        ["web-2", JobChildPhase.DONE, L.FAILED, 3],
        ["web-3", JobChildPhase.DONE, L.FAILED, 3],
        ["web-4", JobChildPhase.CANCELLED, L.CANCELLED, null],
        ["web-5", JobChildPhase.CANCELLED, L.CANCELLED, null],
        ["web-6", JobChildPhase.CANCELLED, L.CANCELLED, null],
      ]);
      expect(job.children[3]!.reason).toBe("not started: error budget exceeded: 2 failed, max-errors 1");
      // Start order: web-1 and web-2 at once; web-3 only after web-2 ended.
      const created = job.children.map((c) => (c.createdTime ? timestampMs(c.createdTime) : 0));
      expect(created[2]!).toBeGreaterThanOrEqual(timestampMs(job.children[1]!.endedTime!));
      expect(created[2]!).toBeLessThan(timestampMs(job.children[0]!.endedTime!));
      // Who ran: exactly the three started, once each.
      for (const [i, id] of IDS.entries()) expect(await fileLines(path.join(dirs.get(id)!, "ran.txt"))).toEqual(i < 3 ? ["ran"] : []);
      // The table and the per-client JSON records.
      const t = await cli(["job", "job-e2e"], { env: { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") } });
      expect(t.code).toBe(0);
      expect(t.stdout).toMatch(/^CLIENT\s+STATE\s+EXIT\s+DURATION\s+COMMAND\s+NOTE$/m);
      expect(t.stdout).toMatch(/^web-2\s+failed\s+3\s+/m);
      expect(t.stdout).toMatch(/^web-6\s+cancelled\s+-\s+-\s+-\s+not started: error budget exceeded/m);
      const j = await cli(["job", "job-e2e", "--json"], { env: { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") } });
      const recs = j.stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { client: string; state: string; exitCode: number | null });
      expect(recs.map((x) => [x.client, x.state, x.exitCode])).toEqual([
        ["web-1", "succeeded", 0],
        ["web-2", "failed", 3],
        ["web-3", "failed", 3],
        ["web-4", "cancelled", null],
        ["web-5", "cancelled", null],
        ["web-6", "cancelled", null],
      ]);
      // A typo in a client name: did-you-mean, nothing created.
      const bad = await cli(["run", "--clients", "web-1,wbe-2", "--id", "job-typo", "--", "true"], {
        env: { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") },
      });
      expect(bad.code).toBe(66);
      expect(bad.stderr).toContain("no client wbe-2 has registered with this server; did you mean web-2");
      expect((await s.client.listJobs({})).jobs.map((x) => x.jobId)).toEqual(["job-e2e"]);
      // -l: the clients whose labels match, in id order.
      for (const id of ["web-6", "web-5"]) await s.client.setClientLabels({ clientId: id, set: { role: "db" } });
      const sel = await cli(["run", "-l", "role=db", "--follow", "--id", "job-sel", "--", "echo", "hi"], {
        env: { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: path.join(work, "token") },
      });
      expect(sel.code, sel.stderr).toBe(0);
      expect(sel.stdout.split("\n").sort()).toEqual(["", "web-5: hi", "web-6: hi"]);
      expect((await s.client.getJob({ jobId: "job-sel" })).job!.children.map((c) => c.clientId)).toEqual(["web-5", "web-6"]);
    } finally {
      for (const a of agents) await a.close({ killProcesses: true });
      await s.close();
    }
  }, 90_000);

  it("R-D1: server kill -9 mid-job: after the restart the job completes, no client launched twice, never more than 2 at once", async () => {
    const work = await tempDir("rvbox-jobs-crash-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const data = path.join(work, "server-data");
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const serverArgs = serverArgv({ agentPort, controlPort, data, files }, ...st.flags(await st.fresh()));
    let server = spawnRvbox(serverArgs);
    children.push(server);
    const client = controlClient(`http://127.0.0.1:${controlPort}`);
    await waitFor("server up", async () => (await client.listClients({})) !== undefined, 30_000);
    const { agents, dirs } = await fleet(`ws://127.0.0.1:${agentPort}/v1/agent`, work);
    try {
      const script = "echo start $(date +%s%N) >> runs.txt; sleep 1; echo end $(date +%s%N) >> runs.txt";
      await client.submitJob({
        jobId: "job-crash",
        clientIds: IDS,
        program: { case: "shell", value: { commandLine: script } },
        maxConcurrency: "2",
      });
      // Mid-wave: the first two done, the next ones started.
      await waitFor(
        "two children done",
        async () => (await client.getJob({ jobId: "job-crash" })).job!.children.filter((c) => c.phase === JobChildPhase.DONE).length >= 2,
        30_000,
      );
      server.proc.kill("SIGKILL");
      await server.exited;
      server = spawnRvbox(serverArgs);
      children.push(server);
      await waitFor("server back", async () => (await client.listClients({})) !== undefined, 30_000);
      const job = await waitFor(
        "job ended",
        async () => {
          const j = (await client.getJob({ jobId: "job-crash" })).job!;
          return j.endedTime ? j : null;
        },
        60_000,
        200,
      );
      expect(job.children.map((c) => [c.clientId, c.phase, c.state])).toEqual(IDS.map((id) => [id, JobChildPhase.DONE, L.SUCCEEDED]));
      // Each client launched exactly once; at no instant were more than 2 running.
      const spans: Array<[number, number]> = [];
      for (const id of IDS) {
        const ls = await fileLines(path.join(dirs.get(id)!, "runs.txt"));
        expect(
          ls.filter((l) => l.startsWith("start")),
          id,
        ).toHaveLength(1);
        expect(
          ls.filter((l) => l.startsWith("end")),
          id,
        ).toHaveLength(1);
        spans.push([Number(ls[0]!.split(" ")[1]), Number(ls[1]!.split(" ")[1])]);
      }
      for (const [a] of spans) expect(spans.filter(([b, e]) => b <= a && a < e).length).toBeLessThanOrEqual(2);
    } catch (err) {
      console.log(server.output());
      throw err;
    } finally {
      for (const a of agents) await a.close({ killProcesses: true });
      server.proc.kill("SIGTERM");
      await server.exited;
    }
  }, 120_000);
});
