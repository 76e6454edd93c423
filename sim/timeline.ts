// A readable timeline for `replay`: one line per delivered input and per
// state transition / trace effect, filterable by node and command.

import { CommandLifecycle } from "../protos/gen/rvbox/v1/common_pb.js";

export interface TimelineFilter {
  node?: string;
  command?: string;
}

export class Timeline {
  readonly lines: string[] = [];
  constructor(
    private readonly filter: TimelineFilter = {},
    private readonly sink: ((line: string) => void) | null = null,
    private readonly max = 2_000_000,
  ) {}

  add(t: number, node: string, text: string): void {
    if (this.filter.node && node !== this.filter.node && !node.startsWith(`${this.filter.node}#`)) return;
    if (this.filter.command && !text.includes(this.filter.command)) return;
    const line = `${fmtTime(t)} ${node.padEnd(16)} ${text}`;
    if (this.sink) this.sink(line);
    else if (this.lines.length < this.max) this.lines.push(line);
  }
}

export function fmtTime(t: number): string {
  const s = (t / 1000).toFixed(3);
  return `[${s.padStart(10)}s]`;
}

export function lifecycleName(s: number): string {
  return (CommandLifecycle[s] ?? String(s)).toLowerCase();
}

export function fmtDetail(d: Readonly<Record<string, string | number | boolean>>): string {
  return Object.entries(d)
    .map(([k, v]) => `${k}=${typeof v === "string" && v.length > 80 ? `${v.slice(0, 77)}...` : v}`)
    .join(" ");
}
