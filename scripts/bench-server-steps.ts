// What one server core step costs as the fleet grows: the same step timed
// over a small world and a large one in the same invocation, and the ratio.
// A ratio near 1 means the step does not walk what the fleet holds (the
// indexes in core/server/active.ts, heartbeats.ts and timers.ts; see
// docs/ARCHITECTURE.md, "Server node"). Core steps only, in the test rig
// with its per-step invariants off: no network, no storage. Timings are
// printed, not asserted (tests count lookups instead: test/core/server/).
//
//   npx tsx scripts/bench-server-steps.ts [--small N] [--scale K]
//
// --small: the small world's size (default 10); --scale: how many times
// larger each large world is than its default (default 1).
import type { ServerEffect, ServerInput } from "../core/index.js";
import { serverStep } from "../core/index.js";
import { Code } from "../core/errors.js";
import { CommandLifecycle as L } from "../protos/gen/rvbox/v1/common_pb.js";
import { lifecycle, ServerRig } from "../test/support/server-rig.js";
import { testPorts } from "../test/support/ports.js";

const argv = process.argv.slice(2);
const flag = (name: string, d: number): number => {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(argv[i + 1]) : d;
  if (!Number.isFinite(v) || v <= 0) {
    console.error(`--${name} wants a positive number, got ${argv[i + 1]}`);
    process.exit(2);
  }
  return v;
};
const SMALL = flag("small", 10);
const SCALE = flag("scale", 1);

/** The rig without its per-step invariants (they walk everything, by design) and without a copy of what is persisted. */
class Rig extends ServerRig {
  constructor() {
    super();
    this.store = false;
  }
  override step(input: ServerInput): ServerEffect[] {
    const effects = serverStep(this.st, input, this.now, { ports: testPorts }, this.now).effects;
    let last: number | undefined;
    for (const e of effects) if (e.type === "persist") last = e.id;
    return last === undefined ? effects : [...effects, ...this.step({ type: "durable", through: last })];
  }
}

/** Microseconds per call of `step` (the median of 5 rounds of `k` calls, after one warm-up round). */
function perStep(k: number, step: (i: number) => void): number {
  const rounds: number[] = [];
  let i = 0;
  for (let r = 0; r < 6; r++) {
    const t0 = performance.now();
    for (let j = 0; j < k; j++) step(i++);
    if (r > 0) rounds.push(((performance.now() - t0) / k) * 1000);
  }
  return rounds.sort((a, b) => a - b)[2]!;
}

/** One activity input (an agent's frame arrived) on `conn`: the commonest step there is. */
function activity(r: Rig, conns: number[]): (i: number) => void {
  return (i) => {
    r.now += 1;
    serverStep(r.st, { type: "activity", conn: conns[i % conns.length]! }, r.now, { ports: testPorts }, r.now);
  };
}

interface Scenario {
  name: string;
  large: number;
  /** Steps per round (default 2,000): fewer where each step leaves a command behind in the history. */
  steps?: number;
  /** Builds a world of size n and returns the step to time. */
  build(n: number): (i: number) => void;
}

const scenarios: Scenario[] = [
  {
    name: "commands queued for an offline client",
    large: 20_000,
    build(n) {
      const r = new Rig();
      r.step({ type: "conn_closed", conn: r.connect("off"), reason: "gone" });
      for (let i = 0; i < n; i++) r.submit("off", `q${i}`);
      const c = r.connect("a");
      r.running(c, "x");
      return activity(r, [c]);
    },
  },
  {
    name: "a queue expiry passes with n queued for an offline client",
    large: 20_000,
    steps: 200,
    build(n) {
      // Submitted 10 ms apart, so each expiry passes on its own; one more submitted each time keeps n waiting.
      const r = new Rig();
      r.step({ type: "conn_closed", conn: r.connect("off"), reason: "gone" });
      let next = 0;
      const submit = (): void => {
        r.now += 10;
        r.submit("off", `q${next++}`);
      };
      for (let i = 0; i < n; i++) submit();
      let oldest = 0;
      return () => {
        r.now = Math.max(r.now, r.st.commands.get(`q${oldest++}`)!.queueExpiry);
        r.step({ type: "tick" });
        submit();
      };
    },
  },
  {
    name: "commands queued behind an agent with no free capacity",
    large: 8_000,
    build(n) {
      const r = new Rig();
      const busy = r.connect("busy", "i", { maxRunningCommands: 2, maxQueuedCommands: 2 });
      const other = r.connect("b");
      for (let i = 0; i < n; i++) r.submit("busy", `q${i}`);
      return activity(r, [busy, other]);
    },
  },
  {
    name: "a command through an agent with n queued behind it",
    large: 8_000,
    build(n) {
      // Accepted, running, succeeded, and one more submitted to keep the backlog at n.
      const r = new Rig();
      const busy = r.connect("busy", "i", { maxRunningCommands: 2, maxQueuedCommands: 2 });
      for (let i = 0; i < n; i++) r.submit("busy", `q${i}`);
      let oldest = 0;
      let submitted = n;
      return () => {
        while (r.st.commands.get(`q${oldest}`)?.state !== L.DISPATCHED) oldest++;
        const uuid = `q${oldest}`;
        r.now += 1;
        r.accept(busy, uuid);
        r.event(busy, uuid, 1, lifecycle(L.RUNNING));
        r.event(busy, uuid, 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
        r.submit("busy", `q${submitted++}`);
      };
    },
  },
  {
    name: "a CommandAccepted among n unanswered dispatches (fan-out)",
    large: 4_000,
    steps: 1_000,
    build(n) {
      // One command on each of n agents, all dispatched at once; each step is the answer of the next agent in turn
      // (accepted), and one more command submitted to it keeps n dispatches unanswered.
      const r = new Rig();
      const conns = Array.from({ length: n }, (_, a) => r.connect(`h${a}`));
      const next = new Array<number>(n).fill(0);
      for (let a = 0; a < n; a++) r.submit(`h${a}`, `h${a}-${next[a]!++}`);
      return (i) => {
        const a = i % n;
        r.now += 1;
        r.accept(conns[a]!, `h${a}-${next[a]! - 1}`);
        r.submit(`h${a}`, `h${a}-${next[a]!++}`);
      };
    },
  },
  {
    name: "n commands waiting out a CAPACITY backoff (another agent's step)",
    large: 4_000,
    build(n) {
      // One command on each of n agents, each rejected CAPACITY: requeued with a backoff of up to a second at first.
      // The clock stays put, so none comes due while the steps are timed.
      const r = new Rig();
      const conns = Array.from({ length: n }, (_, a) => r.connect(`h${a}`));
      const other = r.connect("other");
      for (let a = 0; a < n; a++) r.submit(`h${a}`, `h${a}-0`);
      for (let a = 0; a < n; a++) r.accept(conns[a]!, `h${a}-0`, false, Code.CAPACITY, "agent full");
      return () => void serverStep(r.st, { type: "activity", conn: other }, r.now, { ports: testPorts }, r.now);
    },
  },
  {
    name: "a command through one of n agents, 20 queued behind each",
    large: 1_000,
    steps: 1_000,
    build(n) {
      // The backlog spread over a fleet: every agent full (2 running, 2 queued on it) with 20 more waiting on the
      // server; each step takes a command of the next agent in turn through accept, running and exit, and submits one more.
      const r = new Rig();
      const caps = { maxRunningCommands: 2, maxQueuedCommands: 2 };
      const conns = Array.from({ length: n }, (_, a) => r.connect(`h${a}`, "i", caps));
      const submitted = new Array<number>(n).fill(0);
      const oldest = new Array<number>(n).fill(0);
      for (let a = 0; a < n; a++) for (let i = 0; i < 24; i++) r.submit(`h${a}`, `h${a}-q${submitted[a]!++}`);
      return (i) => {
        const a = i % n;
        while (r.st.commands.get(`h${a}-q${oldest[a]}`)?.state !== L.DISPATCHED) oldest[a]!++;
        const uuid = `h${a}-q${oldest[a]}`;
        r.now += 1;
        r.accept(conns[a]!, uuid);
        r.event(conns[a]!, uuid, 1, lifecycle(L.RUNNING));
        r.event(conns[a]!, uuid, 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
        r.submit(`h${a}`, `h${a}-q${submitted[a]!++}`);
      };
    },
  },
  {
    name: "idle agents connected",
    large: 5_000,
    build(n) {
      const r = new Rig();
      return activity(
        r,
        Array.from({ length: n }, (_, i) => r.connect(`h${i}`)),
      );
    },
  },
  {
    name: "agents each running one command",
    large: 2_000,
    build(n) {
      const r = new Rig();
      const conns = Array.from({ length: n }, (_, i) => r.connect(`h${i}`));
      conns.forEach((c, i) => r.running(c, `x${i}`));
      r.step({ type: "tick" });
      return activity(r, conns);
    },
  },
  {
    name: "an agent re-registers (open, hello, snapshot) among n",
    large: 5_000,
    build(n) {
      const r = new Rig();
      for (let i = 0; i < n; i++) r.connect(`h${i}`);
      // Each one fences its own older session, as after a network blip or a server restart.
      return (i) => {
        r.now += 1;
        r.connect(`h${i % n}`);
      };
    },
  },
];

console.log(`server core step, small world (n=${SMALL}) against large (scale ${SCALE}); median of 5 rounds`);
for (const s of scenarios) perStep(Math.min(500, s.steps ?? 500), s.build(SMALL)); // warm the JIT up on every path first
for (const s of scenarios) {
  const large = Math.round(s.large * SCALE);
  const k = s.steps ?? 2_000;
  const small = perStep(k, s.build(SMALL));
  const big = perStep(k, s.build(large));
  console.log(
    `  ${s.name.padEnd(66)} n=${String(SMALL).padStart(5)}: ${small.toFixed(1).padStart(7)} us   n=${String(large).padStart(6)}: ${big.toFixed(1).padStart(7)} us   ratio ${(big / small).toFixed(2)}x`,
  );
}
