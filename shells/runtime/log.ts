/** A tiny leveled logger: one line per event to stderr (journald-friendly). */

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, detail?: Record<string, unknown>): void;
  info(msg: string, detail?: Record<string, unknown>): void;
  warn(msg: string, detail?: Record<string, unknown>): void;
  error(msg: string, detail?: Record<string, unknown>): void;
  readonly level: LogLevel;
}

export function createLogger(name: string, level: LogLevel = "info", sink: (line: string) => void = (l) => process.stderr.write(l + "\n")): Logger {
  const min = ORDER[level];
  const out = (lvl: LogLevel, msg: string, detail?: Record<string, unknown>): void => {
    if (ORDER[lvl] < min) return;
    let line = `${new Date().toISOString()} ${lvl.toUpperCase()} ${name}: ${msg}`;
    if (detail && Object.keys(detail).length > 0) {
      line += " " + Object.entries(detail).map(([k, v]) => `${k}=${typeof v === "string" ? JSON.stringify(v) : String(v)}`).join(" ");
    }
    sink(line);
  };
  return {
    level,
    debug: (m, d) => out("debug", m, d),
    info: (m, d) => out("info", m, d),
    warn: (m, d) => out("warn", m, d),
    error: (m, d) => out("error", m, d),
  };
}

export function parseLogLevel(s: string | undefined, fallback: LogLevel = "info"): LogLevel {
  if (s === undefined || s === "") return fallback;
  if (s in ORDER) return s as LogLevel;
  throw new Error(`unknown log level ${JSON.stringify(s)} (debug, info, warn, error, silent)`);
}
