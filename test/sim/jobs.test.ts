// Jobs in the simulator: about half the seeds' operators submit jobs (from a
// stream of their own, so the other seeds' plans and hashes are unchanged),
// and the jobs oracle (sim/job-oracle.ts) checks each run.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { resolveRate } from "../../core/server/jobs.js";
import { resolvedLimit } from "../../sim/job-oracle.js";
import { runSeed } from "../../sim/run.js";
import { drawSwarm } from "../../sim/swarm.js";
import { planSchedule } from "../../sim/schedule.js";

const jobsOf = (seed: number) => planSchedule(seed, drawSwarm(seed)).actions.filter((a) => a.k === "job");

describe("jobs in the simulator", () => {
  it("seeds with jobs run clean with the jobs oracle at work; seeds without have no job statistics", () => {
    const withJobs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].filter((s) => jobsOf(s).length > 0).slice(0, 3);
    expect(withJobs.length).toBe(3);
    let children = 0;
    for (const seed of withJobs) {
      const r = runSeed(seed, { paranoid: true });
      expect(r.failure, `seed ${seed}`).toBeUndefined();
      expect(r.stats["jobs.jobsSubmitted"]).toBe(jobsOf(seed).length);
      // (A job submitted before any of its clients registered is refused NOT_FOUND: no children.)
      children += r.stats["jobs.childrenCreated"]!;
    }
    expect(children).toBeGreaterThan(0);
    const without = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].find((s) => jobsOf(s).length === 0)!;
    const r = runSeed(without);
    expect(r.ok).toBe(true);
    expect(Object.keys(r.stats).filter((k) => k.startsWith("jobs."))).toEqual([]);
  }, 240_000);

  it("the oracle's reading of max-concurrency / max-errors is the server's", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2048 }), fc.integer({ min: 0, max: 100 }), fc.boolean(), (n, v, pct) => {
        const text = pct ? `${v}%` : String(v);
        if (v >= 1) expect(resolvedLimit(text, n, "conc")).toBe(resolveRate(text, n, "concurrency"));
        expect(resolvedLimit(text, n, "errs")).toBe(resolveRate(text, n, "errors"));
      }),
    );
  });
});
