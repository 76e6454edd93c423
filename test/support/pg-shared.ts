// One throwaway PostgreSQL cluster per test file (test/support/pg-cluster.ts),
// shared by every test of the file that needs one; each takes a database of
// its own. Kept apart from pg-cluster.ts, which the benches import outside
// vitest.
import { afterAll } from "vitest";
import { type PgCluster, startPgCluster } from "./pg-cluster.js";

export interface SharedPgCluster {
  /** The file's cluster, started on first use. */
  cluster(): Promise<PgCluster>;
  /** A fresh, empty database in the file's cluster (`name` plus a counter), as a URL. */
  database(name?: string): Promise<string>;
}

/**
 * One throwaway cluster for the calling test file: started on first use (so a
 * run filtered to tests that need none starts none), stopped after the file's
 * (or the calling describe's) last test. Call it at the top level of a test
 * file or in a describe body: it registers that afterAll.
 */
export function sharedPgCluster(): SharedPgCluster {
  let started: Promise<PgCluster> | undefined;
  let made = 0;
  afterAll(async () => {
    const c = started;
    started = undefined;
    await (await c?.catch(() => undefined))?.stop();
  });
  const shared: SharedPgCluster = {
    cluster: () => (started ??= startPgCluster()),
    async database(name = "db") {
      return (await shared.cluster()).createDatabase(`${name}_${++made}`);
    },
  };
  return shared;
}
