// The ServerStore contract (store-contract.ts) run against each store.
import { ServerStorage } from "../../../shells/storage/server-storage.js";
import { cleanupTemp, tempDir } from "../e2e/helpers.js";
import { describeStoreContract } from "./store-contract.js";

describeStoreContract("embedded (sql.js + journal, segment files)", {
  location: () => tempDir("rvbox-contract-"),
  open: (dir) => ServerStorage.open({ dir, segmentBytes: 1000 }),
  cleanup: cleanupTemp,
});
