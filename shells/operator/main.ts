/**
 * Standalone entry of the operator CLI: `npx tsx shells/operator/main.ts
 * <command> ...`. Same code path as `rvbox <command>` once bin/rvbox.ts routes
 * the operator commands to runOperatorCli.
 */
import { runOperatorCli } from "./cli.js";

runOperatorCli(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
