/**
 * RVBox shell-side process execution: spawn/supervise one command in its own
 * process group, and write operator scripts to disk with checksum checks.
 */
export {
  startProcess,
  killProcessGroup,
  buildChildEnv,
  safeBaseEnvKeys,
  resolveCommand,
  MAX_OUTPUT_CHUNK_BYTES,
  DEFAULT_KILL_GRACE_MS,
  DEFAULT_DRAIN_TIMEOUT_MS,
  DEFAULT_POSIX_PATH,
} from "./process-runner.js";
export type {
  SignalName,
  ShellName,
  OutputStreamName,
  CommandSpec,
  ProcessOptions,
  ProcessSpec,
  ExitInfo,
  SpawnFailure,
  ProcessHooks,
  ProcessState,
  ProcessHandle,
} from "./process-runner.js";
export { startCommand, startPtyProcess, DEFAULT_TERM } from "./pty-runner.js";
export type { TerminalOptions } from "./process-runner.js";
export { writeScriptFile, isSafeScriptName, SCRIPT_FILE_MODE, SCRIPT_DIR_MODE } from "./script-file.js";
export type { WriteScriptResult, ScriptFileErrorCode } from "./script-file.js";
