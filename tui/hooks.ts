/** React hooks shared by the views: the source's version, the terminal's size. */
import { useEffect, useState, useSyncExternalStore } from "react";
import { useStdout } from "ink";
import type { DataSource } from "./source.js";

/** Re-render whenever the source reports a change; returns its version. */
export function useSource(source: DataSource): number {
  return useSyncExternalStore(
    (l) => source.subscribe(l),
    () => source.version,
  );
}

export interface TermSize {
  columns: number;
  rows: number;
}

/** The terminal's size, following resizes (`resize` on stdout). 80x24 when unknown. */
export function useTerminalSize(): TermSize {
  // Ink 8 types the stream as NodeJS.WritableStream; a TTY (or the test
  // harness's fake) carries columns/rows, anything else reads as 80x24.
  const stdout = useStdout().stdout as NodeJS.WritableStream & { columns?: number; rows?: number };
  const read = (): TermSize => ({ columns: (stdout.columns ?? 0) > 0 ? stdout.columns! : 80, rows: (stdout.rows ?? 0) > 0 ? stdout.rows! : 24 });
  const [size, setSize] = useState(read);
  // biome-ignore lint/correctness/useExhaustiveDependencies: read() only reads stdout, the one dependency
  useEffect(() => {
    const on = (): void => setSize(read());
    stdout.on("resize", on);
    on();
    return () => {
      stdout.off("resize", on);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [stdout]);
  return size;
}
