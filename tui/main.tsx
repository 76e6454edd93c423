import { render } from "ink";
import { App } from "./app.js";
import type { DataSource } from "./source.js";

/** A source to show, and what to stop once the TUI has closed it (a demo fleet). */
export interface OpenedSource {
  source: DataSource;
  stop?: () => Promise<void>;
}

export interface TuiOptions {
  /** Client selected at start. */
  client?: string;
}

/** `open` is called once the terminal is known to be interactive. */
export async function runTui(open: () => Promise<OpenedSource>, o: TuiOptions = {}): Promise<number> {
  if (!process.stdin.isTTY || !process.stdout.isTTY) {
    process.stderr.write("rvbox tui: needs an interactive terminal (stdin and stdout must be a TTY); use the other rvbox commands in scripts\n");
    return 2;
  }
  const opened = await open();
  const source = opened.source;
  const stopDemo = opened.stop ?? null;
  const out = process.stdout;
  const alt = out.isTTY === true;
  // The terminal may go away (SIGHUP): writes then fail with EIO; that must not stop the clean-up below.
  const ignore = (): void => {};
  out.on("error", ignore);
  if (alt) out.write("\x1b[?1049h\x1b[H");
  // A closed terminal (SIGHUP) or a kill (SIGTERM) ends the TUI like q does, so a demo fleet stops its processes.
  let app: ReturnType<typeof render> | null = null;
  const stop = (): void => app?.unmount();
  process.on("SIGHUP", stop);
  process.on("SIGTERM", stop);
  try {
    app = render(<App source={source} initialClient={o.client} />, { exitOnCtrlC: true, patchConsole: true });
    await app.waitUntilExit();
  } finally {
    process.off("SIGHUP", stop);
    process.off("SIGTERM", stop);
    source.close();
    if (stopDemo) await stopDemo();
    if (alt) out.write("\x1b[?1049l");
  }
  return 0;
}
