import { afterEach, describe, expect, it } from "vitest";
import { FAKE_NOW, fakeSession, FakeSource } from "../../tui/sources/fake-source.js";
import { eventually, KEY, lineWith, mount, selectedRow, type Harness } from "./helpers.js";

let h: Harness | undefined;
afterEach(() => h?.unmount());

function source(): FakeSource {
  return new FakeSource({
    sessions: [fakeSession(0, { clientId: "web-1", instanceId: "inst-current-0001" }), fakeSession(1, { clientId: "web-2", instanceId: "inst-current-0002" })],
    claims: [
      { clientId: "web-1", instanceId: "inst-claimer-aaaa", currentInstanceId: "inst-current-0001", at: FAKE_NOW - 30_000, attempts: 4 },
      { clientId: "web-2", instanceId: "inst-claimer-bbbb", currentInstanceId: "inst-current-0002", at: FAKE_NOW - 90_000, attempts: 1 },
    ],
    incidents: [
      {
        id: "inc-7",
        clientId: "web-1",
        uuid: "1234abcd-0000",
        kind: "recovery",
        detail: "agent-known command missing at the server; terminated locally",
        at: FAKE_NOW - 60_000,
        acknowledged: false,
      },
      { id: "inc-8", clientId: "web-2", uuid: "", kind: "store", detail: "essential store corrupt at record 812", at: FAKE_NOW - 5_000, acknowledged: false },
      { id: "inc-3", clientId: "web-2", uuid: "", kind: "store", detail: "old and handled", at: FAKE_NOW - 900_000, acknowledged: true },
    ],
  });
}

describe("claims view", () => {
  it("R-F4: lists pending identity claims with the claiming and the current instance", async () => {
    h = await mount(source(), { columns: 120 });
    await h.press("3");
    const f = h.frame();
    expect(f).toMatch(/CLIENT\s+CLAIMING INSTANCE\s+CURRENT INSTANCE\s+TRIES\s+SINCE/);
    expect(lineWith(f, "inst-claimer-aaaa")).toMatch(/web-1\s+inst-claimer-aaaa\s+inst-current-0001\s+4\s+30s ago/);
    expect(f).toContain("3 Claims (2)");
  });

  it("R-F5: a asks, y authorizes exactly the claiming instance once, and the claim goes away", async () => {
    const src = source();
    h = await mount(src, { columns: 120 });
    await h.press("3", "j", "a");
    expect(h.frame()).toContain("Authorize instance inst-claimer-bbbb to take over web-2 once? (y/n)");
    await h.press("y");
    await eventually(() => expect(h!.frame()).toContain("authorized inst-claimer-bbbb for web-2"));
    expect(src.calls).toEqual([{ op: "authorize", clientId: "web-2", instanceId: "inst-claimer-bbbb" }]);
    expect(h.frame()).not.toMatch(/web-2\s+inst-claimer-bbbb\s+inst-current/);
    expect(h.frame()).toContain("3 Claims (1)");
  });

  it("enter authorizes too, and n leaves the claim alone", async () => {
    const src = source();
    h = await mount(src);
    await h.press("3", KEY.enter, "n");
    expect(src.calls).toEqual([]);
    await h.press(KEY.enter, "y");
    await eventually(() => expect(src.calls).toEqual([{ op: "authorize", clientId: "web-1", instanceId: "inst-claimer-aaaa" }]));
  });

  it("R-F4: d asks, y dismisses the selected claim without authorizing it", async () => {
    const src = source();
    h = await mount(src, { columns: 120 });
    await h.press("3", "j", "d");
    expect(h.frame()).toContain("Dismiss the claim of instance inst-claimer-bbbb for web-2 (without authorizing it)? (y/n)");
    await h.press("y");
    await eventually(() => expect(h!.frame()).toContain("dismissed the claim of instance inst-claimer-bbbb for web-2"));
    expect(src.calls).toEqual([{ op: "dismiss_claim", clientId: "web-2" }]);
    expect(h.frame()).toContain("3 Claims (1)");
  });

  it("says so when there are no claims", async () => {
    h = await mount(new FakeSource({}));
    await h.press("3");
    expect(h.frame()).toContain("no pending identity claims");
  });
});

describe("incidents view", () => {
  it("R-D11: says how many incidents each client had counted instead of stored, above the list; nothing when none were", async () => {
    const src = source();
    src.sessions = [
      fakeSession(0, { clientId: "web-1", incidentsDropped: 9905 }),
      fakeSession(1, { clientId: "web-2", incidentsDropped: 0 }),
      fakeSession(2, { clientId: "web-3", incidentsDropped: 2 }),
    ];
    h = await mount(src, { columns: 140 });
    await h.press("4");
    const f = h.frame();
    expect(f).toContain("9907 not stored (incident bounds): web-1 9905, web-3 2");
    expect(lineWith(f, "inc-7")).toMatch(/inc-7\s+recovery\s+web-1/);
    h.unmount();
    h = await mount(source(), { columns: 140 });
    await h.press("4");
    expect(h.frame()).not.toContain("not stored");
  });

  it("lists unacknowledged incidents with kind, client, command, age and detail", async () => {
    h = await mount(source(), { columns: 140 });
    await h.press("4");
    const f = h.frame();
    expect(lineWith(f, "inc-7")).toMatch(/inc-7\s+recovery\s+web-1\s+1234abcd-0\s+1m ago\s+no\s+agent-known command missing/);
    expect(lineWith(f, "inc-8")).toMatch(/store\s+web-2/);
    expect(f).not.toContain("inc-3");
    expect(f).toContain("4 Incidents (2)");
  });

  it("a acknowledges the selected incident (enter too)", async () => {
    const src = source();
    h = await mount(src, { columns: 140 });
    await h.press("4", "j", "a");
    await eventually(() => expect(h!.frame()).toContain("incident inc-8 acknowledged"));
    await h.press("k", KEY.enter);
    await eventually(() =>
      expect(src.calls).toEqual([
        { op: "ack", id: "inc-8" },
        { op: "ack", id: "inc-7" },
      ]),
    );
    await eventually(() => expect(h!.frame()).toContain("no incidents"));
  });

  it("h shows acknowledged incidents too, dimmed and marked yes; a on one says it is already acknowledged", async () => {
    const src = source();
    h = await mount(src, { columns: 140 });
    await h.press("4", "h");
    expect(lineWith(h.frame(), "inc-3")).toMatch(/yes\s+old and handled/);
    await h.press("G");
    expect(selectedRow(h.frame())).toContain("inc-3");
    await h.press("a");
    expect(h.frame()).toContain("incident inc-3 is already acknowledged");
    expect(src.calls).toEqual([]);
    await h.press("h");
    expect(h.frame()).not.toContain("inc-3");
  });

  it("refuses actions on a read-only source (sim replay) with a clear message", async () => {
    const src = source();
    src.readOnly = true;
    h = await mount(src, { columns: 140 });
    await h.press("4", "a");
    await eventually(() => expect(h!.frame()).toContain("read-only: this is a simulation replay"));
    await h.press("3", KEY.enter);
    expect(h.frame()).toContain("read-only: this is a simulation replay");
    expect(h.frame()).not.toContain("(y/n)");
    expect(src.calls).toEqual([]);
  });
});
