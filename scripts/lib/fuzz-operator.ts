// The control fuzzer's well-behaved operator (the admin: submit `echo` to the
// web agent, follow it to the end, check its output and exit code, find it
// in ListCommands) and the checks after the run: the admin's accepted calls
// are all in the audit log, every agent is connected and runs a command.
import { performance } from "node:perf_hooks";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { ControlClient } from "../../client/control-client.js";
import { CommandLifecycle as L, OutputStream } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { Command } from "../../protos/gen/rvbox/v1/control_pb.js";

export interface WellBehaved {
  iterations: number;
  failures: string[];
  latenciesMs: number[];
}

/** FollowOutput to the end: stdout as text and the `finished` command. */
async function followToEnd(client: ControlClient, uuid: string, signal: AbortSignal): Promise<{ stdout: string; finished?: Command }> {
  let stdout = "";
  for await (const m of client.followOutput({ issueUuid: uuid, follow: true, fromEventSeq: 1n }, { signal })) {
    if (m.item.case === "output" && m.item.value.stream === OutputStream.STDOUT) stdout += Buffer.from(m.item.value.data).toString();
    if (m.item.case === "finished") return { stdout, finished: m.item.value };
  }
  return { stdout };
}

/** Why one echo round trip went wrong, or null when it went right. */
async function oneRound(client: ControlClient, web: string, uuid: string, word: string, signal: AbortSignal, accepted: string[]): Promise<string | null> {
  await client.submitCommand({ clientId: web, issueUuid: uuid, program: { case: "argv", value: { argv: ["echo", word] } } }, { signal });
  accepted.push(uuid);
  const got = await followToEnd(client, uuid, signal);
  if (!got.finished) return "FollowOutput ended without `finished`";
  const f = got.finished;
  if (f.state !== L.SUCCEEDED || f.exitCode !== 0) return `ended ${L[f.state]} exit ${f.exitCode ?? "-"} (${f.reason})`;
  if (got.stdout !== `${word}\n`) return `stdout ${JSON.stringify(got.stdout.slice(0, 80))}, expected ${JSON.stringify(`${word}\n`)}`;
  return (await listed(client, web, uuid, f, signal)) ? null : "not in ListCommands";
}

/** Whether ListCommands (newest first, pages of 100) lists the command, paging on only while it lists newer ones. */
async function listed(client: ControlClient, web: string, uuid: string, cmd: Command, signal: AbortSignal): Promise<boolean> {
  const created = timestampMs(cmd.createdTime!);
  let pageToken = "";
  for (let page = 0; page < 50; page++) {
    const list = await client.listCommands({ clientId: web, pageSize: 100, pageToken }, { signal });
    if (list.commands.some((c) => c.issueUuid === uuid)) return true;
    const oldest = list.commands.at(-1);
    if (!list.nextPageToken || !oldest?.createdTime || timestampMs(oldest.createdTime) < created) return false;
    pageToken = list.nextPageToken;
  }
  return false;
}

export interface WellBehavedOptions {
  client: ControlClient;
  web: string;
  seed: number;
  /** Epoch ms: no iteration starts after it. */
  deadline: number;
  /** An iteration not done within this is a failure (the loop then goes on). */
  iterationTimeoutMs: number;
  /** Issue UUIDs the admin had accepted (the audit log must keep them). */
  accepted: string[];
}

export async function wellBehavedLoop(o: WellBehavedOptions): Promise<WellBehaved> {
  const r: WellBehaved = { iterations: 0, failures: [], latenciesMs: [] };
  for (let i = 1; Date.now() < o.deadline; i++) {
    const uuid = `wb-${o.seed}-${i}`;
    const t0 = performance.now();
    r.iterations++;
    try {
      const signal = AbortSignal.timeout(o.iterationTimeoutMs);
      const why = await oneRound(o.client, o.web, uuid, `fuzz-ok-${i}`, signal, o.accepted);
      if (why) r.failures.push(`${uuid}: ${why}`);
      else r.latenciesMs.push(performance.now() - t0);
    } catch (err) {
      r.failures.push(`${uuid}: ${(err as Error).message}`);
    }
  }
  return r;
}

/**
 * The admin's accepted SubmitCommands missing from ListAudit (by issue UUID),
 * and whether their absence is explained: accepted entries are evicted only
 * by newer accepted entries, so an entry may be missing only once the log
 * holds its whole bound of accepted entries (`full`) and no more are missing
 * than were dropped. Refused calls are kept apart and never take that room.
 */
export async function missingFromAudit(
  admin: ControlClient,
  operator: string,
  uuids: string[],
  auditMax: number,
): Promise<{ missing: string[]; dropped: number; full: boolean }> {
  const res = await admin.listAudit({ operator, limit: 0 }, { timeoutMs: 30_000 });
  if (res.matched > BigInt(res.entries.length))
    throw new Error(`${res.matched} entries of ${operator}, more than one ListAudit page (${res.entries.length}): not all could be checked`);
  const seen = new Set<string>();
  for (const e of res.entries) {
    if (e.rpc !== "SubmitCommand" || e.result !== "OK") continue;
    for (const word of e.summary.split(" ")) if (word.startsWith("id=")) seen.add(word.slice(3));
  }
  // The log's room is taken by calls access let through (an access refusal in it, as before issue 38, is not).
  const all = await admin.listAudit({ limit: 0 }, { timeoutMs: 30_000 });
  const admitted = all.entries.filter((e) => e.result !== "PERMISSION_DENIED" && e.result !== "UNAUTHENTICATED").length;
  return { missing: uuids.filter((u) => !seen.has(u)), dropped: Number(res.droppedEntries), full: admitted >= auditMax };
}

/** Per agent: null when it is connected and runs `echo`, otherwise why not. */
export async function probeAgents(
  admin: ControlClient,
  ids: string[],
  seed: number,
  timeoutMs: number,
  accepted: string[],
): Promise<Record<string, string | null>> {
  const out: Record<string, string | null> = {};
  const clients = (await admin.listClients({}, { timeoutMs })).clients;
  await Promise.all(
    ids.map(async (id) => {
      if (!clients.find((c) => c.clientId === id)?.connected) return void (out[id] = "not connected");
      try {
        const why = await oneRound(admin, id, `probe-${seed}-${id}`, `probe-${id}`, AbortSignal.timeout(timeoutMs), accepted);
        out[id] = why;
      } catch (err) {
        out[id] = (err as Error).message;
      }
    }),
  );
  return out;
}
