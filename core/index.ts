// Public surface of the pure core.
export * from "./errors.js";
export * from "./limits.js";
export * from "./effects.js";
export * from "./ports.js";
export * from "./rng.js";
export * from "./bytes.js";
export * from "./codec/frame-codec.js";
export * from "./codec/version.js";
export * from "./dispatch/lifecycle.js";
export { checkDispatchSize, checkSpecLimits } from "./dispatch/spec-limits.js";
export * from "./reconcile/classify.js";
export * from "./agent/agent-types.js";
export { agentStep, agentInvariants, newAgent, restoreAgent, defaultAgentConfig } from "./agent/node.js";
export * from "./server/server-types.js";
export { serverStep } from "./server/node.js";
export { serverInvariants } from "./server/invariants.js";
export { newServer, restoreServer, defaultServerConfig, ARCHIVED_TABLE, ledgerRowOf } from "./server/restore.js";
export { requestDigest } from "./server/submit.js";
export { missingMessage } from "./server/history.js";
export { metaCharge } from "./server/metadata.js";
export {
  type Requirement,
  type Selector,
  formatLabels,
  formatSelector,
  matchesSelector,
  parseLabelEdits,
  parseSelector,
  unmetRequirements,
} from "./server/labels.js";
export { closestClients } from "./server/client-names.js";
