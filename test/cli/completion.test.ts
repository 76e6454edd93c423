// `rvbox completion bash|zsh`: the scripts run in a real bash and (when
// installed) a real interactive zsh driven through zsh/zpty, complete
// subcommands, flags and values, and client names and command ids from a
// real server through `rvbox __complete`; and every flag of every parser
// table appears in both scripts, so a flag added without completion fails here.
import { execFile, execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AGENT_OPTIONS } from "../../shells/cli/agent-cli.js";
import { SERVER_OPTIONS } from "../../shells/cli/server-cli.js";
import { DEMO_OPTIONS } from "../../shells/demo/demo.js";
import { OPERATOR_COMMANDS, operatorFlagTables } from "../../shells/operator/cli.js";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { BIN, cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";

const ZSH = ["/usr/bin/zsh", "/bin/zsh"].find((p) => existsSync(p)) ?? null;

let bashScript = "";
let zshScript = "";
let dir = "";
let s: TestServer;
let agent: AgentDaemon;
let env: Record<string, string>;

function rvbox(args: string[]): string {
  return execFileSync(process.execPath, [BIN, ...args], { encoding: "utf8", timeout: 60_000 });
}

beforeAll(async () => {
  dir = await tempDir("rvbox-completion-");
  bashScript = path.join(dir, "rvbox.bash");
  zshScript = path.join(dir, "rvbox.zsh");
  writeFileSync(bashScript, rvbox(["completion", "bash"]));
  writeFileSync(zshScript, rvbox(["completion", "zsh"]));
  // `rvbox` on PATH, as an installed one would be: the scripts call it for names.
  mkdirSync(path.join(dir, "bin"));
  const wrapper = path.join(dir, "bin/rvbox");
  writeFileSync(wrapper, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} "$@"\n`);
  chmodSync(wrapper, 0o755);
  const tokenFile = path.join(dir, "operator-token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  s = await startServer();
  agent = await startAgent(s.url, "web-complete");
  await waitFor("agent connected", () => agent.connected);
  env = { PATH: `${path.join(dir, "bin")}:${process.env.PATH ?? "/usr/bin:/bin"}`, RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: tokenFile, HOME: dir };
}, 120_000);

afterAll(async () => {
  await agent?.close({ killProcesses: true });
  await s?.close();
  await cleanupTemp();
});

/**
 * Run a child without blocking this process's event loop: the server and the
 * agent run in it and must answer the child's `rvbox __complete`.
 */
function run(
  cmd: string,
  args: string[],
  extraEnv: Record<string, string>,
  timeout = 60_000,
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { encoding: "utf8", env: { ...env, ...extraEnv }, timeout }, (err, stdout, stderr) =>
      resolve({ status: err ? ((err as { code?: unknown }).code as number | null) : 0, stdout, stderr }),
    );
  });
}

/** COMPREPLY after completing the last of `words` (an empty last word: a TAB after a space). */
async function bashComplete(words: string[], extraEnv: Record<string, string> = {}): Promise<string[]> {
  const arr = words.map((w) => `'${w.replace(/'/g, `'\\''`)}'`).join(" ");
  const r = await run(
    "bash",
    ["--norc", "-c", `source ${JSON.stringify(bashScript)}; COMP_WORDS=(${arr}); COMP_CWORD=${words.length - 1}; _rvbox; printf '%s\\n' "\${COMPREPLY[@]}"`],
    extraEnv,
  );
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
  return r.stdout.split("\n").filter((l) => l !== "");
}

describe("rvbox completion bash", () => {
  it("loads in a real bash and completes subcommands, flags and their values", async () => {
    const r = await run(
      "bash",
      [
        "--norc",
        "-c",
        `source <(${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} completion bash); COMP_WORDS=(rvbox ru); COMP_CWORD=1; _rvbox; echo "\${COMPREPLY[@]}"; complete -p rvbox`,
      ],
      {},
    );
    expect(r.stdout).toBe("run\ncomplete -F _rvbox rvbox\n");
    expect(await bashComplete(["rvbox", "c"])).toEqual(["close-stdin", "cancel", "clients", "claims", "completion"]);
    expect(await bashComplete(["rvbox", "__"])).toEqual([]); // hidden
    expect(await bashComplete(["rvbox", "run", "--fo"])).toEqual(["--follow"]);
    expect(await bashComplete(["rvbox", "run", "web-1", "--shell", ""])).toEqual(["sh", "bash", "zsh"]);
    expect(await bashComplete(["rvbox", "logs", "x", "--stream", "std"])).toEqual(["stdout", "stderr"]);
    expect(await bashComplete(["rvbox", "ls", "--state", "ru"])).toEqual(["running"]);
    expect(await bashComplete(["rvbox", "ls", "-o", ""])).toEqual(["json", "wide"]);
    expect(await bashComplete(["rvbox", "stdin", "x", "--no-n"])).toEqual(["--no-newline"]);
    expect(await bashComplete(["rvbox", "signal", "abc", "K"])).toEqual(["KILL"]);
    expect(await bashComplete(["rvbox", "agent", "--log-level", "w"])).toEqual(["warn"]);
    expect(await bashComplete(["rvbox", "server", "--operator"])).toEqual(["--operator-token"]);
    expect(await bashComplete(["rvbox", "completion", ""])).toEqual(["bash", "zsh"]);
    expect(await bashComplete(["rvbox", "sim", "r"])).toEqual(["run", "replay"]);
    // After `--` the words are the command's: a program name, then files; no flags.
    expect(await bashComplete(["rvbox", "run", "web-1", "--", "unam"])).toContain("uname");
    expect(await bashComplete(["rvbox", "run", "web-1", "--", "ls", "--fo"])).toEqual([]);
    writeFileSync(path.join(dir, "deploy-script.sh"), "#!/bin/sh\n");
    expect(await bashComplete(["rvbox", "run", "web-1", "--script", path.join(dir, "deploy-scr")])).toEqual([path.join(dir, "deploy-script.sh")]);
  });

  it("completes client names and command ids from the server, through rvbox __complete; nothing (quickly, silently) when the server is unreachable", async () => {
    expect(await bashComplete(["rvbox", "run", ""])).toEqual(["web-complete"]);
    expect(await bashComplete(["rvbox", "run", "--follow", "web-"])).toEqual(["web-complete"]);
    // The flags before a positional are skipped when counting it; --shell's optional value too.
    expect(await bashComplete(["rvbox", "run", "--cwd", "/tmp", "--shell", "bash", "we"])).toEqual(["web-complete"]);
    expect(await bashComplete(["rvbox", "authorize", ""])).toEqual(["web-complete"]);
    const sub = await s.client.submitCommand({ clientId: "web-complete", program: { case: "argv", value: { argv: ["true"] } } });
    const id = sub.command!.issueUuid;
    expect(await bashComplete(["rvbox", "logs", id.slice(0, 6)])).toEqual([id]);
    expect(await bashComplete(["rvbox", "get", "--json", id.slice(0, 4)])).toContain(id);
    // --server on the line wins over RVBOX_SERVER.
    expect(await bashComplete(["rvbox", "run", "--server", s.controlUrl, ""], { RVBOX_SERVER: "http://127.0.0.1:1" })).toEqual(["web-complete"]);
    const t0 = Date.now();
    expect(await bashComplete(["rvbox", "run", ""], { RVBOX_SERVER: "http://127.0.0.1:1" })).toEqual([]);
    expect(await bashComplete(["rvbox", "logs", "ab"], { RVBOX_TOKEN_FILE: path.join(dir, "no-such-token") })).toEqual([]);
    expect(Date.now() - t0).toBeLessThan(20_000);
    const direct = await run(process.execPath, [BIN, "__complete", "clients"], { RVBOX_SERVER: "http://127.0.0.1:1" });
    expect({ status: direct.status, stdout: direct.stdout, stderr: direct.stderr }).toEqual({ status: 1, stdout: "", stderr: "" });
  });

  it("every subcommand and every flag of every parser table appears in the bash and the zsh script", () => {
    const bash = rvbox(["completion", "bash"]);
    const zsh = rvbox(["completion", "zsh"]);
    const top = /^commands:\n([\s\S]*)$/m
      .exec(rvbox(["help"]))![1]!
      .split("\n")
      .map((l) => l.trim().split(/\s+/)[0])
      .filter((w): w is string => !!w);
    expect(top).toEqual(expect.arrayContaining([...OPERATOR_COMMANDS, "server", "agent", "completion"]));
    const bashTop = /_rvbox_words '([^']*)'\n {4}return 0/.exec(bash)![1]!.split(" ");
    expect(bashTop).toEqual(top);
    for (const name of top) expect(zsh).toContain(`'${name}:`);
    const tables: Record<string, Record<string, { short?: string; type: string; negatable?: boolean }>> = {
      ...operatorFlagTables(),
      server: SERVER_OPTIONS,
      agent: AGENT_OPTIONS,
      demo: DEMO_OPTIONS,
    };
    delete tables.__complete;
    for (const [cmd, flags] of Object.entries(tables)) {
      const bashFlags = new RegExp(`\\n    ${cmd}\\)\\n      flags='([^']*)'`).exec(bash)?.[1]?.split(" ");
      expect(bashFlags, `bash: ${cmd}`).toBeDefined();
      const zshCase = new RegExp(`\\n    ${cmd}\\)\\n      _arguments[^\\n]*\\n((?:        [^\\n]*\\n)*)`).exec(zsh)?.[1] ?? "";
      expect(zshCase, `zsh: ${cmd}`).not.toBe("");
      for (const [long, spec] of Object.entries(flags)) {
        const words = [`--${long}`, ...(spec.short ? [`-${spec.short}`] : []), ...(spec.negatable ? [`--no-${long}`] : [])];
        for (const w of words) {
          expect(bashFlags, `bash: ${cmd} ${w}`).toContain(w);
          expect(zshCase, `zsh: ${cmd} ${w}`).toMatch(new RegExp(`'(\\([^)]*\\)|\\*)?${w.replace(/-/g, "\\-")}[=:']`));
        }
      }
    }
  });
});

/** Type each line into an interactive zsh, press TAB, then Enter; what `rvbox` (a shell function here) received. */
async function zshComplete(lines: string[]): Promise<string[]> {
  const driver = path.join(dir, "zpty-driver.zsh");
  writeFileSync(
    driver,
    `zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PS1='%% '; unsetopt beep; autoload -Uz compinit; compinit -u -D; source \${(q)1}; rvbox() { if [[ \\$1 == __complete ]]; then command rvbox \\"\\$@\\"; else print -r -- \\"ARGS<\\$*>\\"; fi }; print SETUP-DONE"
zpty -r -m z out '*SETUP-DONE*SETUP-DONE*' || exit 4
shift
for l in "$@"; do
  # "SECONDS|LINE": how long to give the completion (rvbox __complete starts a process).
  zpty -w -n z "\${l#*|}"$'\\t'
  sleep "\${l%%|*}"
  zpty -w -n z $'\\r'
  zpty -r -m z out '*ARGS<*>*' || exit 5
  print -r -- "\${\${out##*ARGS<}%%>*}"
done
zpty -d z
`,
  );
  const r = await run(ZSH!, ["-f", driver, zshScript, ...lines], {}, 120_000);
  expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: "" });
  return r.stdout.split("\n").filter((l) => l !== "");
}

describe("rvbox completion zsh", () => {
  it.skipIf(ZSH === null)(
    `completes in a real interactive zsh (compinit, zsh/zpty)${ZSH === null ? ": zsh is not installed (apt-get install zsh; .ci/run does)" : ""}`,
    async () => {
      const sub = await s.client.submitCommand({ clientId: "web-complete", program: { case: "argv", value: { argv: ["true"] } } });
      const id = sub.command!.issueUuid;
      expect(
        await zshComplete([
          "1|rvbox ru",
          "1|rvbox run --fol",
          "1|rvbox logs --stream stde",
          "1|rvbox completion z",
          "1|rvbox agent --client",
          "1|rvbox run x --shell ba",
          "8|rvbox run ",
          `8|rvbox cancel ${id.slice(0, 8)}`,
        ]),
      ).toEqual([
        "run",
        "run --follow",
        "logs --stream stderr",
        "completion zsh",
        "agent --client-id",
        "run x --shell bash",
        "run web-complete",
        `cancel ${id}`,
      ]);
    },
    120_000,
  );
});
