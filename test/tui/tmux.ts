// Drive a real terminal: the TUI runs in a detached tmux session on a private
// socket; tests send keys and read the screen with capture-pane.
import { execFileSync, spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";

export const ROOT = path.resolve(import.meta.dirname, "../..");

export const hasTmux = spawnSync("tmux", ["-V"]).status === 0;

/**
 * How to start `rvbox <operator command>`: through bin/rvbox.ts once its
 * subcommand table routes the operator commands to runOperatorCli, else the
 * standalone entry with the same code path.
 */
export function operatorEntry(): string[] {
  const bin = ["bin/rvbox.ts", "bin/rvbox-main.ts"]
    .map((f) => {
      try {
        return readFileSync(path.join(ROOT, f), "utf8");
      } catch {
        return "";
      }
    })
    .join("\n");
  return /runOperatorCli/.test(bin) ? ["bin/rvbox.ts"] : ["shells/operator/main.ts"];
}

const q = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

export class TmuxSession {
  private readonly socket: string;
  constructor(
    readonly name: string,
    readonly width = 120,
    readonly height = 40,
  ) {
    this.socket = `rvbox-test-${process.pid}-${name}`;
  }

  private tmux(...args: string[]): string {
    return execFileSync("tmux", ["-L", this.socket, ...args], { encoding: "utf8" });
  }

  /** Start `rvbox ARGS` (tsx loader, no CI mode so Ink redraws live), from the tree at `root` (default this one). */
  start(args: string[], env: Record<string, string> = {}, root = ROOT): void {
    const envs = Object.entries({ CI: "0", CONTINUOUS_INTEGRATION: "0", TERM: "xterm-256color", ...env })
      .map(([k, v]) => `${k}=${q(v)}`)
      .join(" ");
    const cmd = `cd ${q(root)} && env ${envs} ${q(process.execPath)} --import tsx ${[...operatorEntry(), ...args].map(q).join(" ")}; echo "[exited $?]"; sleep 30`;
    this.tmux("new-session", "-d", "-s", this.name, "-x", String(this.width), "-y", String(this.height), cmd);
  }

  /**
   * Start `rvbox ARGS` as the README runs it: bin/rvbox.js executed as a program (its `sh`
   * line picks the project's Node), from the working directory `cwd`, which need not be in
   * the tree.
   */
  startInstalled(args: string[], env: Record<string, string>, cwd: string): void {
    const envs = Object.entries({ CI: "0", CONTINUOUS_INTEGRATION: "0", TERM: "xterm-256color", ...env })
      .map(([k, v]) => `${k}=${q(v)}`)
      .join(" ");
    const cmd = `cd ${q(cwd)} && env ${envs} ${q(path.join(ROOT, "bin/rvbox.js"))} ${args.map(q).join(" ")}; echo "[exited $?]"; sleep 30`;
    this.tmux("new-session", "-d", "-s", this.name, "-x", String(this.width), "-y", String(this.height), cmd);
  }

  screen(): string {
    return this.tmux("capture-pane", "-p", "-t", this.name);
  }

  keys(...keys: string[]): void {
    for (const k of keys) this.tmux("send-keys", "-t", this.name, k);
  }

  /** Press one key n times (tmux send-keys -N). */
  repeat(key: string, n: number): void {
    this.tmux("send-keys", "-t", this.name, "-N", String(n), key);
  }

  /** Type literal text. */
  type(text: string): void {
    this.tmux("send-keys", "-t", this.name, "-l", text);
  }

  resize(width: number, height: number): void {
    this.tmux("resize-window", "-t", this.name, "-x", String(width), "-y", String(height));
  }

  async waitFor(pred: (screen: string) => boolean, what: string, timeoutMs = 20_000): Promise<string> {
    const end = Date.now() + timeoutMs;
    let last = "";
    for (;;) {
      last = this.screen();
      if (pred(last)) return last;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; screen:\n${last}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The pid of the program running in the pane (the shell's node child), or null once it is gone. */
  programPid(): number | null {
    const shell = Number(this.tmux("display-message", "-p", "-t", this.name, "#{pane_pid}").trim());
    for (const d of readdirSync("/proc")) {
      if (!/^\d+$/.test(d)) continue;
      try {
        const stat = readFileSync(`/proc/${d}/stat`, "utf8");
        const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        if (Number(f[1]) === shell && /node$/.test(readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0")[0]!)) return Number(d);
      } catch {
        // gone while we looked
      }
    }
    return null;
  }

  kill(): void {
    spawnSync("tmux", ["-L", this.socket, "kill-server"]);
  }
}

/** Resident and peak resident memory of a process, in KiB (VmRSS, VmHWM); zeros once it is gone. */
export function memKiB(pid: number): { rss: number; peak: number } {
  try {
    const st = readFileSync(`/proc/${pid}/status`, "utf8");
    return { rss: Number(/VmRSS:\s+(\d+) kB/.exec(st)?.[1] ?? 0), peak: Number(/VmHWM:\s+(\d+) kB/.exec(st)?.[1] ?? 0) };
  } catch {
    return { rss: 0, peak: 0 };
  }
}
