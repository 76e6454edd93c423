// WatchFleet's server-side cost at fleet scale, without a network: one
// FleetWatch over a server state with N clients, N live sessions and M
// commands. Prints the cost of a flush when nothing changed (what every
// reducer step with a watcher ends up paying at most 10 times a second),
// when every client changed, and of one snapshot (a new watcher, or an
// overflow). Timings are printed, not asserted (tests never assert times).
//
//   npx tsx scripts/bench-watch.ts [clients=1000] [commands=100000]
import { create } from "@bufbuild/protobuf";
import { defaultServerConfig, newServer, type ServerCommand, type ServerState } from "../core/index.js";
import { CommandLifecycle, ExecutionSpecSchema } from "../protos/gen/rvbox/v1/common_pb.js";
import { FleetWatch } from "../shells/server/fleet-watch.js";

const N = Number(process.argv[2] ?? 1000);
const M = Number(process.argv[3] ?? 100_000);
const now = Date.now();
const st: ServerState = newServer(defaultServerConfig(), 1);
const spec = create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["true"] } } });
for (let i = 0; i < N; i++) {
  const id = `host-${i}`;
  st.clients.set(id, {
    clientId: id,
    generation: 1,
    instanceId: `inst-${i}`,
    conn: i + 1,
    draining: false,
    labels: {},
    pendingClaim: null,
    authorization: null,
    replaced: null,
    capacity: { running: 1, queued: 0, maxRunning: 4, maxQueued: 16 },
    lastSeen: now,
  });
  st.conns.set(i + 1, {
    conn: i + 1,
    phase: "ready",
    clientId: id,
    instanceId: `inst-${i}`,
    sessionId: `s${i}`,
    generation: 1,
    version: null,
    hb: { lastInbound: now, pinged: false },
    ingressPending: 0,
    inflight: 0,
    openedAt: now,
    snapshotReceived: true,
    hbOrder: i + 1,
  });
}
for (let j = 0; j < M; j++) {
  const state = CommandLifecycle.SUCCEEDED;
  st.commands.set(`cmd-${j}`, {
    uuid: `cmd-${j}`,
    clientId: `host-${j % N}`,
    hash: "",
    revision: 1,
    spec,
    createdAt: now - (M - j),
    queueExpiry: now + 86_400_000,
    committed: { state, exitCode: 0, signalName: "", reason: "", storedThrough: 3, revision: 1, stdinAssigned: 0 },
    state,
    terminalSource: "agent",
    storedOutputBytes: 0,
    retention: [],
    attempts: 1,
    stdin: { nextSeq: 1, ackedThrough: 0, sentThrough: 0, queue: [], queuedBytes: 0, closeRequested: false },
  } as unknown as ServerCommand);
}
const reader = {
  state: st,
  lastActivity: new Map<string, number>(),
  sessionInfo: () => ({ remote: "127.0.0.1:1", lastInbound: now }),
  toWall: (t: number) => t,
};
const watch = new FleetWatch(reader, { flushMs: 1e9 });

const time = (what: string, runs: number, fn: () => void): void => {
  fn();
  const t = performance.now();
  for (let i = 0; i < runs; i++) fn();
  console.log(`${what.padEnd(58)} ${((performance.now() - t) / runs).toFixed(2)} ms`);
};

console.log(`FleetWatch: ${N} clients, ${N} sessions, ${M} commands`);
const subscribe = (clients: string[]) => {
  const w = watch.subscribe(clients);
  if (!w) throw new Error("watcher refused: too many open");
  return w;
};
time("subscribe (flush + snapshot, no commands)", 5, () => watch.unsubscribe(subscribe([])));
time(`subscribe (flush + snapshot, "*" = newest 500 of ${M})`, 5, () => watch.unsubscribe(subscribe(["*"])));
const w = subscribe(["*"]);
time("flush, nothing changed", 50, () => watch.flush());
let k = 0;
time(`flush, all ${N} clients changed`, 20, () => {
  k++;
  for (const c of st.clients.values()) c.capacity.running = k % 4;
  watch.flush();
  w.queue.length = 0;
});
time("flush, one command changed (after its durable)", 50, () => {
  watch.afterStep({ type: "tick" }, [{ type: "persist", id: ++k, records: [{ table: "command", key: "cmd-1", value: null }] }]);
  watch.afterStep({ type: "durable", through: k }, []);
  watch.flush();
  w.queue.length = 0;
});
watch.close();
