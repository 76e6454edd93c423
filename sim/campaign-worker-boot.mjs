// Worker threads do not inherit tsx's loader: register it, then load the TS worker.
import { register } from "tsx/esm/api";
register();
await import("./campaign-worker.ts");
