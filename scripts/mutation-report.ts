// Summarize a Stryker JSON report (mutation-testing-report-schema) as
// markdown: the score per file and the surviving / uncovered mutants with
// their source line, grouped by why they might survive.
//
//   npx tsx scripts/mutation-report.ts [reports/mutation/mutation.json] [docs/mutation-notes.json] > out.md
//
// The notes file says why a surviving mutant survives:
//   { "categories": { "<id>": "<what this kind of survivor means>" },
//     "notes": { "core/x.ts:LINE:MUTATOR": { "category": "<id>", "why": "<reason>" } } }
// Mutants with a note are grouped by its category; the others by where they sit.
//
// Score = (killed + timeout) / (killed + timeout + survived + no coverage),
// Stryker's "mutation score" (compile errors and ignored mutants excluded).

import { existsSync, readFileSync } from "node:fs";

interface Mutant {
  id: string;
  mutatorName: string;
  replacement?: string;
  status: string;
  location: { start: { line: number; column: number }; end: { line: number; column: number } };
}
interface Report {
  files: Record<string, { source: string; mutants: Mutant[] }>;
}

const file = process.argv[2] ?? "reports/mutation/mutation.json";
const report = JSON.parse(readFileSync(file, "utf8")) as Report;
interface Notes {
  categories: Record<string, string>;
  notes: Record<string, { category: string; why: string }>;
}
const notes: Notes = existsSync(process.argv[3] ?? "docs/mutation-notes.json")
  ? (JSON.parse(readFileSync(process.argv[3] ?? "docs/mutation-notes.json", "utf8")) as Notes)
  : { categories: {}, notes: {} };

type Row = { file: string; killed: number; timeout: number; survived: number; noCoverage: number; ignored: number };
const rows: Row[] = [];
const open: Array<{ file: string; line: number; mutator: string; replacement: string; code: string; status: string; group: string; why: string }> = [];

/** Which group a surviving mutant falls in, from where it sits. */
function groupOf(lines: string[], line: number, m: Mutant): string {
  const code = lines[line - 1] ?? "";
  // Inside an invariant check or an assertion: reached only when a state is broken.
  let inInvariants = false;
  for (let i = line - 1; i >= 0 && i >= line - 80; i--) {
    const l = lines[i]!;
    if (/^export function \w*[iI]nvariants\(/.test(l)) {
      inInvariants = true;
      break;
    }
    if (/^(export )?function /.test(l)) break;
  }
  if (/\bassert\(/.test(code) || inInvariants) return "inside an invariant or assert";
  if (m.mutatorName === "StringLiteral" || m.mutatorName === "Regex") return "message text / literal";
  if (m.status === "NoCoverage") return "not covered by any core test";
  return "other logic";
}

for (const [name, f] of Object.entries(report.files).sort(([a], [b]) => a.localeCompare(b))) {
  const lines = f.source.split("\n");
  const r: Row = { file: name, killed: 0, timeout: 0, survived: 0, noCoverage: 0, ignored: 0 };
  for (const m of f.mutants) {
    if (m.status === "Killed") r.killed++;
    else if (m.status === "Timeout") r.timeout++;
    else if (m.status === "Survived") r.survived++;
    else if (m.status === "NoCoverage") r.noCoverage++;
    else r.ignored++;
    if (m.status === "Survived" || m.status === "NoCoverage") {
      const line = m.location.start.line;
      const note = notes.notes[`${name}:${line}:${m.mutatorName}`];
      open.push({
        file: name,
        line,
        mutator: m.mutatorName,
        replacement: (m.replacement ?? "").replace(/\s+/g, " ").slice(0, 60),
        code: (lines[line - 1] ?? "").trim().slice(0, 110),
        status: m.status,
        group: note ? note.category : groupOf(lines, line, m),
        why: note?.why ?? "",
      });
    }
  }
  rows.push(r);
}

const score = (r: Omit<Row, "file">): string => {
  const detected = r.killed + r.timeout;
  const valid = detected + r.survived + r.noCoverage;
  return valid === 0 ? "–" : `${((100 * detected) / valid).toFixed(1)} %`;
};
const total = rows.reduce(
  (a, r) => ({
    killed: a.killed + r.killed,
    timeout: a.timeout + r.timeout,
    survived: a.survived + r.survived,
    noCoverage: a.noCoverage + r.noCoverage,
    ignored: a.ignored + r.ignored,
  }),
  { killed: 0, timeout: 0, survived: 0, noCoverage: 0, ignored: 0 },
);
const esc = (s: string): string => s.replace(/\|/g, "\\|").replace(/`/g, "'");

const out: string[] = [];
out.push(`| file | score | killed | timeout | survived | no coverage |`);
out.push(`|---|---|---|---|---|---|`);
const n = total.killed + total.timeout + total.survived + total.noCoverage;
out.push(
  `| **all (${n.toLocaleString("en")} mutants)** | **${score(total)}** | ${total.killed} | ${total.timeout} | ${total.survived} | ${total.noCoverage} |`,
);
for (const r of rows) out.push(`| ${r.file.replace(/^core\//, "")} | ${score(r)} | ${r.killed} | ${r.timeout} | ${r.survived} | ${r.noCoverage} |`);
out.push("");
const groups = new Map<string, typeof open>();
for (const o of open) {
  if (!groups.has(o.group)) groups.set(o.group, []);
  groups.get(o.group)!.push(o);
}
for (const [g, list] of [...groups].sort((a, b) => b[1].length - a[1].length)) {
  out.push(`### ${g} (${list.length})`, "");
  if (notes.categories[g]) out.push(notes.categories[g]!, "");
  out.push(`| file:line | mutator | replaced by | code | why it survives |`, `|---|---|---|---|---|`);
  for (const o of list)
    out.push(
      `| ${o.file}:${o.line} | ${o.mutator}${o.status === "NoCoverage" ? " (no coverage)" : ""} | \`${esc(o.replacement)}\` | \`${esc(o.code)}\` | ${esc(o.why)} |`,
    );
  out.push("");
}
const unexplained = open.filter((o) => o.why === "").length;
out.push(`Survivors without a note: ${unexplained} of ${open.length}.`, "");
// Into `| head`: the reader leaving early is not an error.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
  throw e;
});
process.stdout.write(`${out.join("\n")}\n`);
