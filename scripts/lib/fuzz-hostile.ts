// The control fuzzer's hostile input: submits just over and far over the
// agent's argv/env limits, ids of 1 KB..15 MB in every id field, malformed
// request bodies (random bytes, wrong content type, truncated protobuf, an
// oversized body) and odd strings (non-UTF-8 bytes, NUL, escapes, huge
// Unicode). Each kind is one bounded call or a small bounded burst.
import { create, toBinary } from "@bufbuild/protobuf";
import { MAX_ARGV_ITEMS, MAX_ENV_ITEMS, MAX_SPEC_STRING_BYTES } from "../../core/limits.js";
import { SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { SubmitCommandRequestSchema } from "../../protos/gen/rvbox/v1/control_pb.js";
import { refusedFlood, requestIdRace, streamFlood, type HostileCtx } from "./fuzz-streams.js";

const MiB = 1024 * 1024;
/** The largest id the fuzzer sends (the server reads bodies up to 20 MiB). */
export const MAX_FUZZ_ID_BYTES = 15 * MiB;

const argvOf = (argv: string[]) => ({ case: "argv" as const, value: { argv } });

/** Submits as the scoped operator to the web agent: argv/env just over and far over the agent's limits. */
async function oversizedSpec(c: HostileCtx): Promise<void> {
  const what = c.rng.pick(["argv-count", "argv-item", "env-count"] as const);
  if (!c.tally.take(`oversized ${what}`)) return;
  const issueUuid = `hx-${c.seed}-${c.next()}`;
  let argv = ["true"];
  let environment: Array<{ name: string; value: string }> = [];
  if (what === "argv-count") argv = ["true", ...new Array<string>(c.rng.pick([MAX_ARGV_ITEMS, MAX_ARGV_ITEMS * 4, 200_000])).fill("x")];
  if (what === "argv-item") argv = ["echo", "a".repeat(c.rng.pick([MAX_SPEC_STRING_BYTES + 1, 2 * MiB, c.rng.logSize(MiB, MAX_FUZZ_ID_BYTES)]))];
  if (what === "env-count") environment = Array.from({ length: c.rng.pick([MAX_ENV_ITEMS + 1, 50_000]) }, (_, i) => ({ name: `V${i}`, value: "v" }));
  await c.tally.call(() => c.clients.operator.submitCommand({ clientId: c.web, issueUuid, program: argvOf(argv), environment }, c.tally.opts()));
}

/** One id field of 1 KB..15 MB, in a call picked from those that take an id. */
async function oversizedId(c: HostileCtx): Promise<void> {
  const big = "i".repeat(c.rng.logSize(1024, MAX_FUZZ_ID_BYTES));
  const ops = {
    "submit issue_uuid": () => c.clients.operator.submitCommand({ clientId: c.web, issueUuid: big, program: argvOf(["true"]) }, c.tally.opts()),
    "submit client_id": () => c.clients.operator.submitCommand({ clientId: big, program: argvOf(["true"]), allowUnknownClient: true }, c.tally.opts()),
    "submit request_id": () => c.clients.operator.submitCommand({ clientId: c.web, requestId: big, program: argvOf(["true"]) }, c.tally.opts()),
    "get issue_uuid": () => c.clients.viewer.getCommand({ issueUuid: big }, c.tally.opts()),
    "signal issue_uuid": () => c.clients.operator.signalCommand({ issueUuid: big, signal: SignalKind.CANCEL }, c.tally.opts()),
    "job job_id": () => c.clients.operator.submitJob({ jobId: big, clientIds: [c.web], program: argvOf(["true"]) }, c.tally.opts()),
    "get job_id": () => c.clients.viewer.getJob({ jobId: big }, c.tally.opts()),
    "list client_id": () => c.clients.viewer.listCommands({ clientId: big }, c.tally.opts()),
    "follow issue_uuid": async () => {
      for await (const _ of c.clients.viewer.followOutput({ issueUuid: big, follow: false }, c.tally.opts()));
    },
  };
  const op = c.rng.pick(Object.keys(ops) as Array<keyof typeof ops>);
  if (!c.tally.take(`oversized id: ${op}`)) return;
  await c.tally.call(ops[op]);
}

async function post(c: HostileCtx, method: string, body: Uint8Array, contentType: string): Promise<void> {
  try {
    const res = await fetch(`${c.controlUrl}/rvbox.v1.ControlService/${method}`, {
      method: "POST",
      headers: { "content-type": contentType, "connect-protocol-version": "1", authorization: `Bearer ${c.tokens.operator}` },
      body,
      signal: c.tally.signal(),
    });
    const text = await res.text().catch(() => "");
    c.tally.http(res.status, text);
  } catch (err) {
    c.tally.error(err);
  }
}

/** A POST the control API must refuse cleanly: random bytes, a wrong content type, truncated protobuf, junk JSON, a body over the read limit. */
async function malformedBody(c: HostileCtx): Promise<void> {
  const what = c.rng.pick(["random bytes", "wrong content-type", "truncated protobuf", "junk json", "over the read limit", "stream without envelope"] as const);
  if (!c.tally.take(`malformed body: ${what}`)) return;
  const valid = toBinary(
    SubmitCommandRequestSchema,
    create(SubmitCommandRequestSchema, { clientId: c.web, issueUuid: `hx-${c.seed}-${c.next()}`, program: argvOf(["echo", "truncated"]) }),
  );
  const enc = new TextEncoder();
  if (what === "random bytes") return post(c, "SubmitCommand", c.rng.bytes(c.rng.int(1, 4096)), "application/proto");
  if (what === "wrong content-type") return post(c, "SubmitCommand", valid, c.rng.pick(["text/plain", "application/x-www-form-urlencoded", "image/png"]));
  if (what === "truncated protobuf") return post(c, "SubmitCommand", valid.subarray(0, c.rng.int(1, valid.length - 1)), "application/proto");
  if (what === "junk json")
    return post(c, "SubmitCommand", enc.encode(c.rng.pick(['{"clientId": 5', '{"clientId": {"a": []}}', "[[[[[[[[", "null"])), "application/json");
  if (what === "over the read limit") return post(c, "SubmitCommand", new Uint8Array(21 * MiB).fill(0x0a), "application/proto");
  return post(c, "FollowOutput", c.rng.bytes(c.rng.int(1, 64)), "application/connect+proto");
}

/** The string fields an attacker controls, with bytes and characters nobody expects. */
const ODD = ["\ud800", "a\0b", "\x1b]0;pwned\x07\x1b[2J", "\u202eevil", "line\nbreak\r", "💥".repeat(100_000), "../../etc/passwd", "\ufeff", "%s%n%x"];

/** Odd strings in argv, cwd, env and ids; and argv bytes that are not UTF-8 at all (a hand-patched protobuf). */
async function oddStrings(c: HostileCtx): Promise<void> {
  const where = c.rng.pick(["argv", "cwd", "env", "issue_uuid", "client_id", "non-UTF-8 argv"] as const);
  if (!c.tally.take(`odd strings: ${where}`)) return;
  const odd = c.rng.pick(ODD);
  if (where === "non-UTF-8 argv") {
    const req = create(SubmitCommandRequestSchema, { clientId: c.web, issueUuid: `hx-${c.seed}-${c.next()}`, program: argvOf(["printf", "%s", "QQQQ"]) });
    const bin = toBinary(SubmitCommandRequestSchema, req);
    const at = Buffer.from(bin).indexOf("QQQQ");
    bin.set([0xff, 0xfe, 0xc3, 0x28], at);
    return post(c, "SubmitCommand", bin, "application/proto");
  }
  const base = { clientId: c.web, issueUuid: `hx-${c.seed}-${c.next()}`, program: argvOf(["printf", "%s", where === "argv" ? odd : "x"]) };
  if (where === "cwd") Object.assign(base, { cwd: odd });
  if (where === "issue_uuid") base.issueUuid = odd;
  if (where === "client_id") base.clientId = odd;
  const environment = where === "env" ? [{ name: c.rng.pick([odd, "A=B", ""]), value: odd }] : [];
  await c.tally.call(() => c.clients.operator.submitCommand({ ...base, environment }, c.tally.opts()));
}

export const HOSTILE_KINDS = {
  "oversized spec": oversizedSpec,
  "oversized id": oversizedId,
  "malformed body": malformedBody,
  "refused flood": refusedFlood,
  "stream flood": streamFlood,
  "request-id race": requestIdRace,
  "odd strings": oddStrings,
} as const;

export type HostileKind = keyof typeof HOSTILE_KINDS;

/** One hostile worker: picks kinds with its own seeded generator until the run's budget or time is spent. */
export async function hostileWorker(c: HostileCtx, kinds: readonly HostileKind[] = Object.keys(HOSTILE_KINDS) as HostileKind[]): Promise<void> {
  while (!c.tally.over()) {
    await HOSTILE_KINDS[c.rng.pick(kinds)](c);
    await new Promise((r) => setImmediate(r));
  }
}
