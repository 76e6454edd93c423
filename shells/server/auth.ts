/**
 * Bearer tokens. Agents: `--agent-tokens FILE`, one `client_id token` per
 * line, or `* token` for a fleet-wide token; `#` starts a comment. Operators:
 * `--operator-token FILE`, one token per line (several while a token is
 * rotated, or one per operator). Tokens are compared in constant time on their
 * SHA-256. Both sets can be replaced in place (`replaceWith`): the daemon
 * re-reads the files on SIGHUP and keeps using the same objects.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";

export const ANY_CLIENT = "*";

function digest(s: string): Buffer {
  return createHash("sha256").update(s, "utf8").digest();
}

export class AgentTokens {
  private entries: Array<{ clientId: string; token: Buffer }> = [];

  static parse(text: string): AgentTokens {
    const t = new AgentTokens();
    let n = 0;
    for (const raw of text.split("\n")) {
      n++;
      const line = raw.replace(/#.*$/, "").trim();
      if (line === "") continue;
      const parts = line.split(/\s+/);
      if (parts.length !== 2) throw new Error(`agent tokens line ${n}: expected "client_id token" or "* token"`);
      const [clientId, token] = parts as [string, string];
      if (token.length < 8) throw new Error(`agent tokens line ${n}: token shorter than 8 characters`);
      t.add(clientId, token);
    }
    return t;
  }

  static load(file: string): AgentTokens {
    return AgentTokens.parse(readFileSync(file, "utf8"));
  }

  add(clientId: string, token: string): void {
    this.entries.push({ clientId, token: digest(token) });
  }

  get size(): number {
    return this.entries.length;
  }

  /** Take `other`'s tokens (a reload): connections authenticated before stay up. */
  replaceWith(other: AgentTokens): void {
    this.entries = [...other.entries];
  }

  /** The client id a token is bound to ("*" for fleet-wide), or null if unknown. */
  check(token: string): string | null {
    const d = digest(token);
    let found: string | null = null;
    for (const e of this.entries) if (timingSafeEqual(e.token, d) && found === null) found = e.clientId;
    return found;
  }
}

export class OperatorToken {
  private tokens: Buffer[];
  /** One token, or several (any of them is accepted). */
  constructor(token: string | readonly string[]) {
    const list = typeof token === "string" ? [token] : token;
    if (list.length === 0) throw new Error("no operator token");
    for (const t of list) if (t.length < 8) throw new Error("operator token shorter than 8 characters");
    this.tokens = list.map(digest);
  }

  /** The file's tokens: one per line; blank lines and `#` comments are skipped. */
  static parse(text: string): OperatorToken {
    const list: string[] = [];
    let n = 0;
    for (const raw of text.split("\n")) {
      n++;
      const line = raw.replace(/#.*$/, "").trim();
      if (line === "") continue;
      if (/\s/.test(line)) throw new Error(`operator token line ${n}: one token per line, no spaces`);
      list.push(line);
    }
    if (list.length === 0) throw new Error("operator token file holds no token");
    return new OperatorToken(list);
  }

  static load(file: string): OperatorToken {
    return OperatorToken.parse(readFileSync(file, "utf8"));
  }

  get size(): number {
    return this.tokens.length;
  }

  /** Take `other`'s tokens (a reload): streams opened before keep running. */
  replaceWith(other: OperatorToken): void {
    this.tokens = [...other.tokens];
  }

  check(header: string | undefined): boolean {
    const t = bearer(header);
    if (t === null) return false;
    const d = digest(t);
    let ok = false;
    for (const e of this.tokens) if (timingSafeEqual(d, e)) ok = true;
    return ok;
  }
}

/** The token of an `Authorization: Bearer <token>` header, or null. */
export function bearer(header: string | string[] | undefined): string | null {
  const h = Array.isArray(header) ? header[0] : header;
  if (!h) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m ? m[1]! : null;
}
