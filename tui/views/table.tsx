/**
 * A virtualized table: only the rows that fit are rendered (1,000 sessions
 * cost the same as 30), every row is cut to the terminal width, and the
 * selected row stays in view with the least scrolling.
 */
import type React from "react";
import { useRef } from "react";
import { Box, Text } from "ink";
import { fit, fitRight, type Color } from "../format.js";

export interface Column<T> {
  title: string;
  /** Columns; "flex" columns share what is left (at least `min`). */
  width: number | "flex";
  min?: number;
  align?: "right";
  /** Hidden when the table is narrower than this. */
  hideBelow?: number;
  value(row: T): string;
  color?(row: T): Color;
}

export interface TableProps<T> {
  rows: readonly T[];
  columns: Array<Column<T>>;
  selected: number;
  /** Lines available, including the header and the position line. */
  height: number;
  width: number;
  empty: string;
  /** Rows shown dimmed (e.g. acknowledged incidents). */
  dim?(row: T): boolean;
}

export function layoutColumns<T>(columns: Array<Column<T>>, width: number): Array<{ col: Column<T>; w: number }> {
  const shown = columns.filter((c) => c.hideBelow === undefined || width >= c.hideBelow);
  const fixed = shown.reduce((n, c) => n + (c.width === "flex" ? 0 : c.width), 0);
  const flex = shown.filter((c) => c.width === "flex");
  const gaps = shown.length - 1;
  const left = width - fixed - gaps;
  const out = shown.map((col) => ({ col, w: col.width === "flex" ? 0 : col.width }));
  for (const o of out) {
    if (o.col.width !== "flex") continue;
    const share = Math.max(o.col.min ?? 6, Math.floor(left / flex.length));
    o.w = share;
  }
  // Too narrow: shrink from the right so a row never wraps.
  let total = out.reduce((n, o) => n + o.w, 0) + gaps;
  for (let i = out.length - 1; i >= 0 && total > width; i--) {
    const cut = Math.min(out[i]!.w, total - width);
    out[i]!.w -= cut;
    total -= cut;
  }
  return out.filter((o) => o.w > 0);
}

/** First row index shown so that `selected` is visible, moving as little as possible from `prev`. */
export function scrollOffset(prev: number, selected: number, body: number, count: number): number {
  let off = prev;
  if (selected < off) off = selected;
  if (selected >= off + body) off = selected - body + 1;
  return Math.max(0, Math.min(off, Math.max(0, count - body)));
}

export function Table<T>(p: TableProps<T>): React.ReactElement {
  const body = Math.max(1, p.height - 2);
  const off = useRef(0);
  const sel = Math.max(0, Math.min(p.selected, p.rows.length - 1));
  off.current = scrollOffset(off.current, sel, body, p.rows.length);
  // A 2-column gutter marks the selected row without relying on colour ("› ").
  const cols = layoutColumns(p.columns, p.width - 2);
  const header = `  ${cols.map(({ col, w }) => (col.align === "right" ? fitRight(col.title, w) : fit(col.title, w))).join(" ")}`;
  const visible = p.rows.slice(off.current, off.current + body);
  const lines: React.ReactElement[] = visible.map((row, i) => {
    const idx = off.current + i;
    const isSel = idx === sel;
    const dim = p.dim?.(row) ?? false;
    return (
      <Text key={idx} inverse={isSel} dimColor={dim && !isSel}>
        {isSel ? "› " : "  "}
        {cols.map(({ col, w }, ci) => {
          const v = col.value(row);
          const cell = col.align === "right" ? fitRight(v, w) : fit(v, w);
          const color = col.color?.(row);
          return (
            <Text key={ci} color={color}>
              {ci > 0 ? " " : ""}
              {cell}
            </Text>
          );
        })}
      </Text>
    );
  });
  if (p.rows.length === 0)
    lines.push(
      <Text key="empty" dimColor>
        {fit(p.empty, p.width)}
      </Text>,
    );
  while (lines.length < body) lines.push(<Text key={`pad${lines.length}`}> </Text>);
  const pos =
    p.rows.length === 0
      ? ""
      : `${off.current + 1}–${Math.min(p.rows.length, off.current + body)} of ${p.rows.length}${p.rows.length > body ? "  (↑↓ PgUp PgDn g G)" : ""}`;
  return (
    <Box flexDirection="column" width={p.width} height={p.height}>
      <Text bold>{fit(header, p.width)}</Text>
      {lines}
      <Text dimColor>{fit(pos, p.width)}</Text>
    </Box>
  );
}
