// Client labels (role=web, zone=eu-1) and label selectors (Kubernetes'
// equality-based syntax): validation, parsing, matching, formatting. Pure.
// The server's client record holds the authoritative labels (clients.ts
// setLabels); selectors pick clients for listing, jobs and access rules.
//
// Selector syntax: comma-separated terms, all of which must hold (AND):
//   k=v  or  k==v   the label k is present with value v
//   k!=v            k is absent, or present with another value
//   k               k is present (any value)
//   !k              k is absent
// Whitespace around terms and operators is ignored. The empty selector
// matches every client.

import { Code, type Result, fail, ok, unreachable } from "../errors.js";
import { MAX_LABELS_PER_CLIENT, MAX_LABEL_KEY_CHARS, MAX_LABEL_VALUE_CHARS, MAX_SELECTOR_CHARS, MAX_SELECTOR_TERMS } from "../limits.js";
import type { Labels } from "./server-types.js";

/** A client's labels: key -> value (the type lives with ClientRecord in server-types.ts). */
export type { Labels };

export type Requirement =
  | { readonly op: "eq"; readonly key: string; readonly value: string }
  | { readonly op: "neq"; readonly key: string; readonly value: string }
  | { readonly op: "exists"; readonly key: string }
  | { readonly op: "absent"; readonly key: string };

/** Every requirement must hold; empty: matches everything. */
export type Selector = readonly Requirement[];

export const NO_LABELS: Labels = Object.freeze({});

const KEY_RE = /^[a-z0-9][a-z0-9._/-]*$/;
const VALUE_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** Why `key` is not a valid label key (null: it is). */
export function labelKeyError(key: string): string | null {
  if (key.length < 1 || key.length > MAX_LABEL_KEY_CHARS || !KEY_RE.test(key))
    return `label key ${JSON.stringify(key)} must be 1-${MAX_LABEL_KEY_CHARS} characters of [a-z0-9._/-], starting with [a-z0-9]`;
  return null;
}

/** Why `value` is not a valid label value (null: it is). */
export function labelValueError(key: string, value: string): string | null {
  if (value.length < 1 || value.length > MAX_LABEL_VALUE_CHARS || !VALUE_RE.test(value))
    return `label ${key}: value ${JSON.stringify(value)} must be 1-${MAX_LABEL_VALUE_CHARS} characters of [A-Za-z0-9._-], starting with [A-Za-z0-9]`;
  return null;
}

/** Why a set of labels is not valid as a whole (null: it is). */
export function labelsError(labels: Labels): string | null {
  const keys = Object.keys(labels);
  if (keys.length > MAX_LABELS_PER_CLIENT) return `${keys.length} labels; a client has at most ${MAX_LABELS_PER_CLIENT}`;
  for (const k of keys) {
    const e = labelKeyError(k) ?? labelValueError(k, labels[k]!);
    if (e) return e;
  }
  return null;
}

/** `labels` with `set` applied and `remove` removed, validated; a key both set and removed is refused. */
export function applyLabelChanges(labels: Labels, set: Labels, remove: readonly string[]): Result<Labels> {
  for (const k of Object.keys(set)) {
    const e = labelKeyError(k) ?? labelValueError(k, set[k]!);
    if (e) return fail(Code.VALIDATION, e);
  }
  for (const k of remove) {
    const e = labelKeyError(k);
    if (e) return fail(Code.VALIDATION, e);
    if (Object.hasOwn(set, k)) return fail(Code.VALIDATION, `label ${k} is both set and removed in one request`);
  }
  const out: Record<string, string> = { ...labels };
  for (const k of remove) delete out[k];
  for (const k of Object.keys(set)) out[k] = set[k]!;
  const n = Object.keys(out).length;
  if (n > MAX_LABELS_PER_CLIENT) return fail(Code.VALIDATION, `that would leave ${n} labels; a client has at most ${MAX_LABELS_PER_CLIENT}`);
  return ok(sortedLabels(out));
}

/** The same labels with their keys in sorted order (so records and listings do not depend on the order they were set in). */
export function sortedLabels(labels: Labels): Labels {
  const out: Record<string, string> = {};
  for (const k of Object.keys(labels).sort()) out[k] = labels[k]!;
  return out;
}

export function sameLabels(a: Labels, b: Labels): boolean {
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  return ka.every((k) => Object.hasOwn(b, k) && b[k] === a[k]);
}

/**
 * Label edits as an operator types them (rvbox label CLIENT role=web zone-):
 * `k=v` sets, `k-` removes. Validated like a set_labels request.
 */
export function parseLabelEdits(args: readonly string[]): Result<{ set: Labels; remove: string[] }> {
  const set: Record<string, string> = {};
  const remove: string[] = [];
  for (const a of args) {
    const eq = a.indexOf("=");
    if (eq >= 0) {
      const k = a.slice(0, eq);
      const v = a.slice(eq + 1);
      const e = labelKeyError(k) ?? labelValueError(k, v);
      if (e) return fail(Code.VALIDATION, e);
      if (Object.hasOwn(set, k) && set[k] !== v) return fail(Code.VALIDATION, `label ${k} is given twice with different values`);
      set[k] = v;
    } else if (a.endsWith("-") && a.length > 1) {
      const k = a.slice(0, -1);
      const e = labelKeyError(k);
      if (e) return fail(Code.VALIDATION, e);
      if (!remove.includes(k)) remove.push(k);
    } else {
      return fail(Code.VALIDATION, `${JSON.stringify(a)}: give key=value to set a label or key- to remove one`);
    }
  }
  for (const k of remove) if (Object.hasOwn(set, k)) return fail(Code.VALIDATION, `label ${k} is both set and removed`);
  return ok({ set, remove });
}

/** Parse a selector (see the syntax above). Errors are CODE_VALIDATION values naming the bad term. */
export function parseSelector(text: string): Result<Selector> {
  if (text.length > MAX_SELECTOR_CHARS) return fail(Code.VALIDATION, `selector is ${text.length} characters; at most ${MAX_SELECTOR_CHARS}`);
  if (text.trim() === "") return ok([]);
  const terms = text.split(",");
  if (terms.length > MAX_SELECTOR_TERMS) return fail(Code.VALIDATION, `selector has ${terms.length} terms; at most ${MAX_SELECTOR_TERMS}`);
  const out: Requirement[] = [];
  for (const raw of terms) {
    const t = raw.trim();
    if (t === "") return fail(Code.VALIDATION, `selector ${JSON.stringify(text)}: empty term`);
    const r = parseTerm(t);
    if (!r.ok) return fail(Code.VALIDATION, `selector term ${JSON.stringify(t)}: ${r.error.message}`);
    out.push(r.value);
  }
  return ok(out);
}

function parseTerm(t: string): Result<Requirement> {
  const key = (k: string): Result<string> => {
    const e = labelKeyError(k.trim());
    return e ? fail(Code.VALIDATION, e) : ok(k.trim());
  };
  const value = (k: string, v: string): Result<string> => {
    const e = labelValueError(k, v.trim());
    return e ? fail(Code.VALIDATION, e) : ok(v.trim());
  };
  const ne = t.indexOf("!=");
  if (ne >= 0) {
    const k = key(t.slice(0, ne));
    if (!k.ok) return k;
    const v = value(k.value, t.slice(ne + 2));
    return v.ok ? ok({ op: "neq", key: k.value, value: v.value }) : v;
  }
  const eq = t.indexOf("=");
  if (eq >= 0) {
    const k = key(t.slice(0, eq));
    if (!k.ok) return k;
    const rest = t.slice(eq + 1);
    const v = value(k.value, rest.startsWith("=") ? rest.slice(1) : rest);
    return v.ok ? ok({ op: "eq", key: k.value, value: v.value }) : v;
  }
  if (t.startsWith("!")) {
    const k = key(t.slice(1));
    return k.ok ? ok({ op: "absent", key: k.value }) : k;
  }
  const k = key(t);
  return k.ok ? ok({ op: "exists", key: k.value }) : k;
}

function holds(labels: Labels, r: Requirement): boolean {
  const has = Object.hasOwn(labels, r.key);
  switch (r.op) {
    case "eq":
      return has && labels[r.key] === r.value;
    case "neq":
      return !has || labels[r.key] !== r.value;
    case "exists":
      return has;
    case "absent":
      return !has;
    default:
      return unreachable(r, "selector requirement");
  }
}

/** Whether `labels` satisfy every requirement of `selector`. */
export function matchesSelector(labels: Labels, selector: Selector): boolean {
  return selector.every((r) => holds(labels, r));
}

/** The requirements of `selector` that `labels` do not satisfy (for a refusal that names them). */
export function unmetRequirements(labels: Labels, selector: Selector): Requirement[] {
  return selector.filter((r) => !holds(labels, r));
}

export function formatRequirement(r: Requirement): string {
  switch (r.op) {
    case "eq":
      return `${r.key}=${r.value}`;
    case "neq":
      return `${r.key}!=${r.value}`;
    case "exists":
      return r.key;
    case "absent":
      return `!${r.key}`;
    default:
      return unreachable(r, "selector requirement");
  }
}

/** A selector in canonical text (parseSelector reads it back to the same selector); "" for the empty one. */
export function formatSelector(selector: Selector): string {
  return selector.map(formatRequirement).join(",");
}

/** Labels as `k=v,k=v` in key order ("" for none). */
export function formatLabels(labels: Labels): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k]}`)
    .join(",");
}
