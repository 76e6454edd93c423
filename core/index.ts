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
export * from "./reconcile/classify.js";
export * from "./agent/agent-types.js";
export { agentStep, agentInvariants, newAgent, restoreAgent, defaultAgentConfig } from "./agent/node.js";
export * from "./server/server-types.js";
export { serverStep, serverInvariants, newServer, restoreServer, defaultServerConfig } from "./server/server-node.js";
export { requestDigest } from "./server/server-commands.js";
export { missingMessage, metaCharge } from "./server/server-history.js";
