import { renderToString } from "ink";
import { afterEach, describe, expect, it } from "vitest";
import { App } from "../../tui/app.js";
import { fakeFleet, fakeSession, FakeSource } from "../../tui/sources/fake-source.js";
import { eventually, KEY, lineWith, mount, selectedRow, type Harness } from "./helpers.js";

let h: Harness | undefined;
afterEach(() => h?.unmount());

describe("header", () => {
  it("on a narrow terminal the facts shrink first: the time of the last update is never cut", async () => {
    const src = new FakeSource({
      sessions: [0, 1, 2].map((i) => fakeSession(i)),
      status: { label: "http://127.0.0.1:17401", feed: "stream" },
    });
    const updated = new Date(src.fleet().status.updatedAt!).toISOString().slice(11, 19);
    const firstLine = async (columns: number) => {
      h = await mount(src, { columns, rows: 12 });
      const line = h.lines()[0]!;
      h.unmount();
      h = undefined;
      return line;
    };
    expect(await firstLine(120)).toContain(`RVBox · http://127.0.0.1:17401 · stream   3 clients, 3 connected · updated ${updated}`);
    expect(await firstLine(80)).toContain(`3/3 connected · updated ${updated}`);
    expect(await firstLine(52)).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:17401 · stream   3/3 up · ${updated}`));
    expect(await firstLine(44)).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:17401   3/3 up · ${updated}`));
    for (const w of [120, 80, 52, 44]) expect((await firstLine(w)).length).toBeLessThanOrEqual(w);
  });
});

describe("sessions view", () => {
  it("shows client id, link state, instance, generation, last activity, running/queued, window and budget use", async () => {
    const src = new FakeSource({
      sessions: [
        fakeSession(0, {
          clientId: "web-1",
          instanceId: "a1b2c3d4e5f6",
          generation: 7,
          link: "connected",
          running: 2,
          queued: 5,
          maxRunning: 4,
          maxQueued: 16,
          window: { used: 512, limit: 1024 },
          budget: { used: 1, limit: 4 },
        }),
        fakeSession(1, { clientId: "db-1", link: "offline", lastActivity: null }),
        fakeSession(2, { clientId: "batch-1", link: "backoff", detail: "retry in 3.2s (attempt 2)" }),
      ],
    });
    h = await mount(src, { columns: 140 });
    const f = h.frame();
    expect(f).toContain("CLIENT");
    for (const col of ["STATE", "INSTANCE", "GEN", "LAST ACTIVITY", "RUN", "QUEUE", "WINDOW", "BUDGET"]) expect(f).toContain(col);
    const web = lineWith(f, "web-1")!;
    expect(web).toMatch(/web-1\s+connected\s+a1b2c3d4e5\s+7\s+now\s+2\/4\s+5\/16\s+50%\s+25%/);
    expect(lineWith(f, "db-1")).toMatch(/offline/);
    expect(lineWith(f, "batch-1")).toMatch(/backoff.*retry in 3\.2s/);
  });

  it("says draining in DETAIL for a client an operator drains (rvbox drain)", async () => {
    const src = new FakeSource({
      sessions: [
        fakeSession(0, { clientId: "web-1", link: "connected", detail: "ready 127.0.0.1:1", draining: true }),
        fakeSession(1, { clientId: "db-1", link: "connected", detail: "ready 127.0.0.1:2" }),
      ],
    });
    h = await mount(src, { columns: 140 });
    const f = h.frame();
    expect(lineWith(f, "web-1")).toMatch(/draining; ready 127\.0\.0\.1:1/);
    expect(lineWith(f, "db-1")).not.toContain("draining");
  });

  it("shows a client's labels (rvbox label) in DETAIL, in key order", async () => {
    const src = new FakeSource({
      sessions: [
        fakeSession(0, { clientId: "web-1", link: "connected", detail: "ready 127.0.0.1:1", labels: { zone: "eu-1", role: "web" } }),
        fakeSession(1, { clientId: "db-1", link: "connected", detail: "ready 127.0.0.1:2", labels: {} }),
      ],
    });
    h = await mount(src, { columns: 140 });
    const f = h.frame();
    expect(lineWith(f, "web-1")).toMatch(/role=web,zone=eu-1; ready 127\.0\.0/);
    expect(lineWith(f, "db-1")).toMatch(/connected.*ready 127\.0\.0/);
    expect(lineWith(f, "db-1")).not.toContain("role=");
  });

  it("moves the selection with j/k and the arrow keys", async () => {
    h = await mount(fakeFleet(5));
    expect(selectedRow(h.frame())).toContain("host-0000");
    await h.press("j", "j");
    expect(selectedRow(h.frame())).toContain("host-0002");
    await h.press("k");
    expect(selectedRow(h.frame())).toContain("host-0001");
    await h.press(KEY.down, KEY.down);
    expect(selectedRow(h.frame())).toContain("host-0003");
    await h.press(KEY.up);
    expect(selectedRow(h.frame())).toContain("host-0002");
    await h.press("k", "k", "k", "k");
    expect(selectedRow(h.frame())).toContain("host-0000"); // stops at the top
  });

  it("enter drills into the selected client's commands", async () => {
    h = await mount(fakeFleet(5));
    await h.press("j", KEY.enter);
    const f = h.frame();
    expect(f).toContain("› host-0001");
    expect(f).toContain("sh: tail -f /var/log/syslog");
    expect(f).not.toContain("host-0000 ");
  });

  it("stays responsive with 1,000 sessions: renders only the visible rows (keypress times logged, not asserted)", async () => {
    const src = fakeFleet(1000);
    h = await mount(src, { columns: 120, rows: 40 });
    const f = h.frame();
    const rendered = f.split("\n").filter((l) => /host-\d{4}/.test(l)).length;
    expect(rendered).toBeLessThan(40);
    expect(f).toContain("of 1000");
    // Keypress -> new frame, as the operator feels it (Ink caps frames at ~30 per second).
    const lat: number[] = [];
    for (let i = 0; i < 12; i++) {
      const t = performance.now();
      await h.press(i % 2 ? KEY.pageDown : "j");
      lat.push(performance.now() - t);
    }
    await h.press("G");
    expect(selectedRow(h.frame())).toContain("host-0999");
    // A change pushed by the source shows up.
    src.sessions = src.sessions.map((s, i) => (i === 999 ? { ...s, running: 3 } : s));
    src.changed();
    await eventually(() => expect(lineWith(h!.frame(), "host-0999")).toMatch(/3\/4/));
    lat.sort((a, b) => a - b);
    console.log(`[measure] sessions view: keypress->frame median ${lat[6]!.toFixed(1)} ms, max ${lat[lat.length - 1]!.toFixed(1)} ms at 1,000 sessions`);
  });

  it("one full render does the same work at 1,000 and 10,000 sessions: only the visible rows' cells are computed", () => {
    /** Renders the app once over `n` sessions; how many sessions had a row drawn (their GEN cell read). */
    const rowsDrawn = (n: number): number => {
      const src = fakeFleet(n);
      const drawn = new Set<number>();
      src.sessions = src.sessions.map(
        (s, i) =>
          new Proxy(s, {
            get(t, k, r) {
              if (k === "generation") drawn.add(i);
              return Reflect.get(t, k, r);
            },
          }),
      );
      renderToString(<App source={src} />, { columns: 120 });
      return drawn.size;
    };
    expect(rowsDrawn(10)).toBe(10);
    const [k1, k10] = [rowsDrawn(1000), rowsDrawn(10_000)];
    expect(k1).toBeGreaterThan(10);
    expect(k1).toBeLessThan(60);
    expect(k10).toBe(k1);
  });

  it("PgDn/PgUp page through and g/G jump to the first/last row", async () => {
    h = await mount(fakeFleet(200), { rows: 30 });
    await h.press(KEY.pageDown);
    const after = selectedRow(h.frame())!;
    expect(after).not.toContain("host-0000");
    await h.press(KEY.pageUp);
    expect(selectedRow(h.frame())).toContain("host-0000");
    await h.press("G");
    expect(selectedRow(h.frame())).toContain("host-0199");
    await h.press("g");
    expect(selectedRow(h.frame())).toContain("host-0000");
  });

  it("says so while waiting for a server that is unreachable", async () => {
    const src = new FakeSource({ status: { connected: false, error: "cannot reach the server at http://127.0.0.1:1 (ECONNREFUSED)" } });
    h = await mount(src, { columns: 140 });
    expect(h.frame()).toContain("DISCONNECTED: cannot reach the server");
    expect(h.frame()).toContain("waiting for the server");
  });
});
