// The agent command's phase table (core/agent/phase.ts) and its one writer:
// every move the table lists is taken, every other one is a broken
// invariant that leaves the phase as it was.
import { describe, expect, it } from "vitest";
import { InvariantViolation } from "../../../core/errors.js";
import type { AgentPhase } from "../../../core/agent/agent-types.js";
import { COMMAND_PHASES, setPhase } from "../../../core/agent/phase.js";
import { AgentRig } from "./rig.js";

const PHASES = Object.keys(COMMAND_PHASES) as AgentPhase[];

describe("agent command phases", () => {
  it("R-D1: the one way to running is queued -> launching -> running, and done is final", () => {
    expect(COMMAND_PHASES.queued).toContain("launching");
    expect(COMMAND_PHASES.launching).toContain("running");
    expect(PHASES.filter((p) => (COMMAND_PHASES[p] as readonly AgentPhase[]).includes("running"))).toEqual(["launching"]);
    expect(COMMAND_PHASES.done).toEqual([]);
  });

  it("setPhase takes every listed move and refuses every other one, naming it and changing nothing", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    // internal by design: the command record is what setPhase writes
    const c = r.cmd("c1");
    for (const from of PHASES)
      for (const to of PHASES) {
        c.phase = from;
        if ((COMMAND_PHASES[from] as readonly AgentPhase[]).includes(to)) {
          setPhase(c, to);
          expect(c.phase).toBe(to);
        } else {
          expect(() => setPhase(c, to), `${from} -> ${to}`).toThrow(InvariantViolation);
          expect(() => setPhase(c, to)).toThrow(`c1: phase ${from} -> ${to} is not in the phase table`);
          expect(c.phase).toBe(from);
        }
      }
  });
});
