import { afterEach, describe, expect, it } from "vitest";
import { fakeCommand, fakeFleet, fakeSession, FakeSource } from "../../tui/sources/fake-source.js";
import { eventually, KEY, lineWith, mount, selectedRow, type Harness } from "./helpers.js";

let h: Harness | undefined;
afterEach(() => h?.unmount());

function source(): FakeSource {
  return new FakeSource({
    sessions: [fakeSession(0, { clientId: "web-1" }), fakeSession(1, { clientId: "web-2" })],
    commands: [
      fakeCommand("web-1", 1, { uuid: "aaaa1111-0000", state: "succeeded", exitCode: 0, revision: 1, program: "argv: uname -a", storedThrough: 4 }),
      fakeCommand("web-1", 2, { uuid: "bbbb2222-0000", state: "failed", exitCode: 3, revision: 1, program: "sh: exit 3" }),
      fakeCommand("web-1", 3, { uuid: "cccc3333-0000", state: "running", revision: 3, program: "sh: cat", stdinOpen: true }),
      fakeCommand("web-1", 4, { uuid: "dddd4444-0000", state: "cancelled", signalName: "SIGTERM", revision: 2, program: "argv: sleep 600" }),
      fakeCommand("web-1", 5, { uuid: "eeee5555-0000", state: "queued", revision: 1, program: "argv: true" }),
      fakeCommand("web-2", 1, { uuid: "ffff6666-0000", state: "rejected", reason: "unsupported shell", program: "sh: x" }),
    ],
  });
}

describe("commands view", () => {
  it("lists one client's commands newest first with state, revision and outcome", async () => {
    h = await mount(source(), { initialClient: "web-1", columns: 120 });
    const f = h.frame();
    expect(f).toContain("› web-1");
    const rows = f.split("\n").filter((l) => /[a-f]{4}\d{4}-0/.test(l));
    expect(rows.map((r) => r.trim().slice(2, 6).trim() || r.trim().slice(0, 4))).toHaveLength(5);
    expect(rows[0]).toContain("eeee5555");
    expect(lineWith(f, "eeee5555")).toMatch(/queued\s+1\s+-/);
    expect(lineWith(f, "cccc3333")).toMatch(/running\s+3\s+-/);
    expect(lineWith(f, "bbbb2222")).toMatch(/failed\s+1\s+exit 3/);
    expect(lineWith(f, "dddd4444")).toMatch(/cancelled\s+2\s+SIGTERM/);
    expect(f).not.toContain("ffff6666");
  });

  it("a shows every client's commands with a CLIENT column", async () => {
    h = await mount(source(), { initialClient: "web-1", columns: 120 });
    await h.press("a");
    const f = h.frame();
    expect(f).toContain("CLIENT");
    expect(lineWith(f, "ffff6666")).toMatch(/web-2\s+rejected/);
    expect(f).toContain("› all clients");
  });

  it("keeps the list current while shown and releases it when left (watchCommands)", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    expect(src.watchingCommands.get("web-1")).toBe(1);
    src.update("eeee5555-0000", { state: "running", revision: 2 });
    await eventually(() => expect(lineWith(h!.frame(), "eeee5555")).toMatch(/running\s+2/));
    await h.press(KEY.esc);
    expect(h.frame()).toContain("CLIENT");
    expect(src.watchingCommands.get("web-1")).toBe(0);
  });

  it("the selection stays on the same command when newer commands arrive above it", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("j", "j");
    expect(selectedRow(h.frame())).toContain("cccc3333");
    src.commandList = [
      ...src.commandList,
      fakeCommand("web-1", 9, { uuid: "9999new1-0000", createdAt: Date.now() }),
      fakeCommand("web-1", 10, { uuid: "9999new2-0000", createdAt: Date.now() + 1 }),
    ];
    src.changed();
    await eventually(() => expect(h!.frame()).toContain("9999new2"));
    expect(selectedRow(h.frame())).toContain("cccc3333");
    await h.press(KEY.enter);
    expect(h.frame()).toContain("cccc3333-0000 on web-1");
  });

  it("enter opens the selected command's output; esc goes back to the list, esc again to sessions", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("j", "j", KEY.enter);
    expect(h.frame()).toContain("cccc3333-0000 on web-1 · running");
    expect(src.watchingOutput.get("cccc3333-0000")).toBe(1);
    await h.press(KEY.esc);
    expect(selectedRow(h.frame())).toContain("cccc3333");
    expect(src.watchingOutput.get("cccc3333-0000")).toBe(0);
    await h.press(KEY.esc);
    expect(h.frame()).toContain("LAST ACTIVITY");
  });

  it("c asks to cancel and y sends CANCEL; n does nothing", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("j", "j", "c");
    expect(h.frame()).toContain("Cancel cccc3333-0000 on web-1? (y/n)");
    await h.press("n");
    expect(src.calls).toEqual([]);
    expect(h.frame()).toContain("nothing done");
    await h.press("c", "y");
    await eventually(() => expect(h!.frame()).toContain("cancel requested (revision 4)"));
    expect(src.calls).toEqual([{ op: "signal", uuid: "cccc3333-0000", signal: "CANCEL" }]);
  });

  it("x opens the signal picker: t TERM, k KILL, 1 USR1; esc closes it", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("j", "j", "x");
    expect(h.frame()).toMatch(/signal cccc3333-0000: t TERM · i INT · k KILL/);
    await h.press("t");
    await h.press("x", "k");
    await h.press("x", "1");
    await eventually(() => expect(h!.frame()).toContain("SIGUSR1 requested for cccc3333-0000"));
    await h.press("x", KEY.esc);
    expect(h.frame()).not.toContain("signal cccc3333-0000:");
    expect(src.calls.map((c) => (c.op === "signal" ? c.signal : c.op))).toEqual(["TERM", "KILL", "USR1"]);
  });

  it("R-S2: i writes a line to stdin with a newline appended by default; ctrl-n sends it without", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("j", "j", "i");
    expect(h.frame()).toContain("stdin cccc3333>");
    expect(h.frame()).toContain("enter sends + newline");
    await h.type("hello world");
    await h.press(KEY.enter);
    await h.press("i", KEY.ctrlN);
    expect(h.frame()).toContain("no newline");
    await h.type("raw");
    await h.press(KEY.backspace, KEY.enter);
    await eventually(() => expect(src.calls).toHaveLength(2));
    expect(src.calls).toEqual([
      { op: "stdin", uuid: "cccc3333-0000", text: "hello world", appendNewline: true },
      { op: "stdin", uuid: "cccc3333-0000", text: "ra", appendNewline: false },
    ]);
  });

  it("i on a command without open stdin says so instead of prompting", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("i");
    expect(h.frame()).toContain("stdin of eeee5555-0000 is not open");
    expect(src.calls).toEqual([]);
  });

  it("i on a command whose stdin an operator closed says so instead of prompting", async () => {
    const src = new FakeSource({
      sessions: [fakeSession(0, { clientId: "web-1" })],
      commands: [fakeCommand("web-1", 1, { uuid: "abab1212-0000", state: "running", program: "sh: cat", stdinOpen: true, stdinCloseRequested: true })],
    });
    h = await mount(src, { initialClient: "web-1" });
    await h.press("i");
    expect(h.frame()).toContain("stdin of abab1212-0000 was closed; it takes no more writes");
    expect(h.frame()).not.toContain("enter sends");
    expect(src.calls).toEqual([]);
  });

  it("D closes the selected command's stdin", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("j", "j", "D");
    await eventually(() => expect(h!.frame()).toContain("stdin of cccc3333-0000 closed"));
    expect(src.calls).toEqual([{ op: "close_stdin", uuid: "cccc3333-0000" }]);
  });

  it("s opens the submit form for this client; enter submits a shell line and opens its output", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1", columns: 110 });
    await h.press("s");
    expect(h.frame()).toContain("Submit a command");
    expect(lineWith(h.frame(), "client    ")).toContain("web-1");
    await h.type("echo hi; exit 0");
    await h.press(KEY.tab, " "); // stdin open
    expect(h.frame()).toContain("[x] open");
    await h.press(KEY.enter);
    await eventually(() => expect(h!.frame()).toContain("submitted new-1 to web-1"));
    expect(src.calls).toEqual([{ op: "submit", spec: { clientId: "web-1", program: { kind: "shell", line: "echo hi; exit 0" }, stdinOpen: true } }]);
    expect(h.frame()).toContain("new-1 on web-1 · queued");
  });

  it("the submit form refuses an empty command and esc cancels it", async () => {
    const src = source();
    h = await mount(src, { initialClient: "web-1" });
    await h.press("s", KEY.enter);
    expect(h.frame()).toContain("command is required");
    await h.press(KEY.esc);
    expect(h.frame()).not.toContain("Submit a command");
    expect(src.calls).toEqual([]);
  });

  it("s from the sessions view fills in the selected client", async () => {
    const src = fakeFleet(3);
    h = await mount(src);
    await h.press("j", "s");
    expect(lineWith(h.frame(), "client    ")).toContain("host-0001");
  });

  it("shows an action's error in the message line", async () => {
    const src = source();
    src.failNext = "refused: command cccc3333-0000 is already terminal";
    h = await mount(src, { initialClient: "web-1" });
    await h.press("j", "j", "x", "t");
    await eventually(() => expect(h!.frame()).toContain("refused: command cccc3333-0000 is already terminal"));
  });

  it("an error longer than the terminal is wide is wrapped whole over up to three lines, taken from the view; the frame keeps its height", async () => {
    const why = "submit to db-1: permission denied: operator alice may run only on clients matching role=web; client db-1 has labels role=db";
    const src = source();
    src.failNext = why;
    h = await mount(src, { initialClient: "web-1", columns: 60, rows: 20 });
    const height = h.lines().length;
    await h.press("j", "j", "x", "t");
    await eventually(() => expect(h!.frame()).toContain("permission denied"));
    const lines = h.lines();
    expect(lines.length).toBe(height);
    expect(lines.every((l) => l.length <= 60)).toBe(true);
    const at = lines.findIndex((l) => l.startsWith("submit to db-1"));
    expect(at).toBeGreaterThan(0);
    // The whole message, word by word, on the lines above the help line.
    expect(
      lines
        .slice(at, -1)
        .map((l) => l.trim())
        .join(" "),
    ).toBe(why);
    expect(lines.at(-1)).toMatch(/^↑↓/); // the help line stays last
    // The next key clears it and the view has its rows back.
    await h.press("k");
    expect(h.frame()).not.toContain("permission denied");
    expect(h.lines().length).toBe(height);
  });
});
