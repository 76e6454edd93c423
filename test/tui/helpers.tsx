import { render } from "ink-testing-library";
import { App } from "../../tui/app.js";
import type { DataSource } from "../../tui/source.js";

export const KEY = {
  up: "\x1b[A",
  down: "\x1b[B",
  right: "\x1b[C",
  left: "\x1b[D",
  enter: "\r",
  esc: "\x1b",
  tab: "\t",
  shiftTab: "\x1b[Z",
  pageUp: "\x1b[5~",
  pageDown: "\x1b[6~",
  home: "\x1b[H",
  end: "\x1b[F",
  backspace: "\x7f",
  ctrlN: "\x0e",
  ctrlC: "\x03",
} as const;

/** Let Ink process input (escape flushes on setImmediate) and re-render. */
export const settle = (ms = 15): Promise<void> => new Promise((r) => setTimeout(r, ms));

export interface Harness {
  frame(): string;
  lines(): string[];
  press(...keys: string[]): Promise<void>;
  type(text: string): Promise<void>;
  /** Write keys back to back in one tick (faster than any re-render), then wait. */
  burst(...keys: string[]): Promise<void>;
  resize(columns: number, rows: number): Promise<void>;
  unmount(): void;
  exited: () => boolean;
}

export async function mount(source: DataSource, opts: { columns?: number; rows?: number; initialClient?: string } = {}): Promise<Harness> {
  let exited = false;
  const r = render(<App source={source} initialClient={opts.initialClient} onExit={() => (exited = true)} />);
  const stdout = r.stdout as unknown as { columns: number; rows: number; emit(e: string): void };
  const setSize = (columns: number, rows: number): void => {
    Object.defineProperty(stdout, "columns", { value: columns, configurable: true });
    Object.defineProperty(stdout, "rows", { value: rows, configurable: true });
  };
  setSize(opts.columns ?? 100, opts.rows ?? 30);
  stdout.emit("resize");
  await settle(40);
  const h: Harness = {
    frame: () => r.lastFrame() ?? "",
    lines: () => (r.lastFrame() ?? "").split("\n"),
    async press(...keys) {
      for (const k of keys) {
        const before = r.frames.length;
        r.stdin.write(k);
        // Wait for the frame this key causes (Ink throttles to ~30 fps), or give up quietly: not every key changes the screen.
        const end = Date.now() + 150;
        while (r.frames.length === before && Date.now() < end) await settle(3);
        await settle(5);
      }
    },
    async burst(...keys) {
      for (const k of keys) r.stdin.write(k);
      await settle(80);
    },
    async type(text) {
      for (const ch of text) await h.press(ch);
    },
    async resize(columns, rows) {
      setSize(columns, rows);
      stdout.emit("resize");
      await settle(60);
    },
    unmount: () => r.unmount(),
    exited: () => exited,
  };
  return h;
}

/** The line of the frame containing `text` (or undefined). */
export function lineWith(frame: string, text: string): string | undefined {
  return frame.split("\n").find((l) => l.includes(text));
}

/** The selected table row (the one with the › gutter). */
export function selectedRow(frame: string): string | undefined {
  return frame.split("\n").find((l) => l.startsWith("› "));
}

/** Retry an assertion until it passes (frames arrive asynchronously). */
export async function eventually(fn: () => void, timeoutMs = 2000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      fn();
      return;
    } catch (e) {
      if (Date.now() > end) throw e;
      await settle(10);
    }
  }
}
