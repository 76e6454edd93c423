/**
 * rvbox's entry: runs the command line (bin/rvbox-main.ts) and exits with its code.
 */
import { main } from "./rvbox-main.js";

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
