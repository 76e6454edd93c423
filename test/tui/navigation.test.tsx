import { afterEach, describe, expect, it } from "vitest";
import { fakeFleet } from "../../tui/sources/fake-source.js";
import { KEY, mount, type Harness } from "./helpers.js";

let h: Harness | undefined;
afterEach(() => h?.unmount());

const activeTab = (frame: string): string => frame.split("\n")[1] ?? "";

describe("navigation and layout", () => {
  it("tab and shift-tab cycle sessions → commands → claims → incidents → jobs; 1-5 jump", async () => {
    h = await mount(fakeFleet(3), { columns: 120 });
    expect(h.frame()).toContain("LAST ACTIVITY");
    await h.press(KEY.tab);
    expect(h.frame()).toContain("› all clients");
    expect(h.frame()).toContain("PROGRAM");
    await h.press(KEY.tab);
    expect(h.frame()).toContain("CLAIMING INSTANCE");
    await h.press(KEY.tab);
    expect(h.frame()).toContain("DETAIL");
    expect(h.frame()).toContain("recovery");
    await h.press(KEY.tab);
    expect(h.frame()).toContain("no jobs");
    await h.press(KEY.tab);
    expect(h.frame()).toContain("LAST ACTIVITY");
    await h.press(KEY.shiftTab);
    expect(h.frame()).toContain("no jobs");
    await h.press(KEY.shiftTab);
    expect(h.frame()).toContain("recovery");
    await h.press("2");
    expect(h.frame()).toContain("PROGRAM");
    await h.press("1");
    expect(h.frame()).toContain("LAST ACTIVITY");
    void activeTab;
  });

  it("shows a help line for the current view and ? opens the full key list (esc closes)", async () => {
    h = await mount(fakeFleet(3), { columns: 120 });
    const last = (): string =>
      h!
        .lines()
        .filter((l) => l.trim() !== "")
        .pop() ?? "";
    expect(last()).toContain("enter commands · s submit · tab/1-5 views · ? help · q quit");
    await h.press("3");
    expect(last()).toContain("a/enter authorize");
    await h.press("?");
    expect(h.frame()).toContain("Keys (? or esc closes)");
    expect(h.frame()).toContain("sim: , .");
    await h.press(KEY.esc);
    expect(h.frame()).not.toContain("Keys (? or esc closes)");
  });

  it("keys typed faster than the screen redraws are applied in order (navigation, prompt, form)", async () => {
    const src = fakeFleet(5);
    h = await mount(src, { columns: 120 });
    await h.burst("j", "j", KEY.enter);
    expect(h.frame()).toContain("› host-0002");
    await h.burst("j", "j", "c", "y");
    await new Promise((r) => setTimeout(r, 50));
    expect(src.calls).toEqual([{ op: "signal", uuid: "job2-host-0002", signal: "CANCEL" }]);
    await h.burst("s", ..."echo fast", KEY.enter);
    await new Promise((r) => setTimeout(r, 50));
    expect(src.calls[1]).toEqual({ op: "submit", spec: { clientId: "host-0002", program: { kind: "shell", line: "echo fast" }, stdinOpen: false } });
  });

  it("text and Enter arriving in one read (a paste) are split into typing and the Enter key", async () => {
    const src = fakeFleet(3);
    h = await mount(src, { columns: 120 });
    await h.press("s");
    await h.press("echo one\r");
    await new Promise((r) => setTimeout(r, 50));
    expect(src.calls).toEqual([{ op: "submit", spec: { clientId: "host-0000", program: { kind: "shell", line: "echo one" }, stdinOpen: false } }]);
  });

  it('several keys in one read outside a text field are separate keys ("jj" moves twice, "n4" answers no, then switches view)', async () => {
    const src = fakeFleet(5);
    h = await mount(src, { columns: 120 });
    await h.press("jj");
    expect(h.frame()).toContain("› host-0002");
    await h.press("3", "a");
    expect(h.frame()).toContain("(y/n)");
    await h.press("n4");
    expect(h.frame()).toContain("recovery");
    expect(src.calls).toEqual([]);
  });

  it("Esc followed at once by a key (read as alt+key) is Esc, then that key", async () => {
    const src = fakeFleet(3);
    h = await mount(src, { columns: 120 });
    await h.press(KEY.enter, KEY.enter);
    expect(h.frame()).toContain("on host-0000");
    await h.press("\x1b3");
    expect(h.frame()).toContain("CLAIMING INSTANCE");
  });

  it("q quits", async () => {
    h = await mount(fakeFleet(3));
    await h.press("q");
    expect(h.exited()).toBe(true);
  });

  it("ctrl-c quits", async () => {
    h = await mount(fakeFleet(3));
    await h.press(KEY.ctrlC);
    expect(h.exited()).toBe(true);
  });

  it("resizes cleanly: every line fits the new width and the frame fits the new height", async () => {
    h = await mount(fakeFleet(1000), { columns: 120, rows: 40 });
    const check = (cols: number, rows: number): void => {
      const lines = h!.lines();
      expect(lines.length).toBeLessThanOrEqual(rows - 1);
      for (const l of lines) expect(l.length).toBeLessThanOrEqual(cols);
    };
    check(120, 40);
    expect(h.frame()).toContain("BUDGET");
    await h.resize(60, 15);
    check(60, 15);
    expect(h.frame()).not.toContain("BUDGET"); // optional columns drop out
    expect(h.frame()).toContain("host-0000");
    await h.resize(200, 60);
    check(200, 60);
    expect(h.frame()).toContain("DETAIL");
    await h.press("2");
    await h.resize(30, 12);
    check(30, 12);
    await h.press("1", "G");
    await h.resize(80, 24);
    check(80, 24);
    expect(h.frame()).toContain("host-0999");
  });
});
