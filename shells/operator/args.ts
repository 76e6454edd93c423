/**
 * A small, strict argument parser for the operator subcommands: long flags
 * (`--name value`, `--name=value`), short aliases, booleans with `--no-`
 * forms where declared, repeatable flags, flags whose value is optional and
 * drawn from a fixed set (`--shell` / `--shell bash`), positionals anywhere,
 * and `--` after which everything is positional ("the command").
 */

import { didYouMean } from "../runtime/suggest.js";

export class UsageError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

export type FlagSpec =
  | { type: "boolean"; short?: string; negatable?: boolean }
  | { type: "string"; short?: string; multiple?: boolean }
  /** A value from `choices` may follow; otherwise `default` is used. */
  | { type: "optional"; choices: readonly string[]; default: string; short?: string };

export type FlagSpecs = Record<string, FlagSpec>;

export interface Parsed {
  flags: Map<string, string | boolean | string[]>;
  positionals: string[];
  /** Everything after `--` (null when there was no `--`). */
  rest: string[] | null;
}

export function parseFlags(argv: readonly string[], specs: FlagSpecs): Parsed {
  const flags = new Map<string, string | boolean | string[]>();
  const positionals: string[] = [];
  let rest: string[] | null = null;
  const byShort = new Map<string, string>();
  for (const [name, s] of Object.entries(specs)) if (s.short) byShort.set(s.short, name);

  const set = (name: string, spec: FlagSpec, value: string | boolean): void => {
    if (spec.type === "string" && spec.multiple) {
      const list = (flags.get(name) as string[] | undefined) ?? [];
      list.push(value as string);
      flags.set(name, list);
      return;
    }
    if (flags.has(name) && spec.type !== "boolean") throw new UsageError(`--${name} given twice`);
    flags.set(name, value);
  };

  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--") {
      rest = argv.slice(i + 1);
      break;
    }
    // Boolean short flags together (`-it`, as docker and kubectl take them): each one set.
    const bundled = /^-[A-Za-z]{2,}$/.test(a) ? [...a.slice(1)].map((c) => byShort.get(c)) : [];
    if (bundled.length > 0 && bundled.every((n) => n !== undefined && specs[n]?.type === "boolean")) {
      for (const n of bundled) set(n!, specs[n!]!, true);
      continue;
    }
    if (a.startsWith("--") || (a.startsWith("-") && a.length === 2 && a !== "-")) {
      let name: string;
      let inline: string | undefined;
      if (a.startsWith("--")) {
        const eq = a.indexOf("=");
        name = eq >= 0 ? a.slice(2, eq) : a.slice(2);
        inline = eq >= 0 ? a.slice(eq + 1) : undefined;
      } else {
        const long = byShort.get(a.slice(1));
        if (!long) throw new UsageError(`unknown flag ${a}`);
        name = long;
      }
      const spec = specs[name];
      if (!spec && name.startsWith("no-")) {
        const base = specs[name.slice(3)];
        if (base?.type === "boolean" && base.negatable) {
          if (inline !== undefined) throw new UsageError(`--${name} takes no value`);
          set(name.slice(3), base, false);
          continue;
        }
      }
      if (!spec) throw new UsageError(`unknown flag --${name}${didYouMean(name, Object.keys(specs), "--")}`);
      switch (spec.type) {
        case "boolean":
          if (inline !== undefined) throw new UsageError(`--${name} takes no value`);
          set(name, spec, true);
          break;
        case "string": {
          let v = inline;
          if (v === undefined) {
            if (i + 1 >= argv.length || argv[i + 1] === "--") throw new UsageError(`--${name} needs a value`);
            v = argv[++i]!;
          }
          set(name, spec, v);
          break;
        }
        case "optional": {
          let v = inline;
          if (v === undefined && i + 1 < argv.length && spec.choices.includes(argv[i + 1]!)) v = argv[++i]!;
          if (v !== undefined && !spec.choices.includes(v))
            throw new UsageError(`--${name}: expected one of ${spec.choices.join(", ")}, got ${JSON.stringify(v)}`);
          set(name, spec, v ?? spec.default);
          break;
        }
      }
      continue;
    }
    positionals.push(a);
  }
  return { flags, positionals, rest };
}

export const str = (p: Parsed, name: string): string | undefined => {
  const v = p.flags.get(name);
  return typeof v === "string" ? v : undefined;
};
export const bool = (p: Parsed, name: string, dflt = false): boolean => {
  const v = p.flags.get(name);
  return typeof v === "boolean" ? v : dflt;
};
export const list = (p: Parsed, name: string): string[] => {
  const v = p.flags.get(name);
  return Array.isArray(v) ? v : [];
};

/** "30s", "5m", "1h30m", "1500ms", "2d"; a bare number is seconds. */
export function parseDuration(s: string, what = "duration"): number {
  const t = s.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Math.round(Number(t) * 1000);
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/gy;
  let total = 0;
  let pos = 0;
  let m: RegExpExecArray | null;
  const unit: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
  while ((m = re.exec(t)) !== null) {
    total += Number(m[1]) * unit[m[2]!]!;
    pos = re.lastIndex;
  }
  if (t === "" || pos !== t.length) throw new UsageError(`${what}: expected a duration like 30s, 5m, 1h30m or 1500ms, got ${JSON.stringify(s)}`);
  return Math.round(total);
}

/** K=V; the name is non-empty and has no `=`. */
export function parseEnv(s: string): { name: string; value: string } {
  const eq = s.indexOf("=");
  if (eq <= 0) throw new UsageError(`--env: expected NAME=VALUE, got ${JSON.stringify(s)}`);
  return { name: s.slice(0, eq), value: s.slice(eq + 1) };
}

/** Accepts `host:port` (http assumed) or a full http(s) URL; strips a trailing slash. */
export function normalizeServerUrl(s: string): string {
  let u = s.trim();
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(u)) u = `http://${u}`;
  let parsed: URL;
  try {
    parsed = new URL(u);
  } catch {
    throw new UsageError(`--server: not a URL: ${JSON.stringify(s)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new UsageError(`--server: the control API speaks http:// or https://, got ${parsed.protocol}//`);
  return u.replace(/\/+$/, "");
}
