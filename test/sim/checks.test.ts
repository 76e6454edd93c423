// The full invariant check runs every CHECK_EVERY steps of a node (and before
// a crash and at the end of a run), not after every step; --paranoid runs it
// after every step. These tests corrupt a core's state on purpose (wrappers,
// core/ untouched) and show that the corruption is still caught: by the
// periodic check within CHECK_EVERY steps, by --paranoid at the very step,
// and, by default, reported exactly as --paranoid reports it (the failing run
// is rerun paranoid). They also pin what the periodic check cannot see.
import { describe, expect, it } from "vitest";
import type { AgentState } from "../../core/agent/agent-types.js";
import type { ServerState } from "../../core/server/server-types.js";
import { runSeed, type RunResult } from "../../sim/run.js";
import { planSchedule } from "../../sim/schedule.js";
import { drawSwarm } from "../../sim/swarm.js";
import { CHECK_EVERY, World, type Variant } from "../../sim/world.js";

const SEED = 3;

/** Server step counter plus the global step at which the state was corrupted. */
interface Probe {
  serverSteps: number;
  corruptedAtServerStep: number;
  corruptedAtWorldStep: number;
  repairedAtServerStep: number;
}

/**
 * After server step `at`, the retained-output index gains a client that holds
 * no output: only serverInvariants sees it. Each world (a rerun too) gets a
 * fresh probe, pushed to `probes`.
 */
function ghostOutput(at: number, transient: boolean, probes: Probe[]): Variant {
  return {
    name: "ghost-output-index",
    description: "corrupts the server's per-client output index (test only)",
    wrapServer: (step, w) => {
      const probe = newProbe();
      probes.push(probe);
      return (st: ServerState, input, now, env, wall) => {
        const res = step(st, input, now, env, wall);
        probe.serverSteps++;
        if (probe.serverSteps === at) {
          res.state.clientOutput.set("ghost", { bytes: 5, uuids: new Set() });
          probe.corruptedAtServerStep = probe.serverSteps;
          probe.corruptedAtWorldStep = w.steps;
        } else if (transient && probe.serverSteps === at + 1 && res.state.clientOutput.delete("ghost")) {
          probe.repairedAtServerStep = probe.serverSteps;
        }
        return res;
      };
    },
  };
}

function newProbe(): Probe {
  return { serverSteps: 0, corruptedAtServerStep: 0, corruptedAtWorldStep: 0, repairedAtServerStep: 0 };
}

function failureOf(r: RunResult): { oracle: string; message: string; at: number; hash: string; steps: number } {
  expect(r.ok, "the corrupted run must fail").toBe(false);
  return { oracle: r.failure!.oracle, message: r.failure!.message, at: r.failure!.at, hash: r.hash, steps: r.steps };
}

describe("invariant checking: periodic by default, per step with --paranoid", () => {
  it("checking is invisible to the run: paranoid and default give the same trace hash", () => {
    for (const seed of [1, 2]) {
      const a = runSeed(seed, { paranoid: true });
      const b = runSeed(seed);
      expect(a.ok && b.ok).toBe(true);
      expect(b.hash, `seed ${seed}`).toBe(a.hash);
      expect(b.steps).toBe(a.steps);
      // Per step is one check per step; the default is far fewer, but more than steps / CHECK_EVERY.
      expect(a.fullChecks).toBe(a.steps);
      expect(b.fullChecks).toBeGreaterThanOrEqual(Math.floor(b.steps / CHECK_EVERY));
      expect(b.fullChecks).toBeLessThan(a.fullChecks / 4);
    }
  }, 120_000);

  it("a corrupted server state is caught by --paranoid at the step that corrupted it", () => {
    const ps: Probe[] = [];
    const f = failureOf(runSeed(SEED, { paranoid: true, variant: ghostOutput(200, false, ps) }));
    expect(ps.length).toBe(1);
    const p = ps[0]!;
    expect(f.oracle).toBe("server-core-threw");
    expect(f.message).toMatch(/ghost: retained output index drift/);
    expect(p.corruptedAtServerStep).toBe(200);
    expect(p.serverSteps).toBe(200); // no further server step ran
    expect(f.steps).toBe(p.corruptedAtWorldStep);
  }, 60_000);

  it("... by the periodic full check within CHECK_EVERY server steps (no rerun)", () => {
    const ps: Probe[] = [];
    const r = runSeed(SEED, { localize: false, variant: ghostOutput(200, false, ps) });
    const f = failureOf(r);
    expect(ps.length).toBe(1);
    const p = ps[0]!;
    expect(r.localized).toBeUndefined();
    expect(f.oracle).toBe("server-core-threw");
    expect(f.message).toMatch(/ghost: retained output index drift/);
    expect(p.serverSteps).toBeGreaterThanOrEqual(200);
    expect(p.serverSteps).toBeLessThan(200 + CHECK_EVERY);
  }, 60_000);

  it("... and by default reported exactly as --paranoid reports it (the failing run is rerun paranoid)", () => {
    const paranoid = failureOf(runSeed(SEED, { paranoid: true, variant: ghostOutput(200, false, []) }));
    for (const at of [200, 201, 231]) {
      const ps: Probe[] = [];
      const r = runSeed(SEED, { variant: ghostOutput(at, false, ps) });
      expect(ps.length).toBe(2); // the run, then its paranoid rerun
      expect(ps[1]!.serverSteps).toBe(at); // the rerun stopped at the corrupting step
      expect(ps[0]!.serverSteps).toBeGreaterThan(at); // the periodic check saw it later
      expect(r.localized).toBe(true);
      const f = failureOf(r);
      if (at === 200) expect(f).toEqual(paranoid);
      else expect(f.message).toMatch(/ghost: retained output index drift/);
    }
  }, 120_000);

  it("a state corrupted just before a crash is caught by the check before the crash drops it", () => {
    const sw = drawSwarm(SEED);
    const w = new World(SEED, sw, planSchedule(SEED, sw));
    w.start();
    while (w.steps < 150) w.q.pop()!.run();
    w.server.state!.clientOutput.set("ghost", { bytes: 5, uuids: new Set() });
    expect(() => w.crashServer(1000, "test")).toThrow(/ghost: retained output index drift \(full invariant check before a crash\)/);
  });

  it("a corrupted agent state is caught too, and reported as --paranoid reports it", () => {
    // Per world: the first agent-0 step after which it holds a command.
    const corruptAgent = (marks: Array<{ atWorldStep: number }>): Variant => ({
      name: "tombstoned-live-command",
      description: "tombstones a command the agent still holds (test only)",
      wrapAgent: (step, host, w) => {
        let mark = marks.find((m) => (m as { w?: World }).w === w);
        if (!mark) marks.push((mark = Object.assign({ atWorldStep: 0 }, { w })));
        const out = mark;
        return (st: AgentState, input, now, env, wall) => {
          const res = step(st, input, now, env, wall);
          const uuid = res.state.commands.keys().next().value;
          if (out.atWorldStep === 0 && host.name === "agent-0" && uuid !== undefined) {
            res.state.tombstones.set(uuid, "corrupt");
            out.atWorldStep = w.steps;
          }
          return res;
        };
      },
    });
    const at: Array<{ atWorldStep: number }> = [];
    const paranoid = failureOf(runSeed(SEED, { paranoid: true, variant: corruptAgent(at) }));
    expect(paranoid.oracle).toBe("agent-core-threw");
    expect(paranoid.message).toMatch(/both live and tombstoned/);
    expect(paranoid.steps).toBe(at[0]!.atWorldStep);
    // Periodic checking alone: caught, by the agent's invariants or an oracle first (the tombstone changes behaviour).
    const periodic = failureOf(runSeed(SEED, { localize: false, variant: corruptAgent([]) }));
    expect(periodic.oracle).toMatch(/agent-core-threw|R-|terminal|coverage|liveness/);
    const byDefault = runSeed(SEED, { variant: corruptAgent([]) });
    expect(byDefault.localized).toBe(true);
    expect(failureOf(byDefault)).toEqual(paranoid);
  }, 120_000);

  it("the limit: a violation that heals before the next periodic check is seen only by --paranoid", () => {
    // This is the price of periodic checking; campaigns can be run --paranoid.
    const f = failureOf(runSeed(SEED, { paranoid: true, variant: ghostOutput(200, true, []) }));
    expect(f.message).toMatch(/ghost: retained output index drift/);
    const qs: Probe[] = [];
    // Server step 200 is not a check step (checks at 1, 33, ..., 193, 225): the ghost is gone by 225.
    expect((200 - 1) % CHECK_EVERY).not.toBe(0);
    const r = runSeed(SEED, { variant: ghostOutput(200, true, qs) });
    expect(qs.length).toBe(1);
    expect(qs[0]!.repairedAtServerStep).toBe(201);
    expect(r.ok).toBe(true);
  }, 120_000);
});

/**
 * From server step `from` on, writes into the command record it emitted in
 * its previous persist effect, as a core that kept and changed an emitted
 * value would (test only; core/ untouched).
 */
function writeIntoEmitted(from: number, writes: number[]): Variant {
  return {
    name: "write-into-emitted-record",
    description: "writes into a persisted value after emitting it (test only)",
    wrapServer: (step) => {
      let steps = 0;
      let last: Record<string, unknown> | null = null;
      return (st: ServerState, input, now, env, wall) => {
        steps++;
        if (last !== null && steps >= from) {
          writes.push(steps);
          const through = last.storedThrough;
          last.storedThrough = through; // a write, even of the same value, into a frozen record throws
        }
        const res = step(st, input, now, env, wall);
        for (const e of res.effects)
          if (e.type === "persist") for (const r of e.records) if (r.table === "command" && r.value !== null) last = r.value as Record<string, unknown>;
        return res;
      };
    },
  };
}

describe("the disk's values: shared, and frozen to catch a core that writes into them", () => {
  it("a core that writes into a value it emitted fails by default and with --paranoid, reported the same way", () => {
    const pw: number[] = [];
    const paranoid = failureOf(runSeed(SEED, { paranoid: true, variant: writeIntoEmitted(150, pw) }));
    expect(paranoid.oracle).toBe("server-core-threw");
    expect(paranoid.message).toMatch(/read.only|frozen|Cannot assign/);
    // Paranoid freezes every batch: the first write throws.
    expect(pw.length).toBe(1);
    const dw: number[] = [];
    const r = runSeed(SEED, { variant: writeIntoEmitted(150, dw) });
    expect(failureOf(r)).toEqual(paranoid);
    // By default only every CHECK_EVERY-th batch is frozen: the write is caught within a few of them.
    expect(dw.length).toBeGreaterThan(1);
  });

  it("values are frozen on the way in and copied on the way out: a restarted node gets its own copy", () => {
    const w = new World(SEED, drawSwarm(SEED), planSchedule(SEED, drawSwarm(SEED)), null, null);
    const disk = w.server.disk;
    const value = { a: [1, 2], b: { c: 3 } };
    disk.append(1, [{ table: "t", key: "k", value }], 0, 1, true);
    expect(Object.isFrozen(value) && Object.isFrozen(value.a) && Object.isFrozen(value.b)).toBe(true);
    disk.sync(1);
    const snap = disk.snapshot().get("t")!.get("k") as typeof value;
    expect(snap).toEqual(value);
    expect(snap).not.toBe(value);
    expect(Object.isFrozen(snap)).toBe(false);
    // Unfrozen batches share the value as it is.
    const other = { d: 1 };
    disk.append(2, [{ table: "t", key: "k2", value: other }], 1, 1, false);
    expect(Object.isFrozen(other)).toBe(false);
  });
});
