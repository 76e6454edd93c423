/**
 * The RVBox TUI: sessions, commands per client, a live output pane, pending
 * identity claims and incidents, a submit form, and (sim mode) a timeline.
 * Everything is read from a DataSource (tui/source.ts) and re-rendered when it
 * says something changed; the views poll nothing.
 *
 * Layout (rows): 2 header lines · [sim: timeline bar] · the view · a message
 * or prompt line · the help line. The whole frame is one row shorter than the
 * terminal so Ink redraws in place, and every line is cut to the width.
 *
 * UI state lives in a ref (plus a render counter), not in closures: keys can
 * arrive faster than React re-renders (a paste, key repeat, a script driving
 * the terminal), and each key must see what the previous one did.
 */
import type React from "react";
import { useEffect, useReducer, useRef } from "react";
import { Box, Text, useApp, useInput, type Key } from "ink";
import { fit, shortId, wrap } from "./format.js";
import { useSource, useTerminalSize } from "./hooks.js";
import type { CommandInfo, DataSource, FleetSnapshot, JobInfo, OutputSnapshot, SessionInfo } from "./source.js";
import { ClaimsView } from "./views/claims.js";
import { CommandsView } from "./views/commands.js";
import { Header, TABS, type Tab } from "./views/header.js";
import { HelpLine, HelpOverlay, type HelpContext } from "./views/help.js";
import { IncidentsView } from "./views/incidents.js";
import { JobsView } from "./views/jobs.js";
import { OutputView } from "./views/output.js";
import {
  ConfirmLine,
  confirmKey,
  formKey,
  newForm,
  SignalLine,
  signalKey,
  SUBMIT_HEIGHT,
  SubmitFormView,
  TextLine,
  textKey,
  type FormState,
  type SubmitValues,
} from "./views/prompts.js";
import { SessionsView } from "./views/sessions.js";
import { TIMELINE_HEIGHT, TimelineBar } from "./views/timeline-bar.js";

export interface AppProps {
  source: DataSource;
  /** Open this client's commands first. */
  initialClient?: string;
  onExit?: () => void;
}

type CommandRef = CommandInfo | { uuid: string; clientId: string };

type Prompt =
  | { kind: "confirm"; text: string; run: () => Promise<string>; pending: string }
  | { kind: "signal"; cmd: CommandRef }
  | { kind: "stdin"; uuid: string; value: string }
  | { kind: "submit"; form: FormState }
  | { kind: "filter"; value: string }
  | { kind: "help" };

interface Ui {
  tab: Tab;
  cmdClient: string | null;
  outputOf: string | null;
  /** First output line shown; null: follow the tail. */
  outTop: number | null;
  sel: Record<Tab, number>;
  /** The selected row's identity per tab: rows inserted above it (new commands) do not move the selection. */
  selKey: Record<Tab, string | null>;
  prompt: Prompt | null;
  message: { text: string; error: boolean } | null;
  showAcked: boolean;
  newline: boolean;
}

/** Base client id of a simulated host name ("agent-1~clone7" -> "agent-1"). */
const baseNode = (n: string): string => n.split("~")[0]!;

interface Derived {
  fleet: FleetSnapshot;
  sessions: readonly SessionInfo[];
  commands: readonly CommandInfo[];
  claims: FleetSnapshot["claims"];
  incidents: FleetSnapshot["incidents"];
  jobs: readonly JobInfo[];
  counts: Record<Tab, number>;
  sel: Record<Tab, number>;
  selSession: SessionInfo | undefined;
  selCommand: CommandInfo | undefined;
  output: OutputSnapshot | null;
  outCommand: CommandRef | undefined;
}

const rowKey = {
  sessions: (s: SessionInfo): string => s.key,
  commands: (c: CommandInfo): string => c.uuid,
  claims: (c: FleetSnapshot["claims"][number]): string => `${c.clientId}/${c.instanceId}`,
  incidents: (i: FleetSnapshot["incidents"][number]): string => i.id,
  jobs: (j: JobInfo): string => j.id,
};

function keyAt(d: Derived, t: Tab, i: number): string | null {
  switch (t) {
    case "sessions":
      return d.sessions[i] ? rowKey.sessions(d.sessions[i]!) : null;
    case "commands":
      return d.commands[i] ? rowKey.commands(d.commands[i]!) : null;
    case "claims":
      return d.claims[i] ? rowKey.claims(d.claims[i]!) : null;
    case "incidents":
      return d.incidents[i] ? rowKey.incidents(d.incidents[i]!) : null;
    case "jobs":
      return d.jobs[i] ? rowKey.jobs(d.jobs[i]!) : null;
  }
}

/** What the views show for a UI state, from the source's current data. */
function derive(source: DataSource, ui: Ui): Derived {
  const tl = source.timeline;
  const fleet = source.fleet();
  const nodeFilter = tl?.filter.node ?? null;
  const cmdFilter = tl?.filter.command ?? null;
  const sessions =
    nodeFilter && nodeFilter !== "server" ? fleet.sessions.filter((s) => s.key === nodeFilter || baseNode(s.key) === nodeFilter) : fleet.sessions;
  let commands = source.commands(ui.cmdClient);
  if (nodeFilter && nodeFilter !== "server" && ui.cmdClient === null) commands = commands.filter((c) => c.clientId === baseNode(nodeFilter));
  if (cmdFilter) commands = commands.filter((c) => c.uuid.includes(cmdFilter));
  const claims = fleet.claims;
  const incidents = ui.showAcked ? fleet.incidents : fleet.incidents.filter((i) => !i.acknowledged);
  const jobs = source.jobs?.() ?? [];
  const counts: Record<Tab, number> = {
    sessions: sessions.length,
    commands: commands.length,
    claims: claims.length,
    incidents: incidents.length,
    jobs: jobs.length,
  };
  const sel = { ...ui.sel };
  const keyed: Record<Tab, ReadonlyArray<string>> = {
    sessions: ui.selKey.sessions ? sessions.map(rowKey.sessions) : [],
    commands: ui.selKey.commands ? commands.map(rowKey.commands) : [],
    claims: ui.selKey.claims ? claims.map(rowKey.claims) : [],
    incidents: ui.selKey.incidents ? incidents.map(rowKey.incidents) : [],
    jobs: ui.selKey.jobs ? jobs.map(rowKey.jobs) : [],
  };
  for (const t of TABS) {
    const k = ui.selKey[t];
    const at = k ? keyed[t].indexOf(k) : -1;
    sel[t] = at >= 0 ? at : Math.max(0, Math.min(sel[t], counts[t] - 1));
  }
  const selCommand = commands[sel.commands];
  let output: OutputSnapshot | null = null;
  let outCommand: CommandRef | undefined = selCommand;
  if (ui.outputOf) {
    const raw = source.output(ui.outputOf);
    const listed = commands.find((c) => c.uuid === ui.outputOf);
    output = raw.command ? raw : { ...raw, command: listed ?? null };
    outCommand = output.command ?? { uuid: ui.outputOf, clientId: ui.cmdClient ?? "" };
  }
  return { fleet, sessions, commands, claims, incidents, jobs, counts, sel, selSession: sessions[sel.sessions], selCommand, output, outCommand };
}

export function App({ source, initialClient, onExit }: AppProps): React.ReactElement {
  useSource(source);
  const { exit } = useApp();
  const { columns, rows } = useTerminalSize();
  const [, rerender] = useReducer((n: number) => n + 1, 0);
  const ui = useRef<Ui>({
    tab: initialClient ? "commands" : "sessions",
    cmdClient: initialClient ?? null,
    outputOf: null,
    outTop: null,
    sel: { sessions: 0, commands: 0, claims: 0, incidents: 0, jobs: 0 },
    selKey: { sessions: null, commands: null, claims: null, incidents: null, jobs: null },
    prompt: null,
    message: null,
    showAcked: false,
    newline: true,
  });
  const update = (patch: Partial<Ui> | ((u: Ui) => Partial<Ui>)): void => {
    ui.current = { ...ui.current, ...(typeof patch === "function" ? patch(ui.current) : patch) };
    rerender();
  };

  const tl = source.timeline;
  const width = Math.max(20, columns);
  const height = Math.max(8, rows - 1);
  const u = ui.current;
  // A message too long for one line (a refusal naming why) takes up to MESSAGE_MAX_LINES, from the view.
  const messageLines = u.message && !LINE_PROMPTS.has(u.prompt?.kind ?? "") ? wrap(u.message.text, width, MESSAGE_MAX_LINES) : null;
  const body = Math.max(3, height - 4 - (tl ? TIMELINE_HEIGHT : 0) - (messageLines ? messageLines.length - 1 : 0));

  const d = derive(source, u);

  const watchingCommands = u.tab === "commands" || u.outputOf !== null;
  useEffect(() => (watchingCommands ? source.watchCommands(u.cmdClient) : undefined), [source, u.cmdClient, watchingCommands]);
  useEffect(() => (u.outputOf ? source.watchOutput(u.outputOf) : undefined), [source, u.outputOf]);
  useEffect(() => (u.tab === "jobs" ? source.watchJobs?.() : undefined), [source, u.tab]);

  // ---------------------------------------------------------------- actions
  const act = (pending: string, run: () => Promise<string>): void => {
    update({ message: { text: pending, error: false } });
    run().then(
      (text) => update({ message: { text, error: false } }),
      (err: unknown) => update({ message: { text: err instanceof Error ? err.message : String(err), error: true } }),
    );
  };
  const say = (text: string, error = false): void => update({ message: { text, error } });

  const quit = (): void => {
    onExit?.();
    exit();
  };

  const move = (t: Tab, delta: number | "first" | "last"): void => {
    const now = derive(source, ui.current);
    const n = now.counts[t];
    const cur = now.sel[t];
    const next = Math.max(0, Math.min(delta === "first" ? 0 : delta === "last" ? n - 1 : cur + delta, n - 1));
    update((x) => ({ sel: { ...x.sel, [t]: next }, selKey: { ...x.selKey, [t]: keyAt(now, t, next) } }));
  };

  const switchTab = (t: Tab): void => update({ outputOf: null, tab: t });

  const openStdin = (c: CommandRef | undefined): void => {
    if (!c) return;
    if ("stdinOpen" in c && !c.stdinOpen) return say(`stdin of ${shortId(c.uuid, 13)} is not open (submit with stdin open)`, true);
    if ("stdinCloseRequested" in c && c.stdinCloseRequested) return say(`stdin of ${shortId(c.uuid, 13)} was closed; it takes no more writes`, true);
    update({ prompt: { kind: "stdin", uuid: c.uuid, value: "" } });
  };

  const commandKeys = (input: string, c: CommandRef | undefined): void => {
    if (!c) return;
    switch (input) {
      case "c":
        return update({
          prompt: {
            kind: "confirm",
            text: `Cancel ${shortId(c.uuid, 13)} on ${c.clientId}?`,
            pending: "cancelling…",
            run: async () => `cancel requested (revision ${await source.signal(c.uuid, "CANCEL")})`,
          },
        });
      case "x":
        return update({ prompt: { kind: "signal", cmd: c } });
      case "i":
        return openStdin(c);
      case "D":
        return act("closing stdin…", async () => {
          await source.closeStdin(c.uuid);
          return `stdin of ${shortId(c.uuid, 13)} closed`;
        });
    }
  };

  const simKeys = (input: string): boolean => {
    if (!tl) return false;
    switch (input) {
      case ",":
        tl.step(-1);
        return true;
      case ".":
        tl.step(1);
        return true;
      case "[":
        tl.jump(-10_000);
        return true;
      case "]":
        tl.jump(10_000);
        return true;
      case "<":
        tl.seek(0);
        return true;
      case ">":
        tl.seek(tl.frames - 1);
        return true;
      case " ":
        tl.togglePlay();
        return true;
      case "F":
        if (tl.failure) tl.seek(tl.failure.frame);
        else say(tl.recording ? "still recording…" : "this seed did not fail");
        return true;
      case "n": {
        const nodes: Array<string | null> = [null, ...tl.nodes];
        const i = nodes.indexOf(tl.filter.node);
        tl.setFilter({ node: nodes[(i + 1) % nodes.length] ?? null });
        update({
          sel: { sessions: 0, commands: 0, claims: 0, incidents: 0, jobs: 0 },
          selKey: { sessions: null, commands: null, claims: null, incidents: null, jobs: null },
        });
        return true;
      }
      case "/":
        update({ prompt: { kind: "filter", value: tl.filter.command ?? "" } });
        return true;
    }
    return false;
  };

  const close = (): void => update({ prompt: null });

  const submit = (v: SubmitValues): void =>
    act("submitting…", async () => {
      const uuid = await source.submit({ clientId: v.clientId, program: { kind: "shell", line: v.line }, stdinOpen: v.stdinOpen });
      update({ cmdClient: v.clientId, tab: "commands", outTop: null, outputOf: uuid });
      return `submitted ${uuid} to ${v.clientId}`;
    });

  /** A key while a prompt is open: the prompt takes it. */
  const promptKey = (p: Prompt, input: string, key: Key): void => {
    if (key.ctrl && input === "c") return quit();
    switch (p.kind) {
      case "help":
        if (key.escape || input === "?" || input === "q" || key.return) close();
        return;
      case "confirm": {
        const r = confirmKey(input, key);
        if (r === "yes") {
          close();
          act(p.pending, p.run);
        } else if (r === "no") update({ prompt: null, message: { text: "nothing done", error: false } });
        return;
      }
      case "signal": {
        const r = signalKey(input, key);
        if (r === "cancel") return close();
        if (r) {
          close();
          const c = p.cmd;
          act(
            `sending ${r}…`,
            async () => `${r === "CANCEL" ? "cancel" : `SIG${r}`} requested for ${shortId(c.uuid, 13)} (revision ${await source.signal(c.uuid, r)})`,
          );
        }
        return;
      }
      case "stdin": {
        if (key.ctrl && input === "n") return update((x) => ({ newline: !x.newline }));
        const r = textKey(p.value, input, key);
        if ("cancel" in r) return close();
        if ("value" in r) return update({ prompt: { ...p, value: r.value } });
        const nl = ui.current.newline;
        close();
        act("writing stdin…", async () => {
          await source.writeStdin(p.uuid, r.submit, nl);
          return `wrote ${Buffer.byteLength(r.submit) + (nl ? 1 : 0)} bytes to the stdin of ${shortId(p.uuid, 13)}`;
        });
        return;
      }
      case "filter": {
        const r = textKey(p.value, input, key);
        if ("cancel" in r) return close();
        if ("value" in r) return update({ prompt: { ...p, value: r.value } });
        tl?.setFilter({ command: r.submit.trim() === "" ? null : r.submit.trim() });
        update((x) => ({ prompt: null, sel: { ...x.sel, commands: 0 }, selKey: { ...x.selKey, commands: null } }));
        return;
      }
      case "submit": {
        const r = formKey(p.form, input, key);
        if ("cancel" in r) return close();
        if ("form" in r) return update({ prompt: { ...p, form: r.form } });
        close();
        submit(r.submit);
        return;
      }
    }
  };

  const onKey = (input: string, key: Key): void => {
    const cur = ui.current;
    const typing = cur.prompt?.kind === "stdin" || cur.prompt?.kind === "filter" || cur.prompt?.kind === "submit";
    // Several keys in one read ("n4" typed fast): outside a text field each character is a key.
    if (input.length > 1 && !typing && !key.ctrl && !key.meta) {
      for (const ch of input) onKey(ch, NO_KEY);
      return;
    }
    if (cur.prompt) return promptKey(cur.prompt, input, key);
    const now = derive(source, cur);
    if (input === "q" || (key.ctrl && input === "c")) return quit();
    if (cur.message) update({ message: null });
    if (input === "?") return update({ prompt: { kind: "help" } });
    if (key.tab) {
      const i = TABS.indexOf(cur.tab);
      return switchTab(TABS[(i + (key.shift ? TABS.length - 1 : 1)) % TABS.length]!);
    }
    if (/^[1-5]$/.test(input)) return switchTab(TABS[Number(input) - 1]!);
    if (simKeys(input)) return;
    if (
      source.readOnly &&
      (input === "s" ||
        input === "c" ||
        input === "x" ||
        input === "i" ||
        input === "D" ||
        (input === "a" && cur.tab !== "commands") ||
        ((key.return || input === "d") && cur.tab === "claims"))
    ) {
      return say("read-only: this is a simulation replay (actions are refused)", true);
    }
    if (input === "s") {
      const client = cur.outputOf
        ? (now.outCommand?.clientId ?? "")
        : cur.tab === "sessions"
          ? (now.selSession?.clientId ?? "")
          : (cur.cmdClient ?? now.selCommand?.clientId ?? "");
      return update({ prompt: { kind: "submit", form: newForm(client) } });
    }

    if (cur.outputOf) {
      // outTop counts lines from the start of the source's window (snapshot.offset is lines[0]'s
      // number), so lines a window lets go of at its front do not move what the pane shows.
      const uuid = cur.outputOf;
      const out = now.output;
      const total = out?.lines.length ?? 0;
      const off = out?.offset ?? 0;
      const win = out?.window;
      const page = Math.max(1, body - 3);
      const maxTop = Math.max(0, total - (body - 2));
      const top = cur.outTop === null ? maxTop : Math.max(0, Math.min(cur.outTop - off, maxTop));
      const setTop = (t: number | null): void => {
        source.followOutput?.(uuid, t === null);
        update({ outTop: t === null ? null : off + t });
      };
      const up = (n: number): void => {
        // At the top of a window that starts after the first event: load the events before it,
        // and show their end (just above what was shown).
        if (top === 0 && win && win.before > 0 && source.moveOutput) {
          source.followOutput?.(uuid, true);
          source.moveOutput(uuid, "earlier");
          return update({ outTop: null });
        }
        setTop(Math.max(0, top - n));
      };
      const down = (n: number): void => {
        if (top + n < maxTop) return setTop(top + n);
        // At the bottom of a window whose reader stopped: read on, staying where the pane is.
        if (win?.paused && source.moveOutput) {
          setTop(maxTop);
          return source.moveOutput(uuid, "later");
        }
        setTop(null);
      };
      if (key.escape) return update({ outputOf: null });
      if (key.upArrow || input === "k") return up(1);
      if (key.downArrow || input === "j") return down(1);
      if (key.pageUp || (key.ctrl && input === "u")) return up(page);
      if (key.pageDown || (key.ctrl && input === "d")) return down(page);
      if (input === "g" || key.home) {
        if (win && win.before > 0 && source.moveOutput) {
          source.followOutput?.(uuid, false);
          source.moveOutput(uuid, "start");
          return update({ outTop: 0 });
        }
        return setTop(0);
      }
      if (input === "G" || input === "f" || key.end) {
        source.followOutput?.(uuid, true);
        source.moveOutput?.(uuid, "end");
        return update({ outTop: null });
      }
      return commandKeys(input, now.outCommand);
    }

    const page = Math.max(1, body - 3);
    if (key.upArrow || input === "k") return move(cur.tab, -1);
    if (key.downArrow || input === "j") return move(cur.tab, 1);
    if (key.pageUp || (key.ctrl && input === "u")) return move(cur.tab, -page);
    if (key.pageDown || (key.ctrl && input === "d")) return move(cur.tab, page);
    if (input === "g" || key.home) return move(cur.tab, "first");
    if (input === "G" || key.end) return move(cur.tab, "last");

    switch (cur.tab) {
      case "sessions":
        if (key.return && now.selSession)
          update((x) => ({ cmdClient: now.selSession!.clientId, sel: { ...x.sel, commands: 0 }, selKey: { ...x.selKey, commands: null }, tab: "commands" }));
        return;
      case "commands":
        if (key.escape) return update({ tab: "sessions" });
        if (key.return && now.selCommand) return update({ outTop: null, outputOf: now.selCommand.uuid });
        if (input === "a") return update((x) => ({ cmdClient: null, sel: { ...x.sel, commands: 0 }, selKey: { ...x.selKey, commands: null } }));
        return commandKeys(input, now.selCommand);
      case "claims": {
        const c = now.claims[now.sel.claims];
        if (c && (key.return || input === "a"))
          update({
            prompt: {
              kind: "confirm",
              text: `Authorize instance ${c.instanceId} to take over ${c.clientId} once?`,
              pending: "authorizing…",
              run: () => source.authorize(c.clientId, c.instanceId),
            },
          });
        if (c && input === "d")
          update({
            prompt: {
              kind: "confirm",
              text: `Dismiss the claim of instance ${c.instanceId} for ${c.clientId} (without authorizing it)?`,
              pending: "dismissing…",
              run: () => source.dismissClaim(c.clientId),
            },
          });
        if (key.escape) switchTab("sessions");
        return;
      }
      case "incidents": {
        const inc = now.incidents[now.sel.incidents];
        if (inc && (key.return || input === "a")) {
          if (inc.acknowledged) return say(`incident ${inc.id} is already acknowledged`);
          act("acknowledging…", async () => {
            await source.ackIncident(inc.id);
            return `incident ${inc.id} acknowledged`;
          });
        }
        if (input === "h") update((x) => ({ showAcked: !x.showAcked }));
        if (key.escape) switchTab("sessions");
        return;
      }
      case "jobs": {
        const j = now.jobs[now.sel.jobs];
        if (j && input === "c") {
          if (!source.cancelJob) return say("this source cannot cancel jobs", true);
          if (j.endedAt !== null) return say(`job ${j.id} has ended`);
          const cancelJob = source.cancelJob.bind(source);
          return update({
            prompt: {
              kind: "confirm",
              text: `Cancel job ${j.id} (${j.summary.targets} clients: running ones cancelled, the rest never started)?`,
              pending: "cancelling…",
              run: () => cancelJob(j.id),
            },
          });
        }
        if (key.escape) switchTab("sessions");
        return;
      }
    }
  };

  useInput((input, key) => {
    for (const [i, k] of splitInput(input, key)) onKey(i, k);
  });

  // ---------------------------------------------------------------- footer
  let footer: React.ReactElement;
  const prompt = u.prompt;
  switch (prompt?.kind) {
    case "confirm":
      footer = <ConfirmLine text={prompt.text} width={width} />;
      break;
    case "signal":
      footer = <SignalLine target={shortId(prompt.cmd.uuid, 13)} width={width} />;
      break;
    case "stdin":
      footer = (
        <TextLine
          label={`stdin ${shortId(prompt.uuid, 8)}>`}
          value={prompt.value}
          hint={`enter sends${u.newline ? " + newline" : ", no newline"} · ctrl-n toggles · esc`}
          width={width}
        />
      );
      break;
    case "filter":
      footer = <TextLine label="command id contains>" value={prompt.value} hint="enter applies · empty clears · esc" width={width} />;
      break;
    default:
      footer = (
        <Box flexDirection="column" width={width}>
          {(messageLines ?? [fit("", width)]).map((line, i) => (
            <Text key={i} color={u.message?.error ? "red" : "green"}>
              {line}
            </Text>
          ))}
        </Box>
      );
  }

  // ---------------------------------------------------------------- body
  let view: React.ReactElement;
  if (prompt?.kind === "help") {
    view = <HelpOverlay width={width} height={body} />;
  } else if (u.outputOf && d.output) {
    view = <OutputView snapshot={d.output} top={u.outTop === null ? null : Math.max(0, u.outTop - d.output.offset)} width={width} height={body} />;
  } else {
    switch (u.tab) {
      case "sessions":
        view = <SessionsView fleet={d.fleet} rows={d.sessions} selected={d.sel.sessions} width={width} height={body} />;
        break;
      case "commands":
        view = <CommandsView clientId={u.cmdClient} rows={d.commands} selected={d.sel.commands} now={d.fleet.now} width={width} height={body} />;
        break;
      case "claims":
        view = <ClaimsView rows={d.claims} selected={d.sel.claims} now={d.fleet.now} width={width} height={body} />;
        break;
      case "incidents":
        view = (
          <IncidentsView
            rows={d.incidents}
            dropped={d.fleet.sessions.filter((s) => (s.incidentsDropped ?? 0) > 0).map((s) => ({ clientId: s.clientId, count: s.incidentsDropped! }))}
            selected={d.sel.incidents}
            now={d.fleet.now}
            width={width}
            height={body}
          />
        );
        break;
      case "jobs":
        view = <JobsView rows={d.jobs} selected={d.sel.jobs} now={d.fleet.now} width={width} height={body} />;
        break;
    }
  }
  if (prompt?.kind === "submit") {
    view = (
      <Box flexDirection="column" height={body} width={width}>
        <SubmitFormView form={prompt.form} width={width} />
        <Box height={Math.max(0, body - SUBMIT_HEIGHT)} />
      </Box>
    );
  }

  const ctx: HelpContext = u.outputOf ? "output" : u.tab;
  const crumb = u.outputOf
    ? `${u.cmdClient ?? d.outCommand?.clientId ?? "all"} › ${shortId(u.outputOf, 13)}`
    : u.tab === "commands"
      ? (u.cmdClient ?? "all clients")
      : "";
  return (
    <Box flexDirection="column" width={width} height={height}>
      <Header fleet={d.fleet} tab={u.tab} crumb={crumb} width={width} />
      {tl ? <TimelineBar timeline={tl} width={width} /> : null}
      {view}
      {footer}
      <HelpLine ctx={ctx} sim={tl !== undefined} width={width} />
    </Box>
  );
}

/** Most lines a message (a refusal, a result) takes above the help line. */
export const MESSAGE_MAX_LINES = 3;
/** Prompts that take the message's line themselves. */
const LINE_PROMPTS: ReadonlySet<string> = new Set(["confirm", "signal", "stdin", "filter"]);

const NO_KEY: Key = {
  upArrow: false,
  downArrow: false,
  leftArrow: false,
  rightArrow: false,
  pageDown: false,
  pageUp: false,
  home: false,
  end: false,
  return: false,
  escape: false,
  ctrl: false,
  shift: false,
  tab: false,
  backspace: false,
  delete: false,
  meta: false,
  super: false,
  hyper: false,
  capsLock: false,
  numLock: false,
};

/**
 * A terminal may deliver several keys in one read ("sleep 60\r" when text and
 * Enter arrive together, or a paste with newlines): Ink then reports one input
 * string. Split it into text runs and the Enter / Tab / Backspace keys inside.
 */
export function splitInput(input: string, key: Key): Array<[string, Key]> {
  // ESC followed quickly by a key reads as alt+key; the TUI binds no alt keys, so it is Esc, then the key.
  if (key.meta && !key.ctrl && input.length === 1 && input >= " " && !key.upArrow && !key.downArrow && !key.leftArrow && !key.rightArrow)
    return [
      ["", { ...NO_KEY, escape: true }],
      [input, NO_KEY],
    ];
  if (input.length <= 1 || key.ctrl || key.meta || !/[\r\n\t\x7f\b]/.test(input)) return [[input, key]];
  const out: Array<[string, Key]> = [];
  let run = "";
  const flush = (): void => {
    if (run !== "") out.push([run, NO_KEY]);
    run = "";
  };
  for (const ch of input) {
    if (ch === "\r" || ch === "\n") {
      flush();
      out.push(["", { ...NO_KEY, return: true }]);
    } else if (ch === "\t") {
      flush();
      out.push(["", { ...NO_KEY, tab: true }]);
    } else if (ch === "\x7f" || ch === "\b") {
      flush();
      out.push(["", { ...NO_KEY, backspace: true }]);
    } else run += ch;
  }
  flush();
  return out;
}
