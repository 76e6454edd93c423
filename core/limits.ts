// Every bound RVBox keeps, by name. Numbers from the spec (agent-protocol.md,
// architecture.md) are marked "spec"; the rest are RVBox's choices. Configs
// may override the configurable ones; nothing else in core/ writes a literal
// bound.

export const KiB = 1024;
export const MiB = 1024 * KiB;

/** spec: a decoded envelope may not exceed 1 MiB. */
export const MAX_ENVELOPE_BYTES = 1 * MiB;
/** spec: a chunk's uncompressed payload may not exceed 64 KiB. */
export const MAX_CHUNK_BYTES = 64 * KiB;
/** spec: script size limit. */
export const MAX_SCRIPT_BYTES = 16 * MiB;
/** A script chunk carried in one ScriptChunk (also the spec's chunk limit). */
export const SCRIPT_CHUNK_BYTES = MAX_CHUNK_BYTES;
/** Unacknowledged script bytes the server keeps in flight per command. */
export const SCRIPT_UPLOAD_WINDOW_BYTES = 256 * KiB;

/** spec: heartbeat ping after this long without inbound activity. */
export const HEARTBEAT_PING_AFTER_MS = 10_000;
/** spec: session dead after this long without inbound activity. */
export const HEARTBEAT_DEAD_AFTER_MS = 30_000;
/** spec: reconnect backoff, full jitter. */
export const BACKOFF_INITIAL_MS = 1_000;
export const BACKOFF_CAP_MS = 60_000;
/** spec: a session stable this long resets the backoff. */
export const BACKOFF_STABLE_RESET_MS = 60_000;
/** spec: one-shot instance authorization default lifetime. */
export const AUTHORIZATION_TTL_MS = 5 * 60_000;
/** Pending identity claims remembered per client id (newest wins). */
export const MAX_PENDING_CLAIMS_PER_CLIENT = 1;
/** Displaced instances a client record remembers (ClientRecord.replaced: the latest only). */
export const MAX_REPLACED_INSTANCES_PER_CLIENT = 1;
/** Known client ids a refused submit to an unknown one names at most (closest first). */
export const MAX_CLIENT_SUGGESTIONS = 3;
/** Edit distance up to which a known client id counts as close to a mistyped one. */
export const CLIENT_SUGGESTION_MAX_DISTANCE = 3;

/** spec: unacknowledged encoded wire bytes per command and per session. */
export const WINDOW_PER_COMMAND_BYTES = 1 * MiB;
export const WINDOW_PER_SESSION_BYTES = 8 * MiB;
/**
 * Part of each window that output may never use, so that a truncation
 * marker, an incomplete marker and the final lifecycle event always fit
 * (R-W9).
 */
export const WINDOW_METADATA_RESERVE_BYTES = 16 * KiB;

/** Agent storage budget tiers (architecture.md). */
export const AGENT_METADATA_BUDGET_BYTES = 16 * MiB;
export const AGENT_OUTPUT_PER_COMMAND_BYTES = 64 * MiB;
export const AGENT_OUTPUT_TOTAL_BYTES = 512 * MiB;
/** Raw unsequenced output watermarks on the agent. */
export const AGENT_RAW_HIGH_WATERMARK_BYTES = 32 * MiB;
export const AGENT_RAW_LOW_WATERMARK_BYTES = 16 * MiB;
/** Metadata bytes charged up front when a command is admitted. */
export const AGENT_METADATA_PER_COMMAND_BYTES = 64 * KiB;
/** Stdin bytes an agent holds for one command before they reach the child. */
export const AGENT_STDIN_PENDING_BYTES = 1 * MiB;
/**
 * Stdin writes (and a close) per command the server keeps sent but not
 * acknowledged, and the agent holds before they reach the child: empty writes
 * cost no bytes, so the byte bounds alone do not bound their number.
 */
export const STDIN_WRITES_IN_FLIGHT = 1024;
/**
 * The agent's ReconcileSnapshot stays this far below MAX_ENVELOPE_BYTES.
 * Requested UUIDs found in the tombstone ledger that would not fit are left
 * out (the server then treats them as unknown to the agent: interrupted, with
 * an incident), so no ReconcileRequest can make the snapshot too large.
 */
export const AGENT_SNAPSHOT_SLACK_BYTES = 64 * KiB;

/** Server storage tiers. */
export const SERVER_METADATA_BUDGET_BYTES = 64 * MiB;
/**
 * What one command record is charged against that tier (history.ts): a base
 * for the record and its indexes, plus its spec, plus per stored row event,
 * per remembered digest and per segment or retention entry.
 */
export const SERVER_RECORD_BASE_BYTES = 1 * KiB;
export const SERVER_EVENT_ROW_BYTES = 256;
export const SERVER_DIGEST_BYTES = 32;
export const SERVER_SEGMENT_ENTRY_BYTES = 128;
/** Active commands may take at most this share of the metadata tier (the rest is for final states and history). */
export const SERVER_ACTIVE_METADATA_SHARE = 0.75;
/** Terminal commands are pruned this long after they end, whatever the budget. */
export const SERVER_HISTORY_MS = 30 * 24 * 60 * 60_000;
/** Compact records of pruned commands kept, oldest forgotten first (~300 bytes each). */
export const SERVER_PRUNED_LEDGER_MAX = 100_000;
/**
 * With the history in the store (limits.historyInStore, issue 39): ended
 * commands held in memory at most, newest kept; older ones are read back from
 * the store. Memory then grows with live commands, not with history.
 */
export const SERVER_HISTORY_HELD = 1_000;
/**
 * The ledger's default when the store keeps the history: it then only has to
 * answer late frames and reconcile snapshots about recently pruned commands
 * (a repeated submit is answered from the store), beside the historyHeld
 * ended commands memory holds whole. Each entry is small once built (about
 * 120 bytes of live heap) but a start builds it from decoded rows, whose
 * garbage the process keeps as RSS: 10,000 cost 24 MiB of RSS at start
 * (npm run bench:history), 1,000 about 3.
 */
export const SERVER_PRUNED_LEDGER_IN_STORE = 1_000;
/** Commands pruned in one step at most (the rest wait for the next wake). */
export const SERVER_PRUNES_PER_STEP = 256;
export const SERVER_OUTPUT_PER_COMMAND_BYTES = 256 * MiB;
export const SERVER_OUTPUT_PER_CLIENT_BYTES = 4096 * MiB;
/** Server retention drops stored output a segment at a time. */
export const SERVER_SEGMENT_BYTES = 4 * MiB;
/** Encoded bytes the server holds received but not yet durable, per session. */
export const SERVER_INGRESS_HIGH_WATERMARK_BYTES = 16 * MiB;
/**
 * Stdin bytes the server keeps in flight (sent, not acknowledged) per command.
 * As large as the agent's AGENT_STDIN_PENDING_BYTES and no larger: the agent
 * holds what is in flight until it reaches the child, and refuses more (the
 * server counts each write one byte larger than the agent does). Each window
 * costs a round trip of durable commits on both sides (the write, its
 * sequenced acknowledgement, R-S1), so this sets `rvbox run -i` throughput.
 */
export const SERVER_STDIN_WINDOW_BYTES = 1 * MiB;
/**
 * Bytes one operator stdin write (the control API's WriteStdin) may carry.
 * The server splits it into StdinWrites of at most MAX_CHUNK_BYTES, one
 * write_seq each, so a writer moves up to this much per durable round trip.
 */
export const CONTROL_STDIN_WRITE_BYTES = 1 * MiB;
/** Stdin bytes waiting at the server per command. */
export const SERVER_STDIN_QUEUE_BYTES = 4 * MiB;

/** Commands an agent retains (non-terminal plus terminal-unacknowledged). */
export const MAX_RETAINED_COMMANDS = 4096;
/** Tombstones kept in the compact ledger; the oldest is forgotten first. */
export const MAX_TOMBSTONES = 65_536;
/** Commands the server keeps dispatched but unanswered per session. */
export const MAX_INFLIGHT_DISPATCHES = 256;
/** Commands the server keeps non-terminal per client. */
export const MAX_ACTIVE_COMMANDS_PER_CLIENT = 10_000;
/**
 * Targets one ReconcileRequest names at most (R-D6: in-flight commands first,
 * then queued ones, oldest first). A target encodes to at most ~90 bytes, so
 * the request stays well inside one envelope; the rest of a longer queue is
 * dispatched normally after the result (a tombstone hit then answers the
 * dispatch with CODE_ALREADY_EXECUTED, R-D5).
 */
export const MAX_RECONCILE_TARGETS = 8_192;
/** Redeliver a CommandDispatch/stdin/signal not answered within this time. */
export const REDELIVERY_TIMEOUT_MS = 30_000;
/** Capacity-rejection requeue backoff. */
export const CAPACITY_RETRY_INITIAL_MS = 1_000;
export const CAPACITY_RETRY_CAP_MS = 60_000;
/** A command without an explicit queue expiry gets this one: it bounds retries. */
export const DEFAULT_QUEUE_EXPIRY_MS = 24 * 60 * 60_000;
/**
 * Stored non-output events (lifecycle, acks, markers) per command beyond one
 * per stdin write, per revision and per script chunk: an agent that sends more
 * is closed with CODE_CAPACITY (a legitimate one sends a handful).
 */
export const SERVER_ROW_EVENTS_PER_COMMAND = 4096;
/** Retained recent event digests per command at the server (duplicate checks). */
export const SERVER_RECENT_DIGESTS = 1024;
/** Client id: 1..128 ASCII characters (spec). */
export const MAX_CLIENT_ID_CHARS = 128;
export const MAX_INSTANCE_ID_CHARS = 128;
/** Validation bounds of an ExecutionSpec. */
export const MAX_ARGV_ITEMS = 4096;
export const MAX_ENV_ITEMS = 1024;
export const MAX_SPEC_STRING_BYTES = 128 * KiB;
/**
 * Incidents kept open (unacknowledged) at once, over all clients. When it is
 * reached, a new incident of a client holding fewer open incidents than the
 * heaviest client takes the place of that client's newest one (which is
 * counted as dropped), so one client's flood never hides another's incident.
 */
export const MAX_OPEN_INCIDENTS = 10_000;
/** Open incidents kept per client; past it that client's incidents are counted (per client and in total, durably), not stored. */
export const MAX_OPEN_INCIDENTS_PER_CLIENT = 100;
/** Grace between TERMINATE and KILL for cancel (shells apply it). */
export const CANCEL_GRACE_MS = 5_000;
/** Script bytes an agent holds across all commands. */
export const AGENT_SCRIPT_TOTAL_BYTES = 64 * MiB;
/** Human-readable reasons carried in events are cut to this length. */
export const MAX_REASON_CHARS = 1024;
/** Signal requests a command may have outstanding (sent, not yet answered). */
export const MAX_PENDING_SIGNALS = 64;
/** request_id -> revision/write_seq entries remembered per command for idempotent retries. */
export const MAX_REQUEST_IDS_PER_COMMAND = 1024;
/** Incidents kept in all (open and acknowledged); the oldest acknowledged go first. */
export const MAX_INCIDENTS_KEPT = 20_000;
/**
 * Client records the server keeps (default of the configurable
 * `limits.maxClients`). A hello naming a new client id past it is refused
 * with CODE_CAPACITY and creates no record; an operator forgets unused
 * clients with `rvbox forget-client`.
 */
export const MAX_CLIENTS = 10_000;
/** Connections the server holds at once (registered or not). */
export const MAX_SERVER_CONNECTIONS = 20_000;
/**
 * Stale heartbeat entries the server's deadline heap may hold beyond twice its
 * open connections before it is rebuilt (core/server/heartbeats.ts).
 */
export const HEARTBEAT_HEAP_SLACK = 64;
/**
 * Stale entries each of the server's kept-wake heaps may hold beyond twice the
 * active commands before they are rebuilt (core/server/timers.ts).
 */
export const WAKE_HEAP_SLACK = 64;
/**
 * Stale entries a client's heap of parked commands may hold beyond twice its
 * parked commands before it is rebuilt (core/server/active.ts).
 */
export const PARKED_HEAP_SLACK = 64;
/**
 * Stale entries the server's heap of queue expiries may hold beyond twice the
 * queued commands before it is rebuilt (core/server/active.ts).
 */
export const EXPIRY_HEAP_SLACK = 64;
/**
 * Labels of one client (core/server/labels.ts): at most this many key=value
 * pairs; a set_labels request that would leave more is refused whole.
 */
export const MAX_LABELS_PER_CLIENT = 32;
/** A label key: 1..63 characters, [a-z0-9] first, then [a-z0-9._/-]. */
export const MAX_LABEL_KEY_CHARS = 63;
/** A label value: 1..63 characters, [A-Za-z0-9] first, then [A-Za-z0-9._-]. */
export const MAX_LABEL_VALUE_CHARS = 63;
/** A label selector's text (rvbox clients -l, run -l): at most this many characters. */
export const MAX_SELECTOR_CHARS = 1024;
/** Requirements (comma-separated terms) one selector holds at most. */
export const MAX_SELECTOR_TERMS = 32;
/**
 * Audit log entries the server keeps (default of the configurable
 * `limits.auditMax`): past it the oldest are deleted and counted, and every
 * listing says how many older entries were dropped (never silently short).
 */
export const MAX_AUDIT_ENTRIES = 50_000;
/**
 * Aggregated refusals the server keeps (default of the configurable
 * `limits.auditRefusalMax`), apart from the audit log so a flood of refused
 * calls never pushes an accepted call's entry out: past it the oldest go
 * first and are counted (durably), like the audit log's.
 */
export const MAX_AUDIT_REFUSALS = 10_000;
/** Refused calls of one identity to one RPC for one reason are counted in one refusal entry for this long from its first (ms). */
export const AUDIT_REFUSAL_WINDOW_MS = 60_000;
/** An audit entry's argument summary is cut to this many characters (with a trailing "…"). */
export const MAX_AUDIT_SUMMARY_CHARS = 512;
/** An audit entry's message is cut to this many characters. */
export const MAX_AUDIT_MESSAGE_CHARS = 512;
/** Client ids one audit entry lists; more are counted (clientsOmitted). */
export const MAX_AUDIT_CLIENTS_PER_ENTRY = 64;
/** Audit entries one ListAudit call returns at most. */
export const MAX_AUDIT_PAGE_ENTRIES = 10_000;
/** Jobs the server holds; at the bound the oldest ended job is forgotten, and a submit is refused (CODE_CAPACITY) while all are active. */
export const MAX_JOBS = 1_000;
/** Target clients of one job. */
export const MAX_JOB_TARGETS = 2_048;
/** A job id: 1..MAX_JOB_ID_CHARS of [A-Za-z0-9._:-] (its children's uuids add `.n`). */
export const MAX_JOB_ID_CHARS = 100;
/** An issue uuid: 1..MAX_ISSUE_UUID_CHARS of [A-Za-z0-9._:-] (submit.ts); a longer one names no command. */
export const MAX_ISSUE_UUID_CHARS = 128;
/** A control request id (idempotent retries; the CLI sends a 36-character UUID). */
export const MAX_REQUEST_ID_CHARS = 256;
/** An incident id (the server mints short ones). */
export const MAX_INCIDENT_ID_CHARS = 128;
/** A listing's page token (the server's: a decimal offset, or ListCommands' `created_at:uuid`). */
export const MAX_PAGE_TOKEN_CHARS = 24 + MAX_ISSUE_UUID_CHARS;
/** An operator name (--identities: 1..64 characters). */
export const MAX_OPERATOR_NAME_CHARS = 64;
/**
 * FollowOutput streams the control API keeps open at once (default of the
 * configurable `limits.maxFollowStreams`); each holds at most one batch in
 * the server. Past it a new one is refused with RESOURCE_EXHAUSTED.
 */
export const MAX_FOLLOW_STREAMS = 128;
/** FollowOutput streams one operator identity keeps open at once (`limits.maxFollowStreamsPerIdentity`). */
export const MAX_FOLLOW_STREAMS_PER_IDENTITY = 64;
/** Of `maxFollowStreams`, the share only admins may open (`limits.followStreamsAdminReserve`), so an admin always gets in. */
export const FOLLOW_STREAMS_ADMIN_RESERVE = 16;
/** A terminal's window size (`rvbox run -t`, protocol 1.1): rows and columns are each 1..MAX_TERMINAL_CELLS. */
export const MAX_TERMINAL_CELLS = 1_000;
/** A terminal's TERM name: at most this many characters of [A-Za-z0-9._+-]. */
export const MAX_TERM_NAME_CHARS = 64;
