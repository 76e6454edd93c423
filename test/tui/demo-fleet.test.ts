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

  it("does not jam itself: after many rounds at most one of each sample is active and an operator's command on either client runs at once", async () => {
    fleet = await startDemoFleet({ everyMs: 25, logLevel: "warn", impostor: false });
    const { createControlClient } = await import("../../client/control-client.js");
    const ctl = createControlClient({ baseUrl: fleet.controlUrl, token: fleet.token });
    // Ten rounds of the eight samples (the old demo: ten sleepers and ten cats, both agents full).
    await waitFor("ten rounds", async () => (await ctl.listCommands({})).commands.length >= 8 || false, 20_000);
    await new Promise((r) => setTimeout(r, 80 * 25 + 500));
    const all = (await ctl.listCommands({})).commands;
    const active = all.filter((c) => c.state < 5);
    const byLine = new Map<string, number>();
    for (const c of active) {
      const line = c.spec?.program.case === "shell" ? c.spec.program.value.commandLine : "?";
      byLine.set(line, (byLine.get(line) ?? 0) + 1);
    }
    for (const [line, k] of byLine) expect(k, line).toBe(1);
    for (const client of ["demo-a", "demo-b"]) {
      const r = await ctl.submitCommand({ clientId: client, program: { case: "argv", value: { argv: ["echo", "operator"] } } });
      const id = r.command!.issueUuid;
      await waitFor(`${client}: the operator's command runs`, async () => (await ctl.getCommand({ issueUuid: id })).command?.state === 5, 15_000);
    }
    await fleet.stop();
    fleet = undefined;
  }, 60_000);
});
