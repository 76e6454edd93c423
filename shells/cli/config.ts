/**
 * Flags and config files for the daemons. A config file (`--config FILE`,
 * JSON) takes the same keys as the flags, in kebab-case or camelCase
 * (`"listen"`, `"agent-tokens"` / `"agentTokens"`, ...), plus `"limits"`: an
 * object of the core's configurable limits. Flags win over the file.
 */
import { readFileSync } from "node:fs";
import { parseArgs, type ParseArgsConfig } from "node:util";

export interface HostPort {
  host: string;
  port: number;
}

export function parseHostPort(s: string, what: string): HostPort {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(s.trim());
  if (!m) throw new Error(`${what}: expected HOST:PORT, got ${JSON.stringify(s)}`);
  const port = Number(m[3]);
  if (port > 65535) throw new Error(`${what}: port ${port} out of range`);
  return { host: m[1] ?? (m[2] === "" ? "127.0.0.1" : m[2]!), port };
}

const camel = (k: string): string => k.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

export interface Settings {
  get(name: string): string | undefined;
  bool(name: string): boolean;
  int(name: string): number | undefined;
  object(name: string): Record<string, unknown> | undefined;
}

/**
 * Parse `argv` with the given string/boolean options, merged over the JSON
 * config file named by --config (if that option exists).
 */
export function settings(argv: string[], options: NonNullable<ParseArgsConfig["options"]>, usage: string): Settings {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: argv, options: { ...options, help: { type: "boolean", short: "h" } }, allowPositionals: false, strict: true }) as {
      values: Record<string, string | boolean | undefined>;
    });
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\n${usage}`);
  }
  if (values.help) throw new UsageError(usage, 0);
  let file: Record<string, unknown> = {};
  const cfg = values.config;
  if (typeof cfg === "string") {
    try {
      file = JSON.parse(readFileSync(cfg, "utf8")) as Record<string, unknown>;
    } catch (err) {
      throw new Error(`config file ${cfg}: ${(err as Error).message}`);
    }
    if (typeof file !== "object" || file === null || Array.isArray(file)) throw new Error(`config file ${cfg}: expected a JSON object`);
    for (const k of Object.keys(file)) {
      if (k !== "limits" && !(k in options) && !Object.keys(options).some((o) => camel(o) === k))
        throw new Error(`config file ${cfg}: unknown key ${JSON.stringify(k)}`);
    }
  }
  const fromFile = (name: string): unknown => file[name] ?? file[camel(name)];
  return {
    get(name) {
      const v = values[name];
      if (typeof v === "string") return v;
      const f = fromFile(name);
      return f === undefined || f === null ? undefined : String(f);
    },
    bool(name) {
      const v = values[name];
      if (typeof v === "boolean") return v;
      return fromFile(name) === true;
    },
    int(name) {
      const s = this.get(name);
      if (s === undefined) return undefined;
      const n = Number(s);
      if (!Number.isSafeInteger(n) || n < 0) throw new Error(`--${name}: expected a non-negative integer, got ${JSON.stringify(s)}`);
      return n;
    },
    object(name) {
      const f = fromFile(name);
      return f && typeof f === "object" && !Array.isArray(f) ? (f as Record<string, unknown>) : undefined;
    },
  };
}

export class UsageError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

export function readSecret(file: string, what: string): string {
  let s: string;
  try {
    s = readFileSync(file, "utf8").trim();
  } catch (err) {
    throw new Error(`${what} ${file}: ${(err as Error).message}`);
  }
  if (s === "") throw new Error(`${what} ${file} is empty`);
  return s;
}

/**
 * Numeric limits from a config object, checked against the known keys. Each
 * must be a positive integer; those named in `zeroOk` may also be 0 (for
 * example the server's `historyMs`: 0 means no age limit).
 */
export function numericLimits<T extends object>(
  given: Record<string, unknown> | undefined,
  known: T,
  what: string,
  zeroOk: readonly string[] = [],
): Partial<T> {
  if (!given) return {};
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(given)) {
    if (!(k in known)) throw new Error(`${what}: unknown limit ${JSON.stringify(k)} (known: ${Object.keys(known).join(", ")})`);
    const least = zeroOk.includes(k) ? 0 : 1;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < least)
      throw new Error(`${what}: limit ${k} must be a ${least === 0 ? "non-negative" : "positive"} integer`);
    out[k] = v;
  }
  return out as Partial<T>;
}

/**
 * Call `reload` on every SIGHUP until the returned function is called
 * (without a handler, SIGHUP would end the process). Reloads do not overlap.
 */
export function onReload(reload: () => void | Promise<void>): () => void {
  let busy = false;
  const on = (): void => {
    if (busy) return;
    busy = true;
    void Promise.resolve()
      .then(reload)
      .finally(() => {
        busy = false;
      });
  };
  process.on("SIGHUP", on);
  return () => process.off("SIGHUP", on);
}

/** Resolve on SIGINT/SIGTERM (once). */
export function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (sig: NodeJS.Signals): void => {
      process.off("SIGINT", on);
      process.off("SIGTERM", on);
      resolve(sig);
    };
    process.on("SIGINT", on);
    process.on("SIGTERM", on);
  });
}

/**
 * A daemon's signals, listened for from before it starts. A signal that came
 * between its "listening" line and a listener added after start would find
 * none and take Node's default, which ends the process (SIGHUP's too). A stop
 * (SIGINT/SIGTERM) that comes while it starts resolves `stopped` all the same
 * and takes effect once it has started (a second one, the listeners gone,
 * ends it at once); a reload (SIGHUP) then is applied once it has `started`.
 */
export function daemonSignals<D>(reload: (daemon: D) => void): {
  stopped: Promise<NodeJS.Signals>;
  started(daemon: D): void;
  stopReload(): void;
} {
  const stopped = untilSignal();
  let daemon: D | undefined;
  let pending = false;
  const stopReload = onReload(() => {
    if (daemon !== undefined) reload(daemon);
    else pending = true;
  });
  return {
    stopped,
    started(d: D): void {
      daemon = d;
      if (pending) {
        pending = false;
        reload(d);
      }
    },
    stopReload,
  };
}
