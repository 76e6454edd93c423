/**
 * Named operator identities (`--identities FILE`): each with its own bearer
 * token, stored only as its SHA-256, and a role. One line per operator:
 *
 *   NAME ROLE sha256:HEX [SELECTOR]
 *
 * NAME: 1-64 characters of [A-Za-z0-9._@-]; ROLE: viewer | operator | admin;
 * SELECTOR (role operator only, required there): the label selector of the
 * clients it may run on (core/server/labels.ts, no spaces). `#` starts a
 * comment. `rvbox server operator add NAME --role R [--selector S] --operators
 * FILE` mints a random token, appends its line and prints the token once.
 *
 * Presented tokens are hashed and compared with every entry's hash in
 * constant time (crypto.timingSafeEqual over equal-length digests; every
 * entry is compared, whichever matches). The legacy single `--operator-token`
 * keeps working as the identity `admin` (role admin).
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { type Selector, parseSelector } from "../../core/index.js";
import { type OperatorToken, bearer } from "./auth.js";

export const ROLES = ["viewer", "operator", "admin"] as const;
export type Role = (typeof ROLES)[number];

/** An identified caller of the control API. */
export interface Identity {
  name: string;
  role: Role;
  /** role operator: the clients it may run on (empty for the other roles). */
  selector: Selector;
  selectorText: string;
}

/** The identity the legacy --operator-token stands for. */
export const LEGACY_ADMIN: Identity = Object.freeze({ name: "admin", role: "admin", selector: [], selectorText: "" });

const NAME_RE = /^[A-Za-z0-9._@-]{1,64}$/;
const HASH_RE = /^sha256:([0-9a-f]{64})$/;

export function tokenHash(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/** A new random token (32 bytes, base64url: 43 characters). */
export function mintToken(): string {
  return randomBytes(32).toString("base64url");
}

/** The line `operator add` appends for an identity with token `token`. */
export function operatorLine(name: string, role: Role, selector: string, token: string): string {
  return `${name} ${role} sha256:${tokenHash(token).toString("hex")}${selector ? ` ${selector}` : ""}`;
}

/** Why (name, role, selector) cannot be an identity (null: it can). */
export function identityError(name: string, role: string, selector: string): string | null {
  if (!NAME_RE.test(name)) return `operator name ${JSON.stringify(name)} must be 1-64 characters of [A-Za-z0-9._@-]`;
  if (!(ROLES as readonly string[]).includes(role)) return `role ${JSON.stringify(role)} must be one of ${ROLES.join(", ")}`;
  if (role === "operator" && selector === "") return `operator ${name}: role operator needs a label selector (the clients it may run on)`;
  if (role !== "operator" && selector !== "") return `operator ${name}: only role operator takes a selector`;
  if (/\s/.test(selector)) return `operator ${name}: the selector may not contain spaces`;
  const p = parseSelector(selector);
  if (!p.ok) return `operator ${name}: ${p.error.message}`;
  return null;
}

export class OperatorIdentities {
  private entries: Array<{ identity: Identity; hash: Buffer }> = [];

  static parse(text: string): OperatorIdentities {
    const ids = new OperatorIdentities();
    const names = new Set<string>();
    let n = 0;
    for (const raw of text.split("\n")) {
      n++;
      const line = raw.replace(/#.*$/, "").trim();
      if (line === "") continue;
      const parts = line.split(/\s+/);
      if (parts.length < 3 || parts.length > 4) throw new Error(`operators line ${n}: expected "NAME ROLE sha256:HEX [SELECTOR]"`);
      const [name, role, hash, selector = ""] = parts as [string, string, string, string?];
      const bad = identityError(name, role, selector);
      if (bad) throw new Error(`operators line ${n}: ${bad}`);
      const m = HASH_RE.exec(hash);
      if (!m) throw new Error(`operators line ${n}: token hash must be sha256: and 64 lowercase hex digits`);
      if (names.has(name)) throw new Error(`operators line ${n}: operator ${name} is listed twice`);
      names.add(name);
      const sel = parseSelector(selector);
      if (!sel.ok) throw new Error(`operators line ${n}: ${sel.error.message}`);
      ids.entries.push({ identity: { name, role: role as Role, selector: sel.value, selectorText: selector }, hash: Buffer.from(m[1]!, "hex") });
    }
    return ids;
  }

  static load(file: string): OperatorIdentities {
    return OperatorIdentities.parse(readFileSync(file, "utf8"));
  }

  get size(): number {
    return this.entries.length;
  }

  get names(): string[] {
    return this.entries.map((e) => e.identity.name);
  }

  /** Take `other`'s identities (a reload): calls already running finish as they started. */
  replaceWith(other: OperatorIdentities): void {
    this.entries = [...other.entries];
  }

  /** The identity a token belongs to, or null. Every entry is compared, in constant time each. */
  check(token: string): Identity | null {
    const d = tokenHash(token);
    let found: Identity | null = null;
    for (const e of this.entries) if (timingSafeEqual(e.hash, d) && found === null) found = e.identity;
    return found;
  }
}

/**
 * Who an `Authorization: Bearer` header is: a named identity, else the
 * legacy operator token's `admin`, else null (refused with 401).
 */
export function identify(header: string | undefined, ids: OperatorIdentities | undefined, legacy: OperatorToken | undefined): Identity | null {
  const t = bearer(header);
  if (t === null) return null;
  const named = ids?.check(t) ?? null;
  if (named) return named;
  return legacy?.check(header) ? LEGACY_ADMIN : null;
}
