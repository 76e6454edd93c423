// Token files: several operator tokens (a rotation, one per operator),
// in-place replacement on reload, and the CLI sending the first line.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readTokenFile } from "../../../client/control-client.js";
import { AgentTokens, OperatorToken } from "../../../shells/server/auth.js";

const dir = mkdtempSync(path.join(tmpdir(), "rvbox-auth-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("operator tokens", () => {
  it("a file holds one token per line; comments and blank lines are skipped; any listed token is accepted", () => {
    const t = OperatorToken.parse("# rotation in progress\nnew-token-0123456789\n\nold-token-0123456789  # until Friday\n");
    expect(t.size).toBe(2);
    expect(t.check("Bearer new-token-0123456789")).toBe(true);
    expect(t.check("Bearer old-token-0123456789")).toBe(true);
    expect(t.check("Bearer other-token-0123456")).toBe(false);
    expect(t.check(undefined)).toBe(false);
  });

  it("refuses a file with no token, a short token, or two words on a line", () => {
    expect(() => OperatorToken.parse("# nothing\n\n")).toThrow(/no token/);
    expect(() => OperatorToken.parse("short\n")).toThrow(/shorter than 8/);
    expect(() => OperatorToken.parse("one-token-0123 two-token-0123\n")).toThrow(/line 1: one token per line/);
  });

  it("replaceWith swaps the tokens of the object the daemon holds", () => {
    const held = new OperatorToken("first-token-0123456");
    const agents = AgentTokens.parse("web-1 agent-token-one-0123\n");
    held.replaceWith(OperatorToken.parse("second-token-0123456\n"));
    agents.replaceWith(AgentTokens.parse("web-1 agent-token-two-0123\n* fleet-token-0123456\n"));
    expect(held.check("Bearer first-token-0123456")).toBe(false);
    expect(held.check("Bearer second-token-0123456")).toBe(true);
    expect(agents.check("agent-token-one-0123")).toBeNull();
    expect(agents.check("agent-token-two-0123")).toBe("web-1");
    expect(agents.check("fleet-token-0123456")).toBe("*");
    expect(agents.size).toBe(2);
  });

  it("the CLI sends the first token of a file that lists several", () => {
    const f = path.join(dir, "token");
    writeFileSync(f, "# mine\nnew-token-0123456789\nold-token-0123456789\n");
    expect(readTokenFile(f)).toBe("new-token-0123456789");
    writeFileSync(f, "plain-token-0123456789\n");
    expect(readTokenFile(f)).toBe("plain-token-0123456789");
    writeFileSync(f, "# only a comment\n");
    expect(() => readTokenFile(f)).toThrow(/is empty/);
  });
});
