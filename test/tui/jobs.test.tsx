import { afterEach, describe, expect, it } from "vitest";
import type { JobInfo } from "../../client/model.js";
import { FAKE_NOW, fakeSession, FakeSource } from "../../tui/sources/fake-source.js";
import { eventually, lineWith, mount, type Harness } from "./helpers.js";

let h: Harness | undefined;
afterEach(() => h?.unmount());

const child = (client: string, state: JobInfo["children"][number]["state"], exitCode: number | null, reason = "", ranMs: number | null = 1200) => ({
  client,
  uuid: `j1.${client}`,
  phase: (state === "pending"
    ? "pending"
    : state === "cancelled" && exitCode === null
      ? "cancelled"
      : state === "running"
        ? "started"
        : "done") as JobInfo["children"][number]["phase"],
  state,
  exitCode,
  reason,
  startedAt: ranMs === null ? null : FAKE_NOW - 5_000,
  endedAt: ranMs === null || state === "running" ? null : FAKE_NOW - 5_000 + ranMs,
  durationMs: ranMs === null || state === "running" ? null : ranMs,
});

const job: JobInfo = {
  id: "job-web-uptime",
  createdAt: FAKE_NOW - 60_000,
  program: "uptime",
  maxConcurrency: "2",
  maxConcurrencyResolved: 2,
  maxErrors: "1",
  maxErrorsResolved: 1,
  stoppedReason: "error budget exceeded: 2 failed, max-errors 1",
  endedAt: null,
  summary: { targets: 4, pending: 0, inFlight: 1, succeeded: 0, failed: 2, cancelled: 1 },
  children: [
    child("web-1", "running", null),
    child("web-2", "failed", 3),
    child("web-3", "failed", 1),
    child("web-4", "cancelled", null, "not started: error budget exceeded: 2 failed, max-errors 1", null),
  ],
};

describe("jobs view", () => {
  it("lists jobs and the selected job's per-client state, exit, duration and reason; the tab watches only while shown", async () => {
    const src = new FakeSource({ sessions: [fakeSession(0, { clientId: "web-1" })], jobs: [job] });
    h = await mount(src, { columns: 160 });
    expect(src.watchingJobs).toBe(0);
    await h.press("5");
    const f = h.frame();
    expect(f).toContain("5 Jobs");
    expect(f).toMatch(/JOB\s+STATE\s+TARGETS\s+OK\s+FAILED\s+CANCELLED\s+IN FLIGHT/);
    expect(lineWith(f, "job-web-uptime")).toMatch(/job-web-uptime\s+running\s+4\s+0\s+2\s+1\s+1/);
    expect(f).toContain("job job-web-uptime running: 4 targets: 2 failed, 1 cancelled, 1 in flight (stopped: error budget exceeded: 2 failed, max-errors 1)");
    expect(lineWith(f, "web-2")).toMatch(/web-2\s+failed\s+3\s+1\.2s/);
    expect(lineWith(f, "web-4")).toMatch(/web-4\s+cancelled\s+-\s+-\s+not started: error budget exceeded/);
    expect(lineWith(f, "web-1 ")).toMatch(/web-1\s+running\s+-\s+5\.0s…/);
    expect(src.watchingJobs).toBe(1);
    await h.press("1");
    expect(src.watchingJobs).toBe(0);
  });

  it("c asks to cancel the selected job and y sends CancelJob; n does nothing; an ended job is not offered", async () => {
    const ended: JobInfo = { ...job, id: "job-done", endedAt: FAKE_NOW - 1_000, createdAt: FAKE_NOW - 90_000 };
    const src = new FakeSource({ sessions: [fakeSession(0, { clientId: "web-1" })], jobs: [job, ended] });
    h = await mount(src, { columns: 160 });
    await h.press("5", "c");
    expect(h.frame()).toContain("Cancel job job-web-uptime (4 clients: running ones cancelled, the rest never started)? (y/n)");
    await h.press("n");
    expect(src.calls).toEqual([]);
    await h.press("c", "y");
    await eventually(() => expect(h!.frame()).toContain("job job-web-uptime: cancelled"));
    expect(src.calls).toEqual([{ op: "cancel_job", jobId: "job-web-uptime" }]);
    await h.press("j", "c");
    expect(h.frame()).toContain("has ended");
    expect(src.calls).toHaveLength(1);
  });

  it("a source without jobs shows an empty tab", async () => {
    h = await mount(new FakeSource({}), { columns: 100 });
    await h.press("5");
    expect(h.frame()).toContain("no jobs (rvbox run --clients A,B -- CMD)");
  });
});

describe("jobs view at 160x45 (issue 41)", () => {
  it("shows every job when they fit, the clients right below, and CREATED uncut (12m30s ago)", async () => {
    const older: JobInfo = { ...job, id: "job-db-backup", createdAt: FAKE_NOW - 750_000, endedAt: FAKE_NOW - 700_000, stoppedReason: "" };
    const src = new FakeSource({ sessions: [fakeSession(0, { clientId: "web-1" })], jobs: [job, older] });
    h = await mount(src, { columns: 160, rows: 45 });
    await h.press("5");
    const lines = h.lines();
    expect(lineWith(h.frame(), "job-web-uptime")).toContain("1m ago");
    expect(lineWith(h.frame(), "job-db-backup")).toMatch(/12m30s ago\s+uptime/);
    expect(h.frame()).toContain("1–2 of 2");
    // The client table follows the list: summary, header, its 4 rows, its position line; no blank lines between.
    const summary = lines.findIndex((l) => l.includes("job job-web-uptime running: 4 targets"));
    const pos = lines.findIndex((l) => l.includes("1–2 of 2"));
    expect(summary).toBe(pos + 1);
    expect(lines[summary + 1]).toMatch(/CLIENT\s+STATE\s+EXIT/);
    expect(lines.slice(summary + 2, summary + 6).map((l) => /web-\d/.exec(l)?.[0])).toEqual(["web-1", "web-2", "web-3", "web-4"]);
    expect(lines[summary + 6]).toContain("1–4 of 4");
  });
});
