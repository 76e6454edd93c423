// Client labels and label selectors (core/server/labels.ts) and the
// set_labels control op: what an operator sees in the reply, the stored
// client row and a restart.
import { describe, expect, it } from "vitest";
import { Code } from "../../../core/errors.js";
import { restoreServer } from "../../../core/index.js";
import { MAX_LABELS_PER_CLIENT, MAX_LABEL_KEY_CHARS, MAX_LABEL_VALUE_CHARS, MAX_SELECTOR_CHARS, MAX_SELECTOR_TERMS } from "../../../core/limits.js";
import {
  applyLabelChanges,
  formatLabels,
  formatSelector,
  labelsError,
  matchesSelector,
  parseLabelEdits,
  parseSelector,
  unmetRequirements,
  type Labels,
  type Selector,
} from "../../../core/server/labels.js";
import { rowOf } from "../../../core/server/store.js";
import { ServerRig } from "../../support/server-rig.js";

const sel = (text: string): Selector => {
  const r = parseSelector(text);
  if (!r.ok) throw new Error(r.error.message);
  return r.value;
};
const refusal = (text: string): string => {
  const r = parseSelector(text);
  expect(r.ok, text).toBe(false);
  if (r.ok) return "";
  expect(r.error.code).toBe(Code.VALIDATION);
  return r.error.message;
};

describe("label selectors", () => {
  const web: Labels = { role: "web", zone: "eu-1" };
  const db: Labels = { role: "db" };
  const none: Labels = {};

  it("k=v and k==v need the label with that value", () => {
    expect(sel("role=web")).toEqual([{ op: "eq", key: "role", value: "web" }]);
    expect(sel("role==web")).toEqual(sel("role=web"));
    expect(matchesSelector(web, sel("role=web"))).toBe(true);
    expect(matchesSelector(db, sel("role=web"))).toBe(false);
    expect(matchesSelector(none, sel("role=web"))).toBe(false);
  });

  it("k!=v matches a missing label too (as in Kubernetes)", () => {
    expect(matchesSelector(web, sel("role!=db"))).toBe(true);
    expect(matchesSelector(db, sel("role!=db"))).toBe(false);
    expect(matchesSelector(none, sel("role!=db"))).toBe(true);
  });

  it("k needs the label, !k its absence", () => {
    expect(matchesSelector(web, sel("zone"))).toBe(true);
    expect(matchesSelector(db, sel("zone"))).toBe(false);
    expect(matchesSelector(db, sel("!zone"))).toBe(true);
    expect(matchesSelector(web, sel("!zone"))).toBe(false);
  });

  it("a comma is AND; whitespace around terms and operators is ignored; the empty selector matches all", () => {
    expect(matchesSelector(web, sel("role=web, zone=eu-1"))).toBe(true);
    expect(matchesSelector(web, sel("role=web,zone=eu-2"))).toBe(false);
    expect(sel(" role = web ,zone ")).toEqual([
      { op: "eq", key: "role", value: "web" },
      { op: "exists", key: "zone" },
    ]);
    expect(sel("")).toEqual([]);
    expect(sel("   ")).toEqual([]);
    for (const l of [web, db, none]) expect(matchesSelector(l, [])).toBe(true);
  });

  it("formatSelector writes what parseSelector reads back", () => {
    for (const t of ["role=web", "role!=db,zone", "!gpu,tier=1,a.b/c-d=X_y.z"]) expect(sel(formatSelector(sel(t)))).toEqual(sel(t));
    expect(formatSelector(sel("role == web , !gpu"))).toBe("role=web,!gpu");
  });

  it("unmetRequirements names the terms a client fails", () => {
    expect(unmetRequirements(db, sel("role=web,!zone"))).toEqual([{ op: "eq", key: "role", value: "web" }]);
    expect(unmetRequirements(web, sel("role=web"))).toEqual([]);
  });

  it("malformed selectors are CODE_VALIDATION values naming the bad term", () => {
    expect(refusal("role=web,,zone")).toContain("empty term");
    expect(refusal("Role=web")).toContain('"Role"');
    expect(refusal("role=")).toContain("role");
    expect(refusal("role=w e b")).toContain("w e b");
    expect(refusal("=web")).toContain("label key");
    expect(refusal("role!=")).toContain("role");
    expect(refusal("!")).toContain("label key");
    expect(refusal("role=a=b")).toContain('"a=b"');
    expect(refusal("x".repeat(MAX_SELECTOR_CHARS + 1))).toContain(`at most ${MAX_SELECTOR_CHARS}`);
    expect(refusal(Array.from({ length: MAX_SELECTOR_TERMS + 1 }, (_, i) => `k${i}`).join(","))).toContain(`at most ${MAX_SELECTOR_TERMS}`);
    expect(sel(Array.from({ length: MAX_SELECTOR_TERMS }, (_, i) => `k${i}`).join(","))).toHaveLength(MAX_SELECTOR_TERMS);
  });
});

describe("label keys, values and edits", () => {
  it("keys: [a-z0-9] first, then [a-z0-9._/-], at most MAX_LABEL_KEY_CHARS; values likewise with upper case", () => {
    expect(labelsError({ "k8s.io/role": "Web_1.x-y" })).toBeNull();
    expect(labelsError({ ["k".repeat(MAX_LABEL_KEY_CHARS)]: "v".repeat(MAX_LABEL_VALUE_CHARS) })).toBeNull();
    expect(labelsError({ ["k".repeat(MAX_LABEL_KEY_CHARS + 1)]: "v" })).toContain("label key");
    expect(labelsError({ k: "v".repeat(MAX_LABEL_VALUE_CHARS + 1) })).toContain("value");
    expect(labelsError({ "-k": "v" })).toContain("label key");
    expect(labelsError({ k: "-v" })).toContain("value");
    expect(labelsError({ k: "" })).toContain("value");
  });

  it("parseLabelEdits: k=v sets, k- removes, anything else is refused", () => {
    expect(parseLabelEdits(["role=web", "zone-"])).toEqual({ ok: true, value: { set: { role: "web" }, remove: ["zone"] } });
    expect(parseLabelEdits([])).toEqual({ ok: true, value: { set: {}, remove: [] } });
    for (const bad of [["role"], ["-"], ["role=web", "role-"], ["role=a", "role=b"], ["Role=x"]]) {
      const r = parseLabelEdits(bad);
      expect(r.ok, bad.join(" ")).toBe(false);
    }
  });

  it("applyLabelChanges: removes, then sets, in key order; refuses a result over MAX_LABELS_PER_CLIENT whole", () => {
    const r = applyLabelChanges({ zone: "eu-1", role: "db" }, { role: "web", a: "1" }, ["zone", "absent"]);
    expect(r).toEqual({ ok: true, value: { a: "1", role: "web" } });
    expect(Object.keys(r.ok ? r.value : {})).toEqual(["a", "role"]);
    const full = Object.fromEntries(Array.from({ length: MAX_LABELS_PER_CLIENT }, (_, i) => [`k${i}`, "v"]));
    expect(applyLabelChanges({}, full, []).ok).toBe(true);
    const over = applyLabelChanges(full, { extra: "v" }, []);
    expect(over.ok).toBe(false);
    expect(!over.ok && over.error.message).toContain(`at most ${MAX_LABELS_PER_CLIENT}`);
    expect(applyLabelChanges(full, { extra: "v" }, ["k0"]).ok).toBe(true);
  });

  it("each refusal says what is wrong with which label, in the operator's terms", () => {
    const keyError = (k: string) => `label key ${JSON.stringify(k)} must be 1-${MAX_LABEL_KEY_CHARS} characters of [a-z0-9._/-], starting with [a-z0-9]`;
    const edits = (args: string[]) => {
      const r = parseLabelEdits(args);
      return r.ok ? r.value : r.error.message;
    };
    expect(edits(["role"])).toBe('"role": give key=value to set a label or key- to remove one');
    expect(edits(["-"])).toBe('"-": give key=value to set a label or key- to remove one');
    expect(edits(["=web"])).toBe(keyError(""));
    expect(edits(["Zone-"])).toBe(keyError("Zone"));
    expect(edits(["role=a", "role=b"])).toBe("label role is given twice with different values");
    expect(edits(["role=web", "role-"])).toBe("label role is both set and removed");
    // The same edit twice is one edit.
    expect(edits(["role=a", "role=a", "zone-", "zone-"])).toEqual({ set: { role: "a" }, remove: ["zone"] });
    const change = applyLabelChanges({}, { role: "web" }, ["role"]);
    expect(!change.ok && change.error.message).toBe("label role is both set and removed in one request");
    // Keys and values are checked whole, not by their first characters.
    for (const k of ["ab C", "a:b", "role!"]) expect(labelsError({ [k]: "v" })).toBe(keyError(k));
    expect(labelsError({ a: "1", b: "x y" })).toBe(
      `label b: value "x y" must be 1-${MAX_LABEL_VALUE_CHARS} characters of [A-Za-z0-9._-], starting with [A-Za-z0-9]`,
    );
    const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
    expect(labelsError(many(MAX_LABELS_PER_CLIENT))).toBeNull();
    expect(labelsError(many(MAX_LABELS_PER_CLIENT + 1))).toBe(`${MAX_LABELS_PER_CLIENT + 1} labels; a client has at most ${MAX_LABELS_PER_CLIENT}`);
  });

  it("selector terms whose key is empty or invalid are refused naming that key; a selector of exactly MAX_SELECTOR_CHARS is judged by its terms", () => {
    const keyError = (k: string) => `label key ${JSON.stringify(k)} must be 1-${MAX_LABEL_KEY_CHARS} characters of [a-z0-9._/-], starting with [a-z0-9]`;
    expect(refusal("=web")).toBe(`selector term "=web": ${keyError("")}`);
    expect(refusal("!=web")).toBe(`selector term "!=web": ${keyError("")}`);
    expect(refusal("Role!=web")).toBe(`selector term "Role!=web": ${keyError("Role")}`);
    expect(refusal("k".repeat(MAX_SELECTOR_CHARS))).toBe(`selector term "${"k".repeat(MAX_SELECTOR_CHARS)}": ${keyError("k".repeat(MAX_SELECTOR_CHARS))}`);
    expect(refusal("k".repeat(MAX_SELECTOR_CHARS + 1))).toBe(`selector is ${MAX_SELECTOR_CHARS + 1} characters; at most ${MAX_SELECTOR_CHARS}`);
  });

  it("formatLabels: k=v in key order, empty for none", () => {
    expect(formatLabels({ zone: "eu-1", role: "web" })).toBe("role=web,zone=eu-1");
    expect(formatLabels({})).toBe("");
  });
});

const label = (r: ServerRig, clientId: string, set: Labels, remove: string[] = [], requestId = `label-${r.now}-${Math.random()}`) =>
  r.control({ op: "set_labels", requestId, clientId, set, remove });

describe("set_labels (the server's record is authoritative)", () => {
  it("an operator's labels are in the reply, the client record and its stored row", () => {
    const r = new ServerRig();
    r.connect("web-1");
    expect(label(r, "web-1", { role: "web", zone: "eu-1" })).toEqual({ ok: true, labels: { role: "web", zone: "eu-1" } });
    expect(r.client("web-1")!.labels).toEqual({ role: "web", zone: "eu-1" });
    expect(rowOf(r.disk.durable, "client", "web-1")!.labels).toEqual({ role: "web", zone: "eu-1" });
    expect(label(r, "web-1", { zone: "eu-2" }, ["role"])).toEqual({ ok: true, labels: { zone: "eu-2" } });
    // Removing every label stores the row an unlabelled client had (no field).
    expect(label(r, "web-1", {}, ["zone"])).toEqual({ ok: true, labels: {} });
    expect(rowOf(r.disk.durable, "client", "web-1")).not.toHaveProperty("labels");
  });

  it("the reply waits for the persist: nothing answers before the client row is durable", () => {
    const r = new ServerRig();
    r.connect("a");
    r.autoDurable = false;
    const out = r.step({ type: "control", request: { op: "set_labels", requestId: "l1", clientId: "a", set: { role: "web" }, remove: [] } });
    expect(out.filter((e) => e.type === "reply")).toEqual([]);
    expect(out.some((e) => e.type === "persist" && e.records.some((x) => x.table === "client" && x.key === "a"))).toBe(true);
    expect(rowOf(r.disk.durable, "client", "a")?.labels).toBeUndefined();
    const after = r.flush();
    expect(after.filter((e) => e.type === "reply")).toEqual([{ type: "reply", requestId: "l1", result: { ok: true, labels: { role: "web" } } }]);
    expect(rowOf(r.disk.durable, "client", "a")!.labels).toEqual({ role: "web" });
  });

  it("labels survive a restart and a re-registration; a row written before labels restores as none", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.connect("b");
    label(r, "a", { role: "web" });
    r.step({ type: "conn_closed", conn: a, reason: "agent restarted" });
    r.connect("a");
    expect(r.client("a")!.labels).toEqual({ role: "web" });
    const back = restoreServer(r.cfg, r.disk.tables(), 2);
    expect(back.clients.get("a")!.labels).toEqual({ role: "web" });
    expect(back.clients.get("b")!.labels).toEqual({});
    expect(rowOf(r.disk.durable, "client", "b")).not.toHaveProperty("labels");
  });

  it("changing one label's value while another stays is a change: persisted, answered with the new labels", () => {
    const r = new ServerRig();
    r.connect("web-1");
    label(r, "web-1", { role: "web", zone: "eu" });
    const persists = r.log.filter((e) => e.type === "persist").length;
    expect(label(r, "web-1", { role: "db" })).toEqual({ ok: true, labels: { role: "db", zone: "eu" } });
    expect(r.log.filter((e) => e.type === "persist").length).toBe(persists + 1);
    expect(rowOf(r.disk.durable, "client", "web-1")!.labels).toEqual({ role: "db", zone: "eu" });
    // A refusal names the client.
    expect(label(r, "web-1", { Role: "x" })).toEqual({
      ok: false,
      error: {
        code: Code.VALIDATION,
        message: `client web-1: label key "Role" must be 1-${MAX_LABEL_KEY_CHARS} characters of [a-z0-9._/-], starting with [a-z0-9]`,
      },
    });
  });

  it("an unknown client is NOT_FOUND with a did-you-mean; invalid edits are refused whole and change nothing", () => {
    const r = new ServerRig();
    r.connect("web-1");
    label(r, "web-1", { role: "web" });
    const miss = label(r, "web-2x", { role: "web" });
    expect(miss).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND } });
    expect(miss!.ok === false && miss!.error.message).toContain("did you mean web-1");
    const persists = r.log.filter((e) => e.type === "persist").length;
    for (const [set, remove] of [
      [{ Role: "x" }, []],
      [{ role: "" }, []],
      [{ role: "db" }, ["role"]],
      [{}, ["Bad Key"]],
    ] as Array<[Labels, string[]]>) {
      const res = label(r, "web-1", set, remove);
      expect(res).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    }
    expect(r.client("web-1")!.labels).toEqual({ role: "web" });
    // Setting what it has: answered, nothing persisted.
    expect(label(r, "web-1", { role: "web" }, ["absent"])).toEqual({ ok: true, labels: { role: "web" } });
    expect(r.log.filter((e) => e.type === "persist").length).toBe(persists);
  });
});
