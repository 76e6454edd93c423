/** Jobs (rvbox run --clients): the list, newest first, and below it the selected job's per-client table. */
import type React from "react";
import { Box, Text } from "ink";
import { ago, fit, type Color } from "../format.js";
import { durationText, jobSummaryText, type JobChildInfo, type JobInfo } from "../../client/model.js";
import { Table, type Column } from "./table.js";

const stateColor = (s: string): Color =>
  s === "succeeded" ? "green" : s === "failed" || s === "rejected" || s === "interrupted" ? "red" : s === "cancelled" || s === "expired" ? "yellow" : undefined;

/**
 * Lines for the job list and the selected job's client table (each with its
 * header and position line; one line between them for the summary): both
 * as tall as their rows when they fit, else the clients get at most half
 * and the list what is left (at least one row each).
 */
export function jobsLayout(height: number, jobs: number, children: number | undefined): { list: number; children: number } {
  if (children === undefined) return { list: height, children: 0 };
  const room = height - 1;
  const childWant = Math.max(3, children + 2);
  const list = Math.max(3, Math.min(jobs + 2, room - Math.min(childWant, Math.max(3, Math.floor(room / 2)))));
  return { list, children: Math.max(3, Math.min(childWant, room - list)) };
}

export function JobsView(p: { rows: readonly JobInfo[]; selected: number; now: number; width: number; height: number }): React.ReactElement {
  const cols: Array<Column<JobInfo>> = [
    { title: "JOB", width: "flex", min: 10, value: (j) => j.id },
    { title: "STATE", width: 8, value: (j) => (j.endedAt !== null ? (j.stoppedReason ? "stopped" : "done") : "running") },
    { title: "TARGETS", width: 7, align: "right", value: (j) => String(j.summary.targets) },
    { title: "OK", width: 4, align: "right", value: (j) => String(j.summary.succeeded) },
    { title: "FAILED", width: 6, align: "right", value: (j) => String(j.summary.failed), color: (j): Color => (j.summary.failed > 0 ? "red" : undefined) },
    { title: "CANCELLED", width: 9, align: "right", hideBelow: 70, value: (j) => String(j.summary.cancelled) },
    { title: "IN FLIGHT", width: 9, align: "right", value: (j) => String(j.summary.inFlight) },
    { title: "CREATED", width: 10, hideBelow: 80, value: (j) => ago(j.createdAt, p.now) },
    { title: "PROGRAM", width: "flex", min: 8, hideBelow: 90, value: (j) => j.program },
  ];
  const sel = p.rows[p.selected];
  const { list: listHeight, children: childHeight } = jobsLayout(p.height, p.rows.length, sel?.children.length);
  const childCols: Array<Column<JobChildInfo>> = [
    { title: "CLIENT", width: "flex", min: 10, value: (c) => c.client },
    { title: "STATE", width: 11, value: (c) => c.state, color: (c) => stateColor(c.state) },
    { title: "EXIT", width: 4, align: "right", value: (c) => (c.exitCode === null ? "-" : String(c.exitCode)) },
    { title: "DURATION", width: 9, value: (c) => durationText(c, p.now) },
    { title: "NOTE", width: "flex", min: 10, hideBelow: 60, value: (c) => (c.state === "succeeded" ? "" : c.reason) },
  ];
  return (
    <Box flexDirection="column" width={p.width}>
      <Table rows={p.rows} columns={cols} selected={p.selected} width={p.width} height={listHeight} empty="no jobs (rvbox run --clients A,B -- CMD)" />
      {sel ? (
        <>
          <Text dimColor>{fit(jobSummaryText(sel), p.width)}</Text>
          <Table rows={sel.children} columns={childCols} selected={-1} width={p.width} height={childHeight} empty="no clients" />
        </>
      ) : null}
    </Box>
  );
}
