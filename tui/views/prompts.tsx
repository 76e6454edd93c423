/**
 * Small modal inputs: a yes/no confirmation, a signal picker, a one-line text
 * input (stdin, filters), and the submit form. Their state lives in the app's
 * UI state and their keys are pure functions of (state, key), so the app's
 * single input handler applies them in order however fast keys arrive; the
 * components here only draw.
 */
import type React from "react";
import { Box, Text, type Key } from "ink";
import { clip, fit } from "../format.js";
import type { SignalName } from "../source.js";

/** Apply one keypress to a one-line text value (typing, paste, backspace, ctrl-u). */
export function editText(value: string, input: string, key: Key): string {
  if (key.backspace || key.delete) return value.slice(0, -1);
  if (key.ctrl && input === "u") return "";
  if (key.ctrl || key.meta || key.tab || key.return || key.escape || key.upArrow || key.downArrow || key.leftArrow || key.rightArrow) return value;
  // eslint-disable-next-line no-control-regex
  return value + input.replace(/[\x00-\x1f\x7f]/g, "");
}

// ------------------------------------------------------------------ confirm

export function confirmKey(input: string, key: Key): "yes" | "no" | null {
  if (input === "y" || input === "Y") return "yes";
  if (input === "n" || input === "N" || key.escape) return "no";
  return null;
}

export function ConfirmLine(p: { text: string; width: number }): React.ReactElement {
  return (
    <Text color="yellow" bold>
      {fit(`${p.text} (y/n)`, p.width)}
    </Text>
  );
}

// ------------------------------------------------------------------ signal

export const SIGNAL_KEYS: Array<[string, SignalName]> = [
  ["t", "TERM"],
  ["i", "INT"],
  ["k", "KILL"],
  ["h", "HUP"],
  ["q", "QUIT"],
  ["1", "USR1"],
  ["2", "USR2"],
  ["c", "CANCEL"],
];

export function signalKey(input: string, key: Key): SignalName | "cancel" | null {
  if (key.escape) return "cancel";
  return SIGNAL_KEYS.find(([k]) => k === input)?.[1] ?? null;
}

export function SignalLine(p: { target: string; width: number }): React.ReactElement {
  return (
    <Text color="yellow" bold>
      {fit(`signal ${p.target}: ${SIGNAL_KEYS.map(([k, s]) => `${k} ${s}`).join(" · ")} · esc`, p.width)}
    </Text>
  );
}

// ------------------------------------------------------------------ text

export type TextOutcome = { value: string } | { submit: string } | { cancel: true };

export function textKey(value: string, input: string, key: Key): TextOutcome {
  if (key.escape) return { cancel: true };
  if (key.return) return { submit: value };
  return { value: editText(value, input, key) };
}

export function TextLine(p: { label: string; value: string; hint?: string; width: number }): React.ReactElement {
  const hint = p.hint ? `  (${p.hint})` : "";
  const room = Math.max(1, p.width - p.label.length - hint.length - 2);
  const shown = p.value.length > room ? `…${p.value.slice(p.value.length - room + 1)}` : p.value;
  return (
    <Text>
      <Text color="yellow" bold>
        {p.label}{" "}
      </Text>
      {shown}
      <Text inverse> </Text>
      <Text dimColor>{clip(hint, Math.max(0, p.width - p.label.length - shown.length - 2))}</Text>
    </Text>
  );
}

// ------------------------------------------------------------------ submit form

export interface SubmitValues {
  clientId: string;
  line: string;
  stdinOpen: boolean;
}

export interface FormState {
  field: 0 | 1 | 2;
  client: string;
  line: string;
  stdinOpen: boolean;
  error: string | null;
}

export const newForm = (client: string): FormState => ({ field: client ? 1 : 0, client, line: "", stdinOpen: false, error: null });

export type FormOutcome = { form: FormState } | { submit: SubmitValues } | { cancel: true };

/** Client, command line (run by sh), stdin open; tab/↑↓ move between fields, space toggles stdin, enter submits, esc cancels. */
export function formKey(f: FormState, input: string, key: Key): FormOutcome {
  if (key.escape) return { cancel: true };
  const to = (field: number): FormOutcome => ({ form: { ...f, field: (((field % 3) + 3) % 3) as FormState["field"] } });
  if (key.tab) return to(key.shift ? f.field - 1 : f.field + 1);
  if (key.downArrow) return to(f.field + 1);
  if (key.upArrow) return to(f.field - 1);
  if (key.return) {
    if (f.client.trim() === "") return { form: { ...f, field: 0, error: "client is required" } };
    if (f.line.trim() === "") return { form: { ...f, field: 1, error: "command is required" } };
    return { submit: { clientId: f.client.trim(), line: f.line, stdinOpen: f.stdinOpen } };
  }
  if (f.field === 0) return { form: { ...f, client: editText(f.client, input, key), error: null } };
  if (f.field === 1) return { form: { ...f, line: editText(f.line, input, key), error: null } };
  if (input === " " || input === "x") return { form: { ...f, stdinOpen: !f.stdinOpen, error: null } };
  return { form: f };
}

export const SUBMIT_HEIGHT = 7;

export function SubmitFormView(p: { form: FormState; width: number }): React.ReactElement {
  const f = p.form;
  const row = (i: number, label: string, value: string): React.ReactElement => (
    <Text key={i}>
      <Text color={f.field === i ? "yellow" : undefined} bold={f.field === i}>
        {f.field === i ? "› " : "  "}
        {label.padEnd(10)}
      </Text>
      {clip(value, Math.max(1, p.width - 13))}
      {f.field === i && i < 2 ? <Text inverse> </Text> : null}
    </Text>
  );
  return (
    <Box flexDirection="column" width={p.width} borderStyle="round" borderColor="yellow">
      <Text bold>{fit("Submit a command (sh -c LINE) · tab/↑↓ field · space toggles stdin · enter submit · esc cancel", p.width - 2)}</Text>
      {row(0, "client", f.client)}
      {row(1, "command", f.line)}
      {row(2, "stdin", f.stdinOpen ? "[x] open (write with i)" : "[ ] closed")}
      <Text color="red">{f.error ?? " "}</Text>
    </Box>
  );
}
