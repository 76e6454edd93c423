/**
 * A read of the server's PostgreSQL store that failed because the database
 * is away (restarting, unreachable: pg-writer.ts `transientDbError`) is
 * UNAVAILABLE for the reader, with what to do, not an internal error: the
 * reader follows again from the last event it got once the server is ready.
 */
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { describeDbError, transientDbError } from "../storage/pg-writer.js";

export function storeReadUnavailable(err: unknown, onPostgres: boolean): ConnectError | null {
  if (!onPostgres || err instanceof ConnectError || !transientDbError(err)) return null;
  return new ConnectError(
    `the server's store is not answering reads (${describeDbError(err)}): follow again from the last event seq once the server is ready (/readyz)`,
    ConnectCode.Unavailable,
  );
}
