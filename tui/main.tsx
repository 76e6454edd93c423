/**
 * Opens the TUI in this terminal: picks the source (live server, simulated
 * seed, or a local demo fleet), renders the App with Ink on the alternate
 * screen, and resolves with the exit code when the operator quits.
 */
import React from "react";
import { render } from "ink";
import type { TuiLaunch } from "../shells/operator/cli.js";
import { App } from "./app.js";
import type { DataSource } from "./source.js";
import { ControlSource } from "./sources/control-source.js";
import { SimSource } from "./sources/sim-source.js";

export async function runTui(launch: TuiLaunch): Promise<number> {
  if (!process.stdin.isTTY || !process.stdout.isTTY) {
    process.stderr.write("rvbox tui: needs an interactive terminal (stdin and stdout must be a TTY); use the other rvbox commands in scripts\n");
    return 2;
  }
  let source: DataSource;
  let stopDemo: (() => Promise<void>) | null = null;
  if (launch.sim) {
    source = new SimSource({ seed: launch.sim.seed, variant: launch.sim.variant, node: launch.sim.node, command: launch.sim.command });
  } else if (launch.demo) {
    const { startDemoFleet } = await import("../shells/operator/demo-fleet.js");
    const fleet = await startDemoFleet({});
    stopDemo = fleet.stop;
    source = new ControlSource({ baseUrl: fleet.controlUrl, token: fleet.token, refreshMs: launch.refreshMs, notes: [`demo: logs in ${fleet.dir}/fleet.log`] });
  } else if (launch.server) {
    source = new ControlSource({ baseUrl: launch.server.baseUrl, token: launch.server.token, refreshMs: launch.refreshMs });
  } else {
    throw new Error("runTui: no source (server, sim or demo)");
  }
  const out = process.stdout;
  const alt = out.isTTY === true;
  // The terminal may go away (SIGHUP): writes then fail with EIO; that must not stop the clean-up below.
  const ignore = (): void => {};
  out.on("error", ignore);
  if (alt) out.write("\x1b[?1049h\x1b[H");
  // A closed terminal (SIGHUP) or a kill (SIGTERM) ends the TUI like q does, so a demo fleet stops its processes.
  let app: ReturnType<typeof render> | null = null;
  const stop = (): void => app?.unmount();
  process.on("SIGHUP", stop);
  process.on("SIGTERM", stop);
  try {
    app = render(<App source={source} initialClient={launch.client} />, { exitOnCtrlC: true, patchConsole: true });
    await app.waitUntilExit();
  } finally {
    process.off("SIGHUP", stop);
    process.off("SIGTERM", stop);
    source.close();
    if (stopDemo) await stopDemo();
    if (alt) out.write("\x1b[?1049l");
  }
  return 0;
}
