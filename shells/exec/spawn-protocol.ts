/**
 * Messages between the agent's process (spawn-client.ts) and its spawn
 * helper (spawn-helper.ts), over the helper's IPC channel with Node's
 * "advanced" serialization (Uint8Array payloads travel as bytes). Local to one
 * machine and one agent version: nothing here is protocol.
 */
import type { ExitInfo, ProcessSpec } from "./process-runner.js";

export type ToHelper =
  /** `record`: the helper writes the spawn-time identity record itself, before it reports the pid. */
  | { t: "spawn"; id: number; spec: ProcessSpec; record?: { dir: string; uuid: string } }
  | { t: "stdin"; id: number; n: number; data: Uint8Array }
  | { t: "closeStdin"; id: number }
  | { t: "terminate"; id: number }
  | { t: "pause"; id: number }
  | { t: "resume"; id: number }
  /** A terminal's command: set its window size. */
  | { t: "resize"; id: number; rows: number; cols: number };

export type FromHelper =
  | { t: "ready"; pid: number }
  | { t: "spawned"; id: number; pid: number }
  | { t: "spawnError"; id: number; code: string; message: string }
  /** s: 0 stdout, 1 stderr */
  | { t: "out"; id: number; s: 0 | 1; data: Uint8Array }
  | { t: "exit"; id: number; info: ExitInfo }
  | { t: "stdinDone"; id: number; n: number; err?: string };
