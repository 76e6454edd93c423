#!/usr/bin/env node
// Runs bin/rvbox.ts with tsx's ESM loader registered in this process, so
// `node bin/rvbox.js`, `npx rvbox` / `npm exec rvbox` and a systemd ExecStart
// all work without a build step. Signals and exit codes are the process's own.
import { register } from "tsx/esm/api";

register();
await import("./rvbox.ts");
