/**
 * Bearer tokens. Agents: `--agent-tokens FILE`, one `client_id token` per
 * line, or `* token` for a fleet-wide token; `#` starts a comment. Operators:
 * `--operator-token FILE` holding one token. Tokens are compared in constant
 * time on their SHA-256.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";

export const ANY_CLIENT = "*";

function digest(s: string): Buffer {
  return createHash("sha256").update(s, "utf8").digest();
}

export class AgentTokens {
  private readonly entries: Array<{ clientId: string; token: Buffer }> = [];

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

  /** The client id a token is bound to ("*" for fleet-wide), or null if unknown. */
  check(token: string): string | null {
    const d = digest(token);
    let found: string | null = null;
    for (const e of this.entries) if (timingSafeEqual(e.token, d) && found === null) found = e.clientId;
    return found;
  }
}

export class OperatorToken {
  private readonly token: Buffer;
  constructor(token: string) {
    if (token.length < 8) throw new Error("operator token shorter than 8 characters");
    this.token = digest(token);
  }

  static load(file: string): OperatorToken {
    return new OperatorToken(readFileSync(file, "utf8").trim());
  }

  check(header: string | undefined): boolean {
    const t = bearer(header);
    return t !== null && timingSafeEqual(digest(t), this.token);
  }
}

/** The token of an `Authorization: Bearer <token>` header, or null. */
export function bearer(header: string | string[] | undefined): string | null {
  const h = Array.isArray(header) ? header[0] : header;
  if (!h) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m ? m[1]! : null;
}
