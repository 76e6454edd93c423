// The older name of the Pair rig (test/support/pair.ts): one server, any
// number of agents, an in-memory link, disks and a scripted executor. New
// tests import from pair.ts; this module only keeps existing imports working.
export { Disk, Pair as Harness, decode, lenient, type Envelope, type Proc } from "./pair.js";
