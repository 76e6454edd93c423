// A bounded swarm campaign: 200 seeds, every fault kind on in some of them,
// on 2 worker threads (well under 3 minutes on 2 idle cores; speed is
// measured by npm run sim:bench, never asserted here). Every
// failure prints its seed and trace hash; reproduce with
//   npx tsx sim/cli.ts replay --seed S     (timeline)
//   npx tsx sim/cli.ts shrink --seed S     (minimal failing plan)
import { describe, expect, it } from "vitest";
import { printCampaign, runCampaign } from "../../sim/campaign.js";
import { FAULT_KINDS } from "../../sim/swarm.js";

describe("simulation campaign", () => {
  it("200 swarm seeds: every oracle holds after every step and at the end (safety, liveness)", async () => {
    const seeds = Array.from({ length: 200 }, (_, i) => i + 1);
    const s = await runCampaign(seeds, 2, { variant: null, swarmOptions: null });
    const lines: string[] = [];
    printCampaign(s, (l) => lines.push(l));
    console.log(lines.join("\n"));
    // The swarm really exercised every fault kind.
    for (const k of FAULT_KINDS) expect(s.faultsSeen[k] ?? 0, `fault ${k} never happened`).toBeGreaterThan(0);
    const failures = s.failures.map((f) => `seed ${f.seed} hash ${f.hash} [${f.failure!.oracle}] ${f.failure!.message.split("\n")[0]}`);
    expect(failures).toEqual([]);
  }, 900_000);
});
