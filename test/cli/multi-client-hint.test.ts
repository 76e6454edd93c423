import { describe, expect, it } from "vitest";
import { multiClientHint } from "../../shells/operator/jobs-cli.js";

// The server's refusal (core/server/submit.ts) as the CLI receives it.
const refusal = (id: string, which: string): string =>
  `client id ${id} looks like a list or a wildcard (${which}); multi-client runs are not supported yet: submit once per client`;

describe("run with a list or a wildcard as the client (issue 41 item 3)", () => {
  it("a list is offered back as --clients, a wildcard as the ids it names, or A,B when it names none or too many; -l always", () => {
    const cases: Array<[string, string, string]> = [
      ["web-1,web-2", "it names web-1, web-2", "--clients web-1,web-2 --"],
      ["web-*", "it names web-1, web-2", "--clients web-1,web-2 --"],
      ["web-*", "it names web-1, web-2, web-3 and 4 more", "--clients A,B --"],
      ["db-*", "it names no known client", "--clients A,B --"],
    ];
    for (const [id, which, want] of cases) {
      const m = multiClientHint(refusal(id, which), id);
      expect(m, id).toContain(
        `client id ${id} looks like a list or a wildcard (${which}); to run one command on several clients, submit a job: rvbox run ${want}`,
      );
      expect(m).toContain("rvbox run -l KEY=VALUE -- CMD");
      expect(m).not.toMatch(/not supported|once per client/);
    }
  });

  it("any other message is left as it is", () => {
    expect(multiClientHint("no client web-3 has registered with this server", "web-3")).toBe("no client web-3 has registered with this server");
  });
});
