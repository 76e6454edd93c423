import { describe, expect, it } from "vitest";
import { ShellType } from "../../protos/gen/rvbox/v1/common_pb.js";
import { normalizeServerUrl, parseDuration, parseEnv, parseFlags, UsageError } from "../../shells/operator/args.js";
import { buildSubmit, OPERATOR_COMMANDS } from "../../shells/operator/cli.js";
import { AGENT_USAGE } from "../../shells/cli/agent-cli.js";
import { COMPLETION_USAGE } from "../../shells/cli/completion-cli.js";
import { OPERATOR_ADD_USAGE, SERVER_USAGE } from "../../shells/cli/server-cli.js";
import { EXIT, exitCodeFor } from "../../client/exit-codes.js";
import { parseSignal } from "../../client/model.js";
import { cli } from "./helpers.js";

const RUN_FLAGS = {
  follow: { type: "boolean", short: "f" },
  shell: { type: "optional", choices: ["sh", "bash", "zsh"], default: "sh" },
  script: { type: "string" },
  interpreter: { type: "string" },
  cwd: { type: "string" },
  env: { type: "string", multiple: true },
  timeout: { type: "string" },
  "expire-after": { type: "string" },
  stdin: { type: "boolean" },
  "open-stdin": { type: "boolean" },
  id: { type: "string" },
} as const;

const submit = (argv: string[], files: Record<string, string> = {}) =>
  buildSubmit(parseFlags(argv, RUN_FLAGS), 1_000_000, (f) => {
    if (!(f in files)) throw Object.assign(new Error("nope"), { code: "ENOENT" });
    return Buffer.from(files[f]!);
  });

describe("argument parsing", () => {
  it("splits flags, positionals and the command after --", () => {
    const p = parseFlags(["web-1", "-f", "--cwd", "/tmp", "--", "ls", "-l", "--color"], RUN_FLAGS);
    expect(p.positionals).toEqual(["web-1"]);
    expect(p.rest).toEqual(["ls", "-l", "--color"]);
    expect(p.flags.get("follow")).toBe(true);
    expect(p.flags.get("cwd")).toBe("/tmp");
  });

  it("accepts --flag=value, repeatable flags and an optional-valued --shell", () => {
    const p = parseFlags(["--env=A=1", "--env", "B=x=y", "--shell", "--", "echo $A"], RUN_FLAGS);
    expect(p.flags.get("env")).toEqual(["A=1", "B=x=y"]);
    expect(p.flags.get("shell")).toBe("sh");
    expect(parseFlags(["--shell", "bash", "c"], RUN_FLAGS).flags.get("shell")).toBe("bash");
    expect(parseFlags(["--shell=zsh"], RUN_FLAGS).flags.get("shell")).toBe("zsh");
    expect(() => parseFlags(["--shell=fish"], RUN_FLAGS)).toThrow(/expected one of sh, bash, zsh/);
  });

  it("rejects unknown flags, missing values, values on booleans and repeated single flags", () => {
    expect(() => parseFlags(["--nope"], RUN_FLAGS)).toThrow(UsageError);
    expect(() => parseFlags(["-x"], RUN_FLAGS)).toThrow(/unknown flag -x/);
    expect(() => parseFlags(["--cwd"], RUN_FLAGS)).toThrow(/--cwd needs a value/);
    expect(() => parseFlags(["--cwd", "--"], RUN_FLAGS)).toThrow(/needs a value/);
    expect(() => parseFlags(["--follow=yes"], RUN_FLAGS)).toThrow(/takes no value/);
    expect(() => parseFlags(["--cwd", "a", "--cwd", "b"], RUN_FLAGS)).toThrow(/given twice/);
  });

  it("supports --no-X for negatable booleans", () => {
    const specs = { newline: { type: "boolean", negatable: true } } as const;
    expect(parseFlags(["--no-newline"], specs).flags.get("newline")).toBe(false);
    expect(parseFlags([], specs).flags.has("newline")).toBe(false);
  });

  it("parses durations", () => {
    expect(parseDuration("30s")).toBe(30_000);
    expect(parseDuration("1h30m")).toBe(5_400_000);
    expect(parseDuration("1500ms")).toBe(1500);
    expect(parseDuration("2")).toBe(2000);
    expect(parseDuration("1.5m")).toBe(90_000);
    expect(() => parseDuration("10 minutes")).toThrow(/expected a duration/);
    expect(() => parseDuration("")).toThrow();
  });

  it("parses NAME=VALUE and server URLs", () => {
    expect(parseEnv("A=b=c")).toEqual({ name: "A", value: "b=c" });
    expect(parseEnv("EMPTY=")).toEqual({ name: "EMPTY", value: "" });
    expect(() => parseEnv("=x")).toThrow(/NAME=VALUE/);
    expect(normalizeServerUrl("127.0.0.1:7401")).toBe("http://127.0.0.1:7401");
    expect(normalizeServerUrl("https://rvbox.example.com/")).toBe("https://rvbox.example.com");
    expect(() => normalizeServerUrl("ws://x:1")).toThrow(/http/);
  });

  it("parses signal names and numbers", () => {
    expect(parseSignal("TERM")).toBe("TERM");
    expect(parseSignal("sigkill")).toBe("KILL");
    expect(parseSignal("9")).toBe("KILL");
    expect(parseSignal("SIGUSR1")).toBe("USR1");
    expect(parseSignal("STOP")).toBe(null);
  });
});

describe("run: building the submit request", () => {
  it("an argv command after -- with cwd, env, timeout, expiry and stdin", () => {
    const r = submit([
      "web-1",
      "--cwd",
      "/srv",
      "--env",
      "A=1",
      "--env",
      "B=2",
      "--timeout",
      "5m",
      "--expire-after",
      "10s",
      "--stdin",
      "--id",
      "my-id-1",
      "--",
      "ls",
      "-l",
    ]);
    expect(r.clientId).toBe("web-1");
    expect(r.program).toEqual({ case: "argv", value: { argv: ["ls", "-l"] } });
    expect(r.cwd).toBe("/srv");
    expect(r.environment).toEqual([
      { name: "A", value: "1" },
      { name: "B", value: "2" },
    ]);
    expect(r.timeoutMs).toBe(300_000n);
    expect(r.stdinOpen).toBe(true);
    expect(r.issueUuid).toBe("my-id-1");
    expect(r.requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(Number(r.queueExpiryTime!.seconds)).toBe(Math.floor((1_000_000 + 10_000) / 1000));
  });

  it("generates an issue UUID when none is given (so retries are idempotent)", () => {
    expect(submit(["web-1", "--", "true"]).issueUuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-/);
  });

  it("--shell joins the words into one command line; --shell bash picks bash", () => {
    expect(submit(["web-1", "--shell", "--", "echo", "a | wc -c"]).program).toEqual({
      case: "shell",
      value: { shell: ShellType.SH, commandLine: "echo a | wc -c" },
    });
    expect(submit(["web-1", "--shell", "bash", "--", "echo $BASH_VERSION"]).program).toEqual({
      case: "shell",
      value: { shell: ShellType.BASH, commandLine: "echo $BASH_VERSION" },
    });
  });

  it("--script uploads the file, words after -- become script arguments", () => {
    const r = submit(["web-1", "--script", "deploy.sh", "--", "prod", "--fast"], { "deploy.sh": "#!/bin/sh\necho $1\n" });
    expect(r.program?.case).toBe("script");
    const v = r.program!.value as { content: Uint8Array; interpreter: string; args: string[] };
    expect(Buffer.from(v.content).toString()).toBe("#!/bin/sh\necho $1\n");
    expect(v.args).toEqual(["prod", "--fast"]);
    expect(v.interpreter).toBe("");
  });

  it("--script without a #! line needs --interpreter", () => {
    expect(() => submit(["web-1", "--script", "x.sh"], { "x.sh": "echo hi\n" })).toThrow(/no #! line/);
    const r = submit(["web-1", "--script", "x.sh", "--interpreter", "/bin/sh"], { "x.sh": "echo hi\n" });
    expect((r.program!.value as { interpreter: string }).interpreter).toBe("/bin/sh");
    expect(() => submit(["web-1", "--script", "missing.sh"])).toThrow(/no such file/);
  });

  it("--script naming a directory or an unreadable file says so in words", () => {
    const failing = (code: string) => () =>
      buildSubmit(parseFlags(["web-1", "--script", "x"], RUN_FLAGS), 1_000_000, () => {
        throw Object.assign(new Error(`${code}: raw message`), { code });
      });
    expect(failing("EISDIR")).toThrow("--script x: is a directory, not a file");
    expect(failing("EACCES")).toThrow("--script x: permission denied");
    expect(failing("EIO")).toThrow("--script x: EIO: raw message");
  });

  it("refuses contradictions and missing parts", () => {
    expect(() => submit([])).toThrow(/expected CLIENT/);
    expect(() => submit(["web-1"])).toThrow(/expected a command/);
    expect(() => submit(["web-1", "--script", "a", "--shell"], { a: "#!/bin/sh" })).toThrow(/do not go together/);
    expect(() => submit(["web-1", "--interpreter", "/bin/sh", "--", "x"])).toThrow(/needs --script/);
    expect(() => submit(["web-1", "--stdin", "--open-stdin", "--", "cat"])).toThrow(/do not go together/);
    expect(() => submit(["web-1", "--timeout", "0s", "--", "x"])).toThrow(/positive/);
    expect(() => submit(["web-1", "extra", "--", "x"])).toThrow(/before `--`/);
  });

  it("accepts a command without -- when it has no flags of its own", () => {
    expect(submit(["web-1", "uptime"]).program).toEqual({ case: "argv", value: { argv: ["uptime"] } });
  });
});

describe("exit-code contract of run --follow", () => {
  it("maps outcomes to exit codes", () => {
    const c = (state: string, exitCode: number | null = null, signalName = "") => exitCodeFor({ state: state as never, exitCode, signalName });
    expect(c("succeeded", 0)).toBe(0);
    expect(c("failed", 3)).toBe(3);
    expect(c("failed", 300)).toBe(300 & 0xff);
    expect(c("failed", null, "SIGKILL")).toBe(137);
    expect(c("failed", null, "SIGSEGV")).toBe(139);
    expect(c("cancelled", null, "SIGTERM")).toBe(EXIT.CANCELLED);
    expect(c("cancelled")).toBe(130);
    expect(c("rejected")).toBe(125);
    expect(c("expired")).toBe(124);
    expect(c("interrupted")).toBe(123);
    expect(c("running")).toBe(null);
  });
});

describe("CLI front door (no server needed)", () => {
  it("prints a subcommand's help with the exit-code contract", async () => {
    const r = await cli(["run", "--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("usage: rvbox run CLIENT");
    expect(r.stdout).toContain("128+N  killed by signal N");
    expect(r.stdout).toContain("RVBOX_SERVER");
  });

  it("every help text lines its flags' descriptions up in one column", async () => {
    /** Flag lines ("  -x, --flag VALUE   what it does") whose description is not at the text's usual column. */
    const misaligned = (text: string): string[] => {
      const flags = text.split("\n").filter((l) => /^ {2}-/.test(l));
      const cols = flags.map((l) => /^ {2}\S(?:\S| (?! ))*( {2,})/.exec(l)).map((m) => (m ? m[0].length : -1));
      const counts = new Map<number, number>();
      for (const c of cols) if (c > 0) counts.set(c, (counts.get(c) ?? 0) + 1);
      const col = [...counts].sort((a, b) => b[1] - a[1])[0]?.[0] ?? 0;
      // A flag as long as the column is followed by one space (run's --expire-after DURATION).
      return flags.filter((l) => !(l[col - 1] === " " && l[col] !== " " && l[col] !== undefined));
    };
    const texts: Array<[string, string]> = [
      ["server", SERVER_USAGE],
      ["agent", AGENT_USAGE],
      ["server operator add", OPERATOR_ADD_USAGE],
      ["completion", COMPLETION_USAGE],
    ];
    for (const name of OPERATOR_COMMANDS) texts.push([name, (await cli([name, "--help"])).stdout]);
    expect(texts.length).toBeGreaterThan(20);
    for (const [name, text] of texts) expect(misaligned(text), name).toEqual([]);
  });

  it("ls --state with a typo is a usage error naming the state meant", async () => {
    const r = await cli(["ls", "--state", "runing"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--state: unknown state "runing" (did you mean running?); known: queued,');
    const far = await cli(["ls", "--state", "xyzzy"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(far.stderr).toContain('--state: unknown state "xyzzy"; known: queued,');
  });

  it("unknown flags are usage errors (exit 2) with a hint to put the command after --", async () => {
    const r = await cli(["run", "web-1", "ls", "-x"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown flag -x (put the command after `--`");
    // -l is run's own (a job's label selector): the same hint, and never a job over the command's words.
    const l = await cli(["run", "web-1", "ls", "-l"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(l.code).toBe(2);
    expect(l.stderr).toContain("--selector needs a value (put the command after `--`");
    const l2 = await cli(["run", "web-1", "ls", "-l", "/tmp"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(l2.code).toBe(2);
    expect(l2.stderr).toContain("-l/--selector makes this a job; put the command after `--`");
  });

  it("without a token it says how to give one (exit 2)", async () => {
    const r = await cli(["ls"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("no operator token: pass --token FILE or set RVBOX_TOKEN_FILE");
  });

  it("an unreadable token file is a clear error, no stack trace", async () => {
    const r = await cli(["ls", "--token", "/nonexistent/token"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("cannot read the token file /nonexistent/token: no such file");
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it("an unknown subcommand is a usage error", async () => {
    const r = await cli(["frobnicate"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown operator command");
  });

  it("bad --state and --stream values are usage errors", async () => {
    expect((await cli(["ls", "--state", "bogus"], { env: { RVBOX_TOKEN_FILE: "/x" } })).code).toBe(2);
    expect((await cli(["logs", "id", "--stream", "stdall"], { env: { RVBOX_TOKEN_FILE: "/x" } })).stderr).toContain("--stream: expected stdout or stderr");
    expect((await cli(["signal", "id", "STOP"], { env: { RVBOX_TOKEN_FILE: "/x" } })).stderr).toContain("unknown signal");
  });

  it("tui --sim SEED launches the sim source without a server or token", async () => {
    const r = await cli(["tui", "--sim", "42", "--node", "agent-1", "--variant", "ignore-fencing"]);
    expect(r.code).toBe(0);
    expect(r.tuiLaunch).toEqual({ sim: { seed: 42, node: "agent-1", variant: "ignore-fencing" } });
    expect((await cli(["tui", "--sim", "x"])).code).toBe(2);
    expect((await cli(["tui", "--node", "a"], { env: { RVBOX_TOKEN_FILE: "/x" } })).code).toBe(2);
  });

  it("tui --demo needs no server or token", async () => {
    const r = await cli(["tui", "--demo", "--refresh", "500ms"]);
    expect(r.tuiLaunch).toEqual({ demo: true, refreshMs: 500 });
  });
});

describe("bundled short flags (run -it)", () => {
  const FLAGS = {
    stdin: { type: "boolean", short: "i" },
    tty: { type: "boolean", short: "t" },
    follow: { type: "boolean", short: "f" },
    selector: { type: "string", short: "l" },
  } as const;
  it("-it sets each boolean flag, as docker and kubectl take it; the command after -- keeps its own flags", () => {
    const p = parseFlags(["-it", "web-1", "--", "ls", "-la"], FLAGS);
    expect(p.flags.get("stdin")).toBe(true);
    expect(p.flags.get("tty")).toBe(true);
    expect(p.positionals).toEqual(["web-1"]);
    expect(p.rest).toEqual(["ls", "-la"]);
    expect(parseFlags(["-tif", "web-1"], FLAGS).flags.get("follow")).toBe(true);
  });
  it("a bundle with a flag that takes a value, or an unknown letter, is not expanded", () => {
    expect(parseFlags(["-il", "web-1"], FLAGS).flags.has("stdin")).toBe(false);
    expect(parseFlags(["-ix", "web-1"], FLAGS).flags.has("stdin")).toBe(false);
  });
});

describe("run -t refusals before anything is sent", () => {
  it("-t needs this process's own terminal (not the resident client's copy of the bytes), and does not go with --open-stdin", async () => {
    const r = await cli(["run", "-t", "web-1", "--", "bash"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(r.code).toBe(EXIT.USAGE);
    expect(r.stderr).toContain("-t needs the terminal itself, not the resident client: run it with RVBOX_PERSIST unset");
    const both = await cli(["run", "-t", "--open-stdin", "web-1", "--", "bash"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(both.code).toBe(EXIT.USAGE);
    expect(both.stderr).toContain("-t and --open-stdin do not go together");
    // A job has no terminals: refused, never run without one.
    const job = await cli(["run", "-t", "--clients", "a,b", "--", "bash"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(job.code).toBe(EXIT.USAGE);
    expect(job.stderr).toContain("-t runs on one client: it does not go with --clients or -l");
  });
});
