// The daemons' clocks (shells/runtime/node-loop.ts): the worker loop steps
// the cores with a deadline clock (wall clock at start + monotonic elapsed)
// and the wall clock. The wall clock here is Date.now() stepped by an hour,
// as NTP or a resumed VM does; performance.now() runs on.
import { afterEach, describe, expect, it, vi } from "vitest";
import { DaemonClock, NodeLoop, type TimeSource } from "../../../shells/runtime/node-loop.js";

const HOUR = 3_600_000;
const realNow = Date.now.bind(Date);
let wallStep = 0;
afterEach(() => {
  vi.restoreAllMocks();
  wallStep = 0;
});
function stepWallClock(ms: number): void {
  wallStep += ms;
  vi.spyOn(Date, "now").mockImplementation(() => realNow() + wallStep);
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function loop(time?: TimeSource) {
  const seen: Array<{ t: string; now: number; wall: number }> = [];
  const l = new NodeLoop<{ t: string }>(
    {
      step: (i, now, wall) => seen.push({ t: i.t, now, wall }),
      staged: () => null,
      ingressFull: () => ({ t: "full" }),
      durable: () => ({ t: "durable" }),
      tick: () => ({ t: "tick" }),
      onError: (e) => {
        throw e;
      },
    },
    { maxBytes: 100, maxCount: 4 },
    10,
    time,
  );
  return { l, seen };
}

describe("shell runtime: the deadline clock and the wall clock", () => {
  it("R-H2 R-H4: the worker loop steps the core with a deadline clock that a wall clock stepped +1 h and then -1 h neither advances nor freezes, and with the wall clock itself", async () => {
    const { l, seen } = loop();
    l.feed({ t: "a" });
    await sleep(20);
    stepWallClock(HOUR);
    l.feed({ t: "b" });
    await sleep(60);
    stepWallClock(-2 * HOUR);
    l.feed({ t: "c" });
    await sleep(60);
    l.feed({ t: "d" });
    await sleep(20);
    l.stop();
    const [a, b, c, d] = seen;
    expect(seen.map((s) => s.t)).toEqual(["a", "b", "c", "d"]);
    // Deadline clock: real elapsed time only, in both directions.
    expect(b!.now - a!.now).toBeGreaterThanOrEqual(15);
    expect(b!.now - a!.now).toBeLessThan(5_000);
    expect(c!.now - b!.now).toBeGreaterThanOrEqual(50);
    expect(c!.now - b!.now).toBeLessThan(5_000);
    expect(d!.now - c!.now).toBeGreaterThanOrEqual(50);
    // Wall clock: whatever Date.now() says.
    expect(Math.abs(a!.wall - a!.now)).toBeLessThan(1_000);
    expect(Math.abs(b!.wall - b!.now - HOUR)).toBeLessThan(1_000);
    expect(Math.abs(c!.wall - c!.now + HOUR)).toBeLessThan(1_000);
    expect(Math.abs(d!.wall - Date.now())).toBeLessThan(1_000);
  });

  it("R-H1: a wake armed before the wall clock is stepped back 1 h fires after its real delay, at a deadline-clock time past it", async () => {
    const { l, seen } = loop();
    l.feed({ t: "a" });
    await sleep(10);
    const at = l.now() + 150;
    l.setWake(at);
    stepWallClock(-HOUR);
    const t0 = performance.now();
    while (!seen.some((s) => s.t === "tick") && performance.now() - t0 < 3_000) await sleep(10);
    l.stop();
    const tick = seen.find((s) => s.t === "tick");
    expect(tick).toBeDefined();
    expect(tick!.now).toBeGreaterThanOrEqual(at);
    expect(performance.now() - t0).toBeLessThan(2_000);
  });

  it("R-H1: a wake whose Node timer fires before the deadline clock reaches it waits out the rest: the core is never ticked early", async () => {
    let lag = 0;
    const { l, seen } = loop({ wallMs: () => Date.now(), monoMs: () => performance.now() - lag });
    const at = l.now() + 30;
    l.setWake(at);
    // From here the deadline clock reads 8 ms behind the clock Node's timers
    // count on, as the loop's cached millisecond clock can (by up to a ms or so).
    lag = 8;
    const t0 = performance.now();
    while (!seen.some((s) => s.t === "tick") && performance.now() - t0 < 3_000) await sleep(5);
    l.stop();
    const ticks = seen.filter((s) => s.t === "tick");
    expect(ticks.length).toBe(1);
    expect(ticks[0]!.now).toBeGreaterThanOrEqual(at);
  });

  it("persisted deadlines: a deadline taken in one process is the same instant for the next, whose monotonic clock starts again at 0; a wall step in the first run is the only error", () => {
    let wall = 1_760_000_000_000;
    let mono = 5_000_000; // process A's monotonic origin is arbitrary
    const src: TimeSource = { wallMs: () => wall, monoMs: () => mono };
    const a = new DaemonClock(src);
    expect(a.now()).toBe(wall);
    wall += 10_000;
    mono += 10_000;
    const deadline = a.now() + 60_000; // e.g. a queue expiry, persisted
    expect(a.toWall(deadline)).toBe(wall + 60_000);
    // Restart 5 s later: a new process, its monotonic clock from 0.
    wall += 5_000;
    mono = 0;
    const b = new DaemonClock(src);
    expect(deadline - b.now()).toBe(55_000);
    // Within one process the wall clock never moves the deadline clock...
    wall += HOUR + 1_000; // 1 s passes and the wall clock is stepped +1 h
    mono += 1_000;
    expect(deadline - b.now()).toBe(54_000);
    expect(b.wall()).toBe(wall);
    expect(b.toWall(deadline)).toBe(wall + 54_000);
    wall -= 2 * HOUR - 1_000; // 1 s passes, stepped -2 h
    mono += 1_000;
    expect(deadline - b.now()).toBe(53_000);
    // ...but the next process anchors to the wall clock again: the step of
    // the previous run (here -1 h net) is what a restart carries over.
    mono = 0;
    const c = new DaemonClock(src);
    expect(deadline - c.now()).toBe(53_000 + HOUR);
  });

  it("a deadline shown as wall time does not wobble by the clocks' rounding, and follows a real step", () => {
    // Fractional readings: the wall clock's ms ticks 0.5 ms after the monotonic one's.
    let wall = 1_760_000_000_000.5;
    let mono = 100.0;
    const src: TimeSource = { wallMs: () => wall, monoMs: () => mono };
    const clock = new DaemonClock(src);
    const deadline = clock.now() + 60_000;
    const shown = new Set<number>();
    for (let i = 0; i < 40; i++) {
      wall += 0.25;
      mono += 0.25;
      shown.add(clock.toWall(deadline));
    }
    expect([...shown]).toHaveLength(1);
    // A real step of the wall clock moves it, by the step.
    const before = [...shown][0]!;
    wall += 30_000;
    expect(clock.toWall(deadline)).toBe(before + 30_000);
    // So does a slow drift, once it passes a millisecond.
    wall += 2;
    expect(clock.toWall(deadline)).toBe(before + 30_002);
  });
});
