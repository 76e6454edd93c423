// What the server writes at INFO: registrations, fencing, claims and every
// operator action, with a per-kind budget for what a peer can repeat.
import WebSocket from "ws";
import { afterAll, describe, expect, it } from "vitest";
import { createLogger, LOG_LINES_PER_KIND_PER_WINDOW, RateLimitedLog } from "../../../shells/runtime/log.js";
import { cleanupTemp, startAgent, startServer, waitFor } from "./helpers.js";

afterAll(cleanupTemp);

describe("RateLimitedLog", () => {
  it("writes n lines of a kind per window, counts line n+1 on, and says how many it left out when the window turns", () => {
    const lines: string[] = [];
    let t = 0;
    const log = new RateLimitedLog(
      createLogger("s", "info", (l) => lines.push(l)),
      () => t,
      3,
      1000,
    );
    for (let i = 0; i < 10; i++) log.write("info", "flood", `line ${i}`);
    log.write("info", "other", "another kind has its own budget");
    expect(lines.map((l) => l.replace(/^\S+ /, ""))).toEqual(["INFO s: line 0", "INFO s: line 1", "INFO s: line 2", "INFO s: another kind has its own budget"]);
    t = 1000;
    log.write("info", "flood", "after the window");
    expect(lines.slice(4).map((l) => l.replace(/^\S+ /, ""))).toEqual([
      'INFO s: 7 more "flood" lines were left out in the last 1 s',
      "INFO s: after the window",
    ]);
    const quiet = new RateLimitedLog(
      createLogger("s", "warn", (l) => lines.push(l)),
      () => t,
      3,
      1000,
    );
    quiet.write("info", "x", "below the level");
    expect(lines).toHaveLength(6);
  });
});

describe("server log at INFO", () => {
  it("has a line for a registration and for each operator action; a flood of refused connections costs a bounded number of lines", async () => {
    const lines: string[] = [];
    const s = await startServer({ log: createLogger("server", "info", (l) => lines.push(l)) });
    try {
      const agent = await startAgent(s.url, "log-a");
      await waitFor("registered", () => lines.some((l) => /INFO server: client registered client="log-a" generation=1/.test(l)));
      const r = await s.client.submitCommand({ clientId: "log-a", program: { case: "argv", value: { argv: ["true"] } } });
      await waitFor("submit logged", () =>
        // The identity that made the call comes first (the legacy --operator-token is `admin`).
        lines.some((l) => l.includes(`INFO server: operator submit operator="admin" clientId="log-a" uuid="${r.command!.issueUuid}" outcome="ok"`)),
      );
      await s.client.signalCommand({ issueUuid: "no-such-command", signal: 1, requestId: "r1" }).catch(() => {});
      await waitFor("refused action logged", () => lines.some((l) => /operator signal operator="admin" uuid="no-such-command" .*outcome="NOT_FOUND"/.test(l)));
      // 200 connections with a bad token: a bounded number of lines, not 200.
      const before = lines.length;
      await Promise.all(
        Array.from(
          { length: 200 },
          () =>
            new Promise<void>((done) => {
              const ws = new WebSocket(s.url, { headers: { authorization: "Bearer wrong" } });
              ws.on("error", () => done());
              ws.on("close", () => done());
              ws.on("unexpected-response", () => done());
            }),
        ),
      );
      const refused = lines.slice(before).filter((l) => l.includes("bad or missing bearer token"));
      expect(refused.length).toBe(LOG_LINES_PER_KIND_PER_WINDOW);
      await agent.close({ killProcesses: true });
    } finally {
      await s.close();
    }
  }, 60_000);
});
