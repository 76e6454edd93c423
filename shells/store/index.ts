/**
 * Durable embedded SQL store (sql.js + append-only journal + group commit +
 * checkpoints). See durable-db.ts for the theory of operation and journal.ts
 * for the on-disk formats.
 */
export {
  openDurableDb,
  DurableDb,
  StoreError,
  DEFAULT_CHECKPOINT_EVERY_BYTES,
  JOURNAL_FILE,
  SNAPSHOT_FILE,
  type DurableDbOptions,
  type DurableDbStats,
  type IncidentInfo,
  type Param,
  type RecoveryReport,
  type SqlValue,
  type Stmt,
} from "./durable-db.js";
export { scanJournal, type ScanResult, type JournalRecord } from "./journal.js";
