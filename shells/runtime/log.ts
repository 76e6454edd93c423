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

export function createLogger(name: string, level: LogLevel = "info", sink: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): Logger {
  const min = ORDER[level];
  const out = (lvl: LogLevel, msg: string, detail?: Record<string, unknown>): void => {
    if (ORDER[lvl] < min) return;
    let line = `${new Date().toISOString()} ${lvl.toUpperCase()} ${name}: ${msg}`;
    if (detail && Object.keys(detail).length > 0) {
      line +=
        " " +
        Object.entries(detail)
          .map(([k, v]) => `${k}=${typeof v === "string" ? JSON.stringify(v) : String(v)}`)
          .join(" ");
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

/** Lines of one kind a RateLimitedLog writes per window; the rest are counted. */
export const LOG_LINES_PER_KIND_PER_WINDOW = 20;
export const LOG_WINDOW_MS = 10_000;

/**
 * Lines a peer can cause (a closed connection, a refused token, a claim)
 * through a per-kind budget: at most LOG_LINES_PER_KIND_PER_WINDOW lines of
 * a kind per LOG_WINDOW_MS; past it the lines are counted, and the first line
 * of that kind after the window says how many were left out. A flood of
 * hostile frames so costs a few lines a second, not one per connection.
 */
export class RateLimitedLog {
  private kinds = new Map<string, { windowStart: number; written: number; suppressed: number }>();
  constructor(
    private readonly log: Logger,
    private readonly now: () => number = () => performance.now(),
    private readonly perWindow = LOG_LINES_PER_KIND_PER_WINDOW,
    private readonly windowMs = LOG_WINDOW_MS,
  ) {}

  write(level: "info" | "warn", kind: string, msg: string, detail?: Record<string, unknown>): void {
    if (this.log.level === "silent" || ORDER[level] < ORDER[this.log.level]) return;
    const t = this.now();
    let k = this.kinds.get(kind);
    if (!k || t - k.windowStart >= this.windowMs) {
      const suppressed = k?.suppressed ?? 0;
      k = { windowStart: t, written: 0, suppressed: 0 };
      this.kinds.set(kind, k);
      if (this.kinds.size > 1024) this.kinds.delete(this.kinds.keys().next().value!); // bounded: kinds are few
      if (suppressed > 0) this.log[level](`${suppressed} more "${kind}" lines were left out in the last ${this.windowMs / 1000} s`);
    }
    if (k.written >= this.perWindow) {
      k.suppressed++;
      return;
    }
    k.written++;
    this.log[level](msg, detail);
  }
}
