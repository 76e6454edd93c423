import { afterEach, describe, expect, it } from "vitest";
import { VARIANTS } from "../../sim/variants.js";
import { runSeed } from "../../sim/run.js";
import { fakeCommand, fakeSession, FakeSource, FakeTimeline } from "../../tui/sources/fake-source.js";
import { SimSource } from "../../sim/tui-source.js";
import { planSchedule } from "../../sim/schedule.js";
import { drawSwarm } from "../../sim/swarm.js";
import { eventually, KEY, lineWith, mount, type Harness } from "./helpers.js";

let h: Harness | undefined;
let sim: SimSource | undefined;
afterEach(() => {
  h?.unmount();
  sim?.close();
  h = undefined;
  sim = undefined;
});

function withTimeline(): { src: FakeSource; tl: FakeTimeline } {
  const src = new FakeSource({
    sessions: [
      fakeSession(0, { clientId: "agent-0", key: "agent-0" }),
      fakeSession(1, { clientId: "agent-1", key: "agent-1" }),
      fakeSession(2, { clientId: "agent-1", key: "agent-1~clone4", kind: "clone" }),
    ],
    commands: [
      fakeCommand("agent-0", 1, { uuid: "0aaa-cmd" }),
      fakeCommand("agent-1", 2, { uuid: "1bbb-cmd" }),
      fakeCommand("agent-1", 3, { uuid: "1ccc-cmd" }),
    ],
  });
  const tl = new FakeTimeline(src, 100);
  src.timeline = tl;
  return { src, tl };
}

describe("sim mode (timeline keys, fake timeline)", () => {
  it("shows the timeline bar: frame, virtual time, play state, recent timeline lines", async () => {
    const { src } = withTimeline();
    h = await mount(src, { columns: 120 });
    const f = h.frame();
    expect(f).toContain("frame 1/100 · t=0.000s of 99.000s · ❚❚ paused · seed ok");
    expect(f).toContain("server#0         frame 0");
    expect(f).toContain(", . step · [ ] ±10s");
  });

  it(", and . step one frame back and forward", async () => {
    const { src, tl } = withTimeline();
    h = await mount(src, { columns: 120 });
    await h.press(".", ".", ".", ",");
    expect(tl.index).toBe(2);
    expect(h.frame()).toContain("frame 3/100 · t=2.000s");
    await h.press(",", ",", ",");
    expect(tl.index).toBe(0);
  });

  it("[ and ] jump 10 s; < and > go to the start and the end", async () => {
    const { src, tl } = withTimeline();
    h = await mount(src, { columns: 120 });
    await h.press("]", "]");
    expect(tl.index).toBe(20);
    await h.press("[");
    expect(tl.index).toBe(10);
    await h.press(">");
    expect(h.frame()).toContain("frame 100/100");
    await h.press("<");
    expect(tl.index).toBe(0);
    expect(tl.calls).toEqual(["jump 10000", "jump 10000", "jump -10000", "seek 99", "seek 0"]);
  });

  it("space plays and pauses", async () => {
    const { src, tl } = withTimeline();
    h = await mount(src, { columns: 120 });
    await h.press(" ");
    expect(h.frame()).toContain("▶ playing");
    await h.press(" ");
    expect(h.frame()).toContain("❚❚ paused");
    expect(tl.calls).toEqual(["play", "play"]);
  });

  it("F jumps to the failure and the bar marks it", async () => {
    const { src, tl } = withTimeline();
    tl.failure = { at: 42_000, frame: 42, oracle: "R-O3", message: "acked before durable" };
    h = await mount(src, { columns: 120 });
    expect(h.frame()).toContain("FAIL at 42.000s [R-O3]");
    expect(h.frame()).toContain("✗");
    await h.press("F");
    expect(tl.index).toBe(42);
  });

  it("n cycles the node filter over sessions and commands", async () => {
    const { src } = withTimeline();
    h = await mount(src, { columns: 120 });
    await h.press("n");
    expect(h.frame()).toContain("node=server");
    await h.press("n");
    expect(h.frame()).toContain("node=agent-0");
    expect(h.frame()).not.toMatch(/agent-1\s+connected/);
    await h.press("n");
    expect(h.frame()).toMatch(/agent-1\s+connected/);
    expect(h.frame()).toContain("agent-1~clone4 (clone)");
    expect(h.frame()).not.toMatch(/agent-0\s+connected/);
    await h.press("2");
    expect(h.frame()).toContain("1bbb-cmd");
    expect(h.frame()).not.toContain("0aaa-cmd");
    await h.press("n");
    expect(h.frame()).toContain("0aaa-cmd");
  });

  it("/ filters by command id", async () => {
    const { src, tl } = withTimeline();
    h = await mount(src, { columns: 120 });
    await h.press("2", "/");
    expect(h.frame()).toContain("command id contains>");
    await h.type("1cc");
    await h.press(KEY.enter);
    expect(tl.filter.command).toBe("1cc");
    expect(h.frame()).toContain("1ccc-cmd");
    expect(h.frame()).not.toContain("1bbb-cmd");
    expect(h.frame()).toContain("command~1cc");
    await h.press("/", KEY.backspace, KEY.backspace, KEY.backspace, KEY.enter);
    expect(tl.filter.command).toBe(null);
    expect(h.frame()).toContain("1bbb-cmd");
  });
});

describe("sim source (a real simulated world)", () => {
  it("shows a seed's jobs as GetJob would: at the end every job ended, its children as their commands ended", () => {
    const opts = { noFaults: true };
    const seed = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].find((x) => planSchedule(x, drawSwarm(x, opts)).actions.some((a) => a.k === "job"))!;
    sim = new SimSource({ seed, sync: true, swarmOptions: opts });
    expect(sim.failure).toBe(null);
    sim.seek(sim.frames - 1);
    const jobs = sim.jobs();
    expect(jobs.length).toBeGreaterThan(0);
    const cmds = new Map(sim.commands(null).map((c) => [c.uuid, c]));
    expect(jobs.some((j) => j.children.some((c) => c.phase === "done" && cmds.has(c.uuid)))).toBe(true);
    for (const j of jobs) {
      expect(j.endedAt, j.id).not.toBe(null);
      for (const c of j.children) {
        // (A child's command may have been pruned from history since: then it is not listed.)
        if (c.phase === "done" && cmds.has(c.uuid)) expect(c.state).toBe(cmds.get(c.uuid)!.state);
        else if (c.phase !== "done") expect(["cancelled", "refused"]).toContain(c.phase);
      }
    }
  });

  it("records a seed's run and steps the same views forward and back", () => {
    sim = new SimSource({ seed: 5, sync: true, swarmOptions: { noFaults: true } });
    expect(sim.recording).toBe(false);
    expect(sim.failure).toBe(null);
    expect(sim.frames).toBeGreaterThan(10);
    const ref = runSeed(5, { swarmOptions: { noFaults: true } });
    expect(sim.endTime).toBeLessThanOrEqual(ref.virtualMs);
    sim.seek(0);
    expect(sim.commands(null)).toHaveLength(0);
    sim.seek(sim.frames - 1);
    const last = sim.fleet();
    expect(last.sessions.map((s) => s.key)).toEqual(Array.from({ length: ref.agents }, (_, i) => `agent-${i}`));
    expect(last.sessions.every((s) => s.link === "connected")).toBe(true);
    const cmds = sim.commands(null);
    expect(cmds.length).toBe(ref.commands);
    const states: Record<string, number> = {};
    for (const c of cmds) states[c.state] = (states[c.state] ?? 0) + 1;
    expect(states).toEqual(ref.states);
    // Stepping back shows an earlier world: fewer terminal commands.
    sim.seek(Math.floor(sim.frames / 3));
    const earlier = sim.commands(null).filter((c) => ["succeeded", "failed", "rejected", "cancelled", "interrupted", "expired"].includes(c.state)).length;
    const final = cmds.filter((c) => ["succeeded", "failed", "rejected", "cancelled", "interrupted", "expired"].includes(c.state)).length;
    expect(earlier).toBeLessThan(final);
    expect(sim.timeOf(sim.index)).toBeLessThan(sim.endTime);
  });

  it("rebuilds a command's output at the cursor from the server's stored events", () => {
    sim = new SimSource({ seed: 5, sync: true, swarmOptions: { noFaults: true } });
    sim.seek(sim.frames - 1);
    const c = sim.commands(null).find((x) => x.storedThrough >= 3 && x.state === "succeeded")!;
    const out = sim.output(c.uuid);
    expect(out.finished).toBe(true);
    expect(out.lines.some((l) => l.kind === "stdout" || l.kind === "stderr")).toBe(true);
    expect(out.lines[out.lines.length - 1]!.text).toContain("succeeded");
    expect(out.items.every((i) => i.seq <= c.storedThrough)).toBe(true);
  });

  it("keeps memory bounded: past maxFrames it thins frames and keeps the first and the last", () => {
    sim = new SimSource({ seed: 5, sync: true, swarmOptions: { noFaults: true }, maxFrames: 40, frameMs: 1 });
    expect(sim.frames).toBeLessThanOrEqual(41);
    expect(sim.timeOf(0)).toBe(0);
    sim.seek(sim.frames - 1);
    expect(sim.commands(null).length).toBeGreaterThan(0);
  });

  it("filters the timeline lines by node and command", () => {
    sim = new SimSource({ seed: 5, sync: true, swarmOptions: { noFaults: true } });
    sim.seek(sim.frames - 1);
    sim.setFilter({ node: "agent-1" });
    const lines = sim.linesUpToCursor();
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.every((l) => /\] agent-1#\d/.test(l))).toBe(true);
    const uuid = sim.commands("agent-1")[0]?.uuid;
    if (uuid) {
      sim.setFilter({ node: null, command: uuid });
      expect(sim.linesUpToCursor().every((l) => l.includes(uuid))).toBe(true);
    }
  });

  it("refuses operator actions: a replay is read-only", async () => {
    sim = new SimSource({ seed: 5, sync: true, swarmOptions: { noFaults: true } });
    await expect(sim.authorize()).rejects.toThrow(/read-only/);
    await expect(sim.submit()).rejects.toThrow(/read-only/);
  });

  it("a failing seed (a broken variant) is recorded up to the failure, and F in the TUI jumps there", async () => {
    const variant = VARIANTS[0]!;
    let seed = 1;
    while (seed < 10 && runSeed(seed, { variant }).ok) seed++;
    sim = new SimSource({ seed, variant: variant.name, sync: true });
    expect(sim.failure).not.toBe(null);
    expect(sim.failure!.frame).toBe(sim.frames - 1);
    h = await mount(sim, { columns: 140, rows: 40 });
    expect(h.frame()).toContain(`FAIL at`);
    expect(h.frame()).toContain(`[${sim.failure!.oracle}]`);
    await h.press("F");
    expect(sim.index).toBe(sim.failure!.frame);
    await eventually(() => expect(lineWith(h!.frame(), "FAIL [")).toBeDefined());
  });

  it("drives the real sim source through the TUI: sessions from simulated hosts, commands, output", async () => {
    sim = new SimSource({ seed: 5, sync: true, swarmOptions: { noFaults: true } });
    h = await mount(sim, { columns: 140, rows: 40 });
    expect(h.frame()).toContain("sim seed 5");
    await h.press(">");
    expect(h.frame()).toMatch(/agent-0\s+connected/);
    await h.press(KEY.enter);
    expect(h.frame()).toContain("› agent-0");
    await h.press(KEY.enter);
    expect(h.frame()).toMatch(/on agent-0 · \w+/);
    await h.press(KEY.esc, KEY.esc, "s");
    // Actions are refused on a replay, before any form opens.
    expect(h.frame()).toContain("read-only: this is a simulation replay");
    expect(h.frame()).not.toContain("Submit a command");
    await h.press("4", "a");
    expect(h.frame()).toContain("read-only: this is a simulation replay");
  });
});
