/**
 * `rvbox tui`: picks the TUI's data source from the command line (a live
 * server, a simulated seed, a local demo fleet) and injects it into the TUI
 * (tui/main.tsx), so the TUI depends on neither the simulator nor the daemons.
 * Loaded lazily by cli.ts and left out of the CLI bundle (bin/rvbox.js).
 */
import type { OpenedSource } from "../../tui/main.js";
import { ControlSource } from "../../tui/sources/control-source.js";
import type { TuiLaunch } from "./cli.js";

export async function runTui(launch: TuiLaunch): Promise<number> {
  const { runTui: run } = await import("../../tui/main.js");
  return run(() => openSource(launch), { client: launch.client });
}

async function openSource(launch: TuiLaunch): Promise<OpenedSource> {
  if (launch.sim) {
    const { SimSource } = await import("../../sim/tui-source.js");
    return { source: new SimSource({ seed: launch.sim.seed, variant: launch.sim.variant, node: launch.sim.node, command: launch.sim.command }) };
  }
  if (launch.demo) {
    const { startDemoFleet } = await import("./demo-fleet.js");
    const fleet = await startDemoFleet({});
    return {
      source: new ControlSource({
        baseUrl: fleet.controlUrl,
        token: fleet.token,
        refreshMs: launch.refreshMs,
        notes: [`demo: logs in ${fleet.dir}/fleet.log`],
      }),
      stop: fleet.stop,
    };
  }
  if (launch.server) return { source: new ControlSource({ baseUrl: launch.server.baseUrl, token: launch.server.token, refreshMs: launch.refreshMs }) };
  throw new Error("runTui: no source (server, sim or demo)");
}
