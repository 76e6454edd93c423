// Generates docs/SPEC-COVERAGE.md: every requirement ID of the spec with the
// code that enforces it and the tests whose names carry it. Test names are
// read from the test files, so the document cannot claim a test that does not
// exist; an ID without tests is listed as a gap. `--check` exits 1 when the
// committed document differs from what this script generates now.
//
//   npx tsx scripts/spec-coverage.ts          # rewrite docs/SPEC-COVERAGE.md
//   npx tsx scripts/spec-coverage.ts --check  # verify it is current

import { readdirSync, readFileSync, statSync, writeFileSync, existsSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { execFileSync } from "node:child_process";

const root = resolve(import.meta.dirname, "..");
const specPath = resolve(root, "../shared/spec/requirements.md");
const docPath = join(root, "docs/SPEC-COVERAGE.md");

/** Where each requirement is enforced. Kept by hand; reviewed with the code. */
export const CODE: Record<string, string> = {
  "R-T1": "core/codec/frame-codec.ts `decodeFrame` (text frames refused); shells' socket handlers pass `binary`",
  "R-T2":
    "core/codec/frame-codec.ts `decodeFrame` (size before `fromBinary`); `ws` `maxPayload` in shells/server; core/dispatch/spec-limits.ts `checkDispatchSize` (at submit); core/server/dispatch.ts `sendDispatch` (never sent over the limit)",
  "R-T3":
    "core/server/ingest.ts `handleCommandEvent` (declared size, then `ports.checkCompressed`); shells/zstd/decompress.ts `decompressValidated`; core/agent/scripts.ts `handleScriptChunk`",
  "R-T4":
    "core/codec/version.ts `negotiate`, `SUPPORTED_PROTOCOL` (1.0-1.1), `speaksTerminal`; core/server/registration.ts `register`; agent checks the selection in `onFrame`; core/server/terminal.ts (a 1.1 feature never reaches a 1.0 session: submit refused, dispatch rejected); core/agent/admission.ts `validateSpec`",
  "R-T5":
    "core/codec/frame-codec.ts `decodeFrame` (no payload case -> PROTOCOL_ERROR; unknown fields kept aside, never acted on); agent.proto additions append-only under a minor (test/protos/protos.test.ts `ADDED`); core/server/terminal.ts, core/server/stdin.ts (fields an older peer would ignore are never sent to it)",
  "R-T6": "deploy/nginx/rvbox.conf; shells/server (plain ws behind TLS termination)",
  "R-H1": "core/session/heartbeat.ts `heartbeatDue`; used by agent-session.ts `sessionTick` and server node.ts `tick`",
  "R-H2": "core/session/heartbeat.ts; agent `sessionFail`, server `closeConn` on `dead`",
  "R-H3": "shells (ws ping/pong handled by the ws library, outside the staging queues); core treats pong as `activity`",
  "R-H4": "core/session/backoff.ts `backoffDelay`; core/session/agent-session.ts `enterBackoff`, stable reset in `sessionTick`",
  "R-H5": "core/server/server-types.ts: `ServerEffect` has no connect effect",
  "R-H6":
    "core/session/agent-session.ts (new hello per connection); server registration.ts `register` (generation + 1), `releaseWelcome` (ReconcileRequest of in-flight commands); agent/reconcile.ts `runSnapshotDeferred` (resend pinned)",
  "R-F1": "core/agent/restore.ts `start` (generated once into table meta), `restoreAgent`",
  "R-F2": "core/server/registration.ts `register` (session id from the PRNG, generation persisted), io.ts `send` (fence on every envelope)",
  "R-F3": "core/server/registration.ts `register` (same instance: `closeConn` of the live session)",
  "R-F4": "core/server/registration.ts `register` (IDENTITY_CONFLICT, `pendingClaim` persisted)",
  "R-F5": "core/server/clients.ts `authorize`, `expireAuthorizations` (expiry); registration.ts `register` (consumed)",
  "R-F6": "core/server/registration.ts `register` (no live session: accepted)",
  "R-F7": "core/server/node.ts `onFrame` (fence check); core/agent/node.ts `onFrame` (fenceMatches); admission.ts `handleDispatch` (target generation)",
  "R-D1": "core/server/submit.ts `submit` (persist, `created` only when durable); dispatch.ts `pumpCommands` (redelivery)",
  "R-D2": "core/agent/admission.ts `handleDispatch` (live record + hash; CONFLICT on another hash)",
  "R-D3": "core/agent/admission.ts `handleDispatch` (CAPACITY); core/server/dispatch.ts `handleAccepted` (requeue with jittered backoff)",
  "R-D4":
    "core/dispatch/spec-limits.ts `checkSpecLimits` (both sides); core/agent/admission.ts `validateSpec`; core/server/submit.ts `admitCommand` (refused at submit); core/server/dispatch.ts `handleAccepted` (permanent -> rejected)",
  "R-D5": "core/agent/admission.ts `handleDispatch` (tombstone -> ALREADY_EXECUTED); server `handleAccepted` (interrupted + incident)",
  "R-D6": "core/server/registration.ts `releaseWelcome`, reconcile.ts `reconcileTargets`",
  "R-D7": "core/agent/reconcile.ts `handleReconcileRequest`, `sendSnapshot`, `runSnapshotDeferred` (resend after snapshot)",
  "R-D8":
    "core/server/reconcile.ts `handleSnapshot` (result deferred until durable), `releaseReconcileResult` (phase ready only then); dispatch.ts `pumpCommands` (ready sessions only)",
  "R-D9": "core/reconcile/classify.ts `classify`; applied in server reconcile.ts `handleSnapshot`",
  "R-D10": "core/reconcile/classify.ts `judge` (tombstoned); core/agent/admission.ts `handleDispatch`",
  "R-D11": "core/reconcile/classify.ts; server incidents.ts `openIncident`; agent/reconcile.ts `handleReconcileResult`",
  "R-D12": "core/reconcile/classify.ts (discard); agent/reconcile.ts `handleReconcileResult` (idempotent)",
  "R-D13": "core/agent/reconcile.ts (STORE_INCIDENT instead of a snapshot); admission.ts `handleDispatch`; shells/store recovery",
  "R-O1": "core/window/outbox.ts `appendOutput`/`appendMeta` (entry table), `admit` (event table)",
  "R-O2": "core/window/outbox.ts `admit` (encode once, pin); agent/outbox-ack.ts `sendPinned`; server ingest.ts digest check",
  "R-O3": "core/server/ingest.ts `handleCommandEvent` (ack deferred to durable), `releaseAck`, `sendAcks` (cumulative, coalesced)",
  "R-O4": "core/window/outbox.ts `encodeEntry` (ports.compress, original size); server stores the validated bytes",
  "R-O5": "core/server/retention.ts `addToSegments`, `dropOldestSegment`",
  "R-O6": "core/window/outbox.ts (pinned events are only released by `acknowledge`)",
  "R-O7": "core/window/outbox.ts `enforceBudgets`, `evictOldestOutput`",
  "R-O8": "core/agent/launch.ts `handleExit` (incomplete before lifecycle); shells/exec drain deadline",
  "R-S1": "core/agent/stdin.ts `handleStdinWrite`, `handleStdinWritten`; server stdin.ts `pumpStdin`",
  "R-S2": "core/agent/stdin.ts `handleStdinWrite` (append_newline applied); CLI default in the rvbox CLI",
  "R-S3": "core/agent/stdin.ts `handleCloseStdin`; server stdin.ts `controlStdin` (close_stdin)",
  "R-S4": "core/agent/signals.ts `handleSignal`, launch.ts `handleExit` (cancelRevision); server signals.ts `controlSignal`",
  "R-S5": "core/server/commands.ts `remember` (`requests` map request_id -> revision), used by stdin.ts and signals.ts",
  "R-C1": "core/server/scripts.ts `pumpScript`",
  "R-C2": "core/agent/scripts.ts `handleScriptChunk`, `handleScriptCommit`; launch.ts `launchReady`",
  "R-C3": "core/agent/scripts.ts `handleScriptChunk` (status events); server `pumpScript` (window), `onSessionReady` (resume)",
  "R-C4": "core/agent/finish.ts `finish` callers: script/spawn failures -> rejected, cancel -> cancelled; restore.ts `start` -> interrupted",
  "R-W1": "shells/runtime/node-loop.ts (bounded staging queues, one worker loop running the reducer); shells/server, shells/agent socket handlers only enqueue",
  "R-W2": "core/agent/admission.ts `handleDispatch` (metadata, script tiers); window/outbox.ts (pinned, output tiers)",
  "R-W3": "core/window/outbox.ts `admit`",
  "R-W4": "core/*: lane on every send; shells/runtime/conn-writer.ts (priority lane, bounded frames, write deadlines)",
  "R-W5": "core: `ingress_full` input -> close without ack (both nodes); shells: bounded staging queues",
  "R-W6": "core/window/outbox.ts `appendOutput` (summarizing), `admit` (low watermark)",
  "R-W7": "core/server/ingest.ts `handleCommandEvent` (ingressPending > high -> close)",
  "R-W8": "core/window/outbox.ts `admit` (round-robin)",
  "R-W9": "core/window/outbox.ts `admit` (metadata reserve), `checkOutboxLimits`; agent metadata budget per command",
  "R-W10": "core/codec/frame-codec.ts; both `onFrame`s; shells keep serving other sessions",
  "R-W11": "core: pinned resend, dispatch redelivery, reconcile; sim/ fault campaigns",
};

/**
 * What is still untested for an ID even though a test names it (typically the
 * shell half of a requirement whose core half is tested). Remove an entry
 * when the test for it lands.
 */
const UNTESTED: Record<string, string> = {};

interface Req {
  id: string;
  text: string;
}

function readRequirements(): Req[] {
  const src = existsSync(specPath) ? readFileSync(specPath, "utf8") : readFileSync(docPath, "utf8");
  const out: Req[] = [];
  for (const m of src.matchAll(/^- (R-[A-Z]\d+) (.+)$/gm)) out.push({ id: m[1]!, text: m[2]! });
  if (out.length === 0) {
    // Fall back to the table of the committed document.
    for (const m of src.matchAll(/^\| (R-[A-Z]\d+) \| (.+?) \|/gm)) out.push({ id: m[1]!, text: m[2]! });
  }
  return out;
}

function testFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? testFiles(p) : /\.test\.tsx?$/.test(f) ? [p] : [];
  });
}

/** Tracked test files (what a clean clone has); all files when git is unavailable. */
function trackedTestFiles(): string[] {
  try {
    const out = execFileSync("git", ["ls-files", "test"], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    return out
      .split("\n")
      .filter((f) => /\.test\.tsx?$/.test(f))
      .map((f) => join(root, f))
      .filter((f) => existsSync(f));
  } catch {
    return testFiles(join(root, "test"));
  }
}

function testsById(): Map<string, string[]> {
  const map = new Map<string, string[]>();
  for (const f of trackedTestFiles()) {
    const src = readFileSync(f, "utf8");
    for (const m of src.matchAll(/\bit(?:\.skipIf\([^)]*\))?\(\s*"([^"]*R-[A-Z]\d+[^"]*)"/g)) {
      const name = m[1]!;
      for (const id of name.match(/R-[A-Z]\d+/g) ?? []) {
        const list = map.get(id) ?? [];
        list.push(`${relative(root, f)}: ${name.replace(/\|/g, "\\|")}`);
        map.set(id, list);
      }
    }
  }
  return map;
}

export function generate(): string {
  const reqs = readRequirements();
  const tests = testsById();
  const lines: string[] = [
    "# Spec coverage",
    "",
    "Generated by `npx tsx scripts/spec-coverage.ts` from `../shared/spec/requirements.md` and the",
    "names of the tests (a test names every requirement ID it checks). `test/docs.test.ts` fails when",
    "this file is stale. An ID with no test is a gap and says so.",
    "",
  ];
  const gaps = reqs.filter((r) => !tests.has(r.id));
  const partial = reqs.filter((r) => tests.has(r.id) && UNTESTED[r.id]);
  lines.push(
    `${reqs.length} requirements; ${reqs.length - gaps.length - partial.length} fully covered by tests; ` +
      `${partial.length} partly covered${partial.length ? ` (${partial.map((g) => g.id).join(", ")})` : ""}; ` +
      `${gaps.length} not yet covered${gaps.length ? ` (${gaps.map((g) => g.id).join(", ")})` : ""}.`,
    "",
  );
  lines.push("| ID | requirement | enforced in | tests |", "|---|---|---|---|");
  for (const r of reqs) {
    const t = tests.get(r.id);
    let cell = t ? t.map((x) => x.replace(/^test\//, "")).join("<br>") : "**not yet covered**";
    if (t && UNTESTED[r.id]) cell += `<br>**still untested:** ${UNTESTED[r.id]}`;
    lines.push(`| ${r.id} | ${r.text.replace(/\|/g, "\\|")} | ${CODE[r.id] ?? "**not yet enforced**"} | ${cell} |`);
  }
  return `${lines.join("\n")}\n`;
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith("spec-coverage.ts")) {
  const doc = generate();
  if (process.argv.includes("--check")) {
    const cur = existsSync(docPath) ? readFileSync(docPath, "utf8") : "";
    if (cur !== doc) {
      console.error("docs/SPEC-COVERAGE.md is stale: run `npx tsx scripts/spec-coverage.ts`");
      process.exit(1);
    }
    console.log("docs/SPEC-COVERAGE.md is current");
  } else {
    writeFileSync(docPath, doc);
    console.log(`wrote ${relative(root, docPath)}`);
  }
}
