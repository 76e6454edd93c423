/**
 * Minimal typed loader for sql.js (SQLite compiled to WebAssembly). sql.js ships
 * no TypeScript types and is CommonJS, so it is loaded with `createRequire` and
 * typed here with only the members this package uses (no ambient
 * `declare module`, so it cannot clash with other declarations).
 */
import { createRequire } from "node:module";

export type SqlValue = number | string | Uint8Array | bigint | null;

export interface SqlJsStatement {
  bind(values?: SqlValue[]): boolean;
  step(): boolean;
  reset(): boolean;
  getAsObject(params?: null, config?: { useBigInt?: boolean }): Record<string, SqlValue>;
  free(): boolean;
}

export interface SqlJsDatabase {
  run(sql: string, params?: SqlValue[]): SqlJsDatabase;
  exec(sql: string): Array<{ columns: string[]; values: SqlValue[][] }>;
  prepare(sql: string): SqlJsStatement;
  export(): Uint8Array;
  close(): void;
}

export interface SqlJsStatic {
  Database: new (data?: Uint8Array | null) => SqlJsDatabase;
}

type InitSqlJs = (config?: { locateFile?: (file: string) => string }) => Promise<SqlJsStatic>;

const require = createRequire(import.meta.url);
let loading: Promise<SqlJsStatic> | null = null;

/** Loads (once per process) and returns the sql.js module. */
export function loadSqlJs(): Promise<SqlJsStatic> {
  if (!loading) {
    const init = require("sql.js") as InitSqlJs;
    const wasmPath = require.resolve("sql.js/dist/sql-wasm.wasm");
    loading = init({ locateFile: () => wasmPath });
    loading.catch(() => {
      loading = null;
    });
  }
  return loading;
}
