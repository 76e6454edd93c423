// The ServerStore contract (store-contract.ts) run against each store: the
// embedded one, and PostgreSQL on a throwaway cluster (never skipped: CI
// installs Debian's postgresql).
import { PgServerStore } from "../../../shells/storage/pg-store.js";
import { ServerStorage } from "../../../shells/storage/server-storage.js";
import { type PgCluster, startPgCluster } from "../../support/pg-cluster.js";
import { cleanupTemp, tempDir } from "../e2e/helpers.js";
import { describeStoreContract } from "./store-contract.js";

describeStoreContract("embedded (sql.js + journal, segment files)", {
  location: () => tempDir("rvbox-contract-"),
  open: (dir) => ServerStorage.open({ dir, segmentBytes: 1000 }),
  cleanup: cleanupTemp,
});

let cluster: Promise<PgCluster> | null = null;
let databases = 0;
describeStoreContract("PostgreSQL", {
  location: async () => {
    cluster ??= startPgCluster();
    return (await cluster).createDatabase(`contract_${++databases}`);
  },
  open: (url) => PgServerStore.open(url),
  cleanup: async () => {
    await (await cluster)?.stop();
  },
});
