// The local demo fleet behind `rvbox tui --demo` (and, once wired, `npm start`).
import { afterAll, describe, expect, it } from "vitest";
import { startDemoFleet, type DemoFleet } from "../../shells/operator/demo-fleet.js";
import { ControlSource } from "../../tui/sources/control-source.js";
import { waitFor } from "../shells/e2e/helpers.js";

let fleet: DemoFleet | undefined;
afterAll(async () => {
  await fleet?.stop();
});

describe("demo fleet", () => {
  it("starts a server and two agents with sample commands and a pending claim, and stops cleanly", async () => {
    fleet = await startDemoFleet({ everyMs: 0, logLevel: "warn" });
    const src = new ControlSource({ baseUrl: fleet.controlUrl, token: fleet.token, refreshMs: 200 });
    try {
      await waitFor("two connected agents", () => src.fleet().sessions.filter((s) => s.link === "connected").length === 2);
      expect(src.fleet().sessions.map((s) => s.clientId)).toEqual(["demo-a", "demo-b"]);
      await waitFor("the impostor's claim", () => src.fleet().claims.find((c) => c.clientId === "demo-a"));
      src.watchCommands(null);
      await waitFor("sample commands", () => src.commands(null).length >= 8);
      await waitFor("a failed sample", () => src.commands(null).find((c) => c.state === "failed" && c.exitCode === 3));
    } finally {
      src.close();
    }
    const dir = fleet.dir;
    await fleet.stop();
    fleet = undefined;
    const { existsSync } = await import("node:fs");
    expect(existsSync(dir)).toBe(false);
  });
});
