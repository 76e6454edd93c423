// The limits of a command spec (core/dispatch/spec-limits.ts), one check for
// both sides: each limit at n (admitted) and n + 1 (refused, naming the limit
// and the figure), the same verdict from the agent's admission and from the
// server's submit, and the bound on the dispatch envelope (R-T2).
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandDispatchSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { ExecutionSpecSchema, type ExecutionSpec } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { toBinary } from "@bufbuild/protobuf";
import { validateSpec } from "../../../core/agent/admission.js";
import { encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { checkDispatchSize, checkSpecLimits, dispatchEnvelopeBound, utf8Length } from "../../../core/dispatch/spec-limits.js";
import { Code } from "../../../core/errors.js";
import { MAX_ARGV_ITEMS, MAX_ENV_ITEMS, MAX_ENVELOPE_BYTES, MAX_SCRIPT_BYTES, MAX_SPEC_STRING_BYTES } from "../../../core/limits.js";
import { AgentRig } from "../agent/rig.js";
import { ServerRig, type SpecInit } from "../../support/server-rig.js";

const spec = (init: SpecInit): ExecutionSpec => create(ExecutionSpecSchema, init) as ExecutionSpec;
const argv = (...a: string[]): SpecInit => ({ program: { case: "argv", value: { argv: a } } });
const script = (over: Record<string, unknown> = {}): SpecInit => ({
  program: { case: "script", value: { sizeBytes: 10n, sha256: new Uint8Array(32), interpreter: "/bin/sh", ...over } },
});
const env = (n: number, value = ""): SpecInit => ({ ...argv("a"), environment: Array.from({ length: n }, (_, i) => ({ name: `V${i}`, value })) });
const x = (n: number): string => "x".repeat(n);
// U+00E9 is 2 UTF-8 bytes, U+1F600 is 4 (a surrogate pair).
const e2 = (n: number): string => "\u00e9".repeat(n);
const L = MAX_SPEC_STRING_BYTES;

/** [name, spec at the limit, spec one past it, the refusal's message]. */
const LIMITS: Array<[string, SpecInit, SpecInit, string]> = [
  [
    "argv items",
    argv(...Array.from({ length: MAX_ARGV_ITEMS }, () => "a")),
    argv(...Array.from({ length: MAX_ARGV_ITEMS + 1 }, () => "a")),
    `argv has ${MAX_ARGV_ITEMS + 1} items; the limit is ${MAX_ARGV_ITEMS}`,
  ],
  ["argv item bytes", argv("a", x(L)), argv("a", x(L + 1)), `argv[1] is ${L + 1} bytes; the limit is ${L}`],
  ["argv item bytes, not characters", argv(e2(L / 2)), argv(`${e2(L / 2)}x`), `argv[0] is ${L + 1} bytes; the limit is ${L}`],
  ["argv item bytes of a surrogate pair", argv(`${x(L - 4)}\u{1F600}`), argv(`${x(L - 3)}\u{1F600}`), `argv[0] is ${L + 1} bytes; the limit is ${L}`],
  [
    "command line bytes",
    { program: { case: "shell", value: { shell: 1, commandLine: x(L) } } },
    { program: { case: "shell", value: { shell: 1, commandLine: x(L + 1) } } },
    `the command line is ${L + 1} bytes; the limit is ${L}`,
  ],
  ["cwd bytes", { ...argv("a"), cwd: x(L) }, { ...argv("a"), cwd: x(L + 1) }, `cwd is ${L + 1} bytes; the limit is ${L}`],
  ["environment variables", env(MAX_ENV_ITEMS), env(MAX_ENV_ITEMS + 1), `the environment has ${MAX_ENV_ITEMS + 1} variables; the limit is ${MAX_ENV_ITEMS}`],
  [
    "environment value bytes",
    { ...argv("a"), environment: [{ name: "A", value: x(L) }] },
    { ...argv("a"), environment: [{ name: "A", value: x(L + 1) }] },
    `the value of environment variable "A" is ${L + 1} bytes; the limit is ${L}`,
  ],
  [
    "environment name bytes",
    { ...argv("a"), environment: [{ name: x(L), value: "" }] },
    { ...argv("a"), environment: [{ name: x(L + 1), value: "" }] },
    `environment variable name "${x(64)}" is ${L + 1} bytes; the limit is ${L}`,
  ],
  [
    "script size",
    script({ sizeBytes: BigInt(MAX_SCRIPT_BYTES) }),
    script({ sizeBytes: BigInt(MAX_SCRIPT_BYTES + 1) }),
    `the script is ${MAX_SCRIPT_BYTES + 1} bytes; the limit is ${MAX_SCRIPT_BYTES}`,
  ],
  ["script interpreter bytes", script({ interpreter: x(L) }), script({ interpreter: x(L + 1) }), `the script interpreter is ${L + 1} bytes; the limit is ${L}`],
  [
    "script args",
    script({ args: Array.from({ length: MAX_ARGV_ITEMS }, () => "a") }),
    script({ args: Array.from({ length: MAX_ARGV_ITEMS + 1 }, () => "a") }),
    `the script has ${MAX_ARGV_ITEMS + 1} args; the limit is ${MAX_ARGV_ITEMS}`,
  ],
  ["script arg bytes", script({ args: [x(L)] }), script({ args: [x(L + 1)] }), `script args[0] is ${L + 1} bytes; the limit is ${L}`],
];

describe("the spec limits both sides check (spec-limits.ts)", () => {
  it("R-D4: each limit admits n and refuses n + 1 with CODE_VALIDATION naming the limit and the figure", () => {
    for (const [name, atLimit, over, message] of LIMITS) {
      expect(checkSpecLimits(spec(atLimit)), `${name} at the limit`).toBeNull();
      expect(checkSpecLimits(spec(over)), `${name} past the limit`).toEqual({ code: Code.VALIDATION, message });
    }
  });

  it("R-D4: the agent's admission and the server's submit give the same verdict for every limit", () => {
    const agent = new AgentRig().st;
    const server = new ServerRig();
    server.store = false;
    let n = 0;
    for (const [name, atLimit, over, message] of LIMITS) {
      if (atLimit.program?.case === "script") continue; // a script submit carries its bytes (control.test.ts)
      expect(validateSpec(agent, spec(over)), name).toEqual({ code: Code.VALIDATION, message });
      expect(server.submit("a", `over-${n++}`, over, { allowUnknownClient: true }), name).toEqual({ ok: false, error: { code: Code.VALIDATION, message } });
      expect(validateSpec(agent, spec(atLimit)), name).toBeNull();
      // (argv plus one 128 KiB string fits one envelope.)
      expect(server.submit("a", `at-${n++}`, atLimit, { allowUnknownClient: true }), name).toMatchObject({ ok: true });
    }
    for (const bad of [argv(), argv(""), argv("a", "b\0"), { ...argv("a"), environment: [{ name: "A=B", value: "" }] }]) {
      const refusal = validateSpec(agent, spec(bad));
      expect(refusal?.code).toBe(Code.VALIDATION);
      expect(server.submit("a", `bad-${n++}`, bad, { allowUnknownClient: true })).toEqual({ ok: false, error: refusal });
    }
  });

  it("counts are refused before any item is looked at: a million argv items cost one comparison", () => {
    const many = { argv: { length: 1_000_000, 0: "a", some: () => expect.unreachable("items walked") } };
    expect(checkSpecLimits({ program: { case: "argv", value: many }, cwd: "", environment: [] } as unknown as ExecutionSpec)).toEqual({
      code: Code.VALIDATION,
      message: `argv has 1000000 items; the limit is ${MAX_ARGV_ITEMS}`,
    });
  });

  it("utf8Length counts what TextEncoder writes", () => {
    for (const s of ["", "abc", "\u00e9", "\u20ac", "\u{1F600}", "a\u{1F600}b\u00e9", "\ud800", "\udc00x", "\ud800\ud800"])
      expect(utf8Length(s), JSON.stringify(s)).toBe(new TextEncoder().encode(s).length);
  });
});

describe("the dispatch must fit one envelope (R-T2)", () => {
  const uuid = "u".repeat(128);
  // The largest spec whose dispatch fits (the bound is monotonic in the spec's size).
  let fits = MAX_ENVELOPE_BYTES - dispatchEnvelopeBound(uuid, 0);
  while (dispatchEnvelopeBound(uuid, fits) > MAX_ENVELOPE_BYTES) fits--;

  it("R-T2: a spec whose dispatch is at the envelope limit is admitted; one byte more is refused, naming both figures", () => {
    expect(checkDispatchSize(uuid, fits)).toBeNull();
    expect(dispatchEnvelopeBound(uuid, fits + 1)).toBeGreaterThan(MAX_ENVELOPE_BYTES);
    expect(checkDispatchSize(uuid, fits + 1)).toEqual({
      code: Code.VALIDATION,
      message: `the command's dispatch would be ${dispatchEnvelopeBound(uuid, fits + 1)} bytes (its spec ${fits + 1}); the limit is ${MAX_ENVELOPE_BYTES}, one envelope (R-T2)`,
    });
  });

  it("R-T2: the bound is never below a real dispatch envelope with the longest fence, revision, times and digest", () => {
    for (const [id, size] of [uuid, "j.1"].flatMap((id) => [0, 100, 127, 128, 16_383, 16_384, 200_000, fits - 100].map((n) => [id, n] as const))) {
      const s = create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["a", x(Math.max(0, size - 8))] } } });
      const specBytes = toBinary(ExecutionSpecSchema, s).length;
      const real = encodeEnvelope(
        { sessionId: "f".repeat(64), generation: Number.MAX_SAFE_INTEGER },
        {
          case: "commandDispatch",
          value: create(CommandDispatchSchema, {
            issueUuid: id,
            commandRevision: 2n ** 64n - 1n,
            targetSessionGeneration: 2n ** 64n - 1n,
            issueTime: { seconds: 253_402_300_799n, nanos: 999_999_999 },
            queueExpiryTime: { seconds: 253_402_300_799n, nanos: 999_999_999 },
            immutableRequestSha256: new Uint8Array(32),
            spec: s,
          }),
        },
      ).length;
      expect(real, `spec of ${specBytes} bytes`).toBeLessThanOrEqual(dispatchEnvelopeBound(id, specBytes));
      expect(dispatchEnvelopeBound(id, specBytes) - real, "and only a few bytes above it").toBeLessThanOrEqual(16);
    }
  });

  it("R-T2: the server refuses a submit whose dispatch would not fit, though each string is within its limit", () => {
    const r = new ServerRig();
    r.store = false;
    const nine = argv(...Array.from({ length: 9 }, () => x(L)));
    const got = r.submit("a", "wide", nine, { allowUnknownClient: true });
    expect(got).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(got && !got.ok && got.error.message).toMatch(
      /^the command's dispatch would be \d+ bytes \(its spec \d+\); the limit is 1048576, one envelope \(R-T2\)$/,
    );
    expect(r.findCommand("wide")).toBeUndefined();
  });
});
