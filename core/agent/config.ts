// The agent's configuration defaults (architecture.md); shells and the
// simulator override them per deployment.

import { Platform, ShellType as ShellTypeEnum } from "../../protos/gen/rvbox/v1/common_pb.js";
import { SUPPORTED_PROTOCOL } from "../codec/version.js";
import * as LIM from "../limits.js";
import type { AgentConfig } from "./agent-types.js";

/** Defaults from architecture.md; shells and the simulator override per deployment. */
export function defaultAgentConfig(clientId: string, overrides: Partial<AgentConfig> = {}): AgentConfig {
  return {
    clientId,
    daemonVersion: "rvbox-agent/0.1.0",
    platform: Platform.LINUX,
    architecture: "x86_64",
    daemonCwd: "/",
    supportedShells: [ShellTypeEnum.SH, ShellTypeEnum.BASH],
    maxRunning: 4,
    maxQueued: 16,
    protocol: SUPPORTED_PROTOCOL,
    limits: {
      windowPerCommand: LIM.WINDOW_PER_COMMAND_BYTES,
      windowPerSession: LIM.WINDOW_PER_SESSION_BYTES,
      metadataReserve: LIM.WINDOW_METADATA_RESERVE_BYTES,
      rawHigh: LIM.AGENT_RAW_HIGH_WATERMARK_BYTES,
      rawLow: LIM.AGENT_RAW_LOW_WATERMARK_BYTES,
      outputPerCommand: LIM.AGENT_OUTPUT_PER_COMMAND_BYTES,
      outputTotal: LIM.AGENT_OUTPUT_TOTAL_BYTES,
      metadataBudget: LIM.AGENT_METADATA_BUDGET_BYTES,
      metadataPerCommand: LIM.AGENT_METADATA_PER_COMMAND_BYTES,
      stdinPendingPerCommand: LIM.AGENT_STDIN_PENDING_BYTES,
      scriptTotal: LIM.AGENT_SCRIPT_TOTAL_BYTES,
      maxRetained: LIM.MAX_RETAINED_COMMANDS,
      maxTombstones: LIM.MAX_TOMBSTONES,
    },
    ...overrides,
  };
}
