// Worker thread of a campaign: runs the seeds it is sent, posts results.
import { parentPort, workerData } from "node:worker_threads";
import { runSeed } from "./run.js";
import { VARIANTS } from "./variants.js";
import { wireCaches } from "./wire.js";
import type { CampaignOptions } from "./campaign.js";

const opts = workerData as CampaignOptions;
const variant = opts.variant ? (VARIANTS.find((v) => v.name === opts.variant) ?? null) : null;
wireCaches.enabled = opts.wireCaches ?? true;
parentPort!.on("message", (seed: number) => {
  const r = runSeed(seed, { variant, ...(opts.swarmOptions ? { swarmOptions: opts.swarmOptions } : {}), ...(opts.paranoid ? { paranoid: true } : {}) });
  parentPort!.postMessage(r);
});
