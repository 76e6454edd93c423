// A command on a pseudo-terminal (`rvbox run -t`): the runner's contract with
// a real terminal (node-pty) and real programs.
import { describe, expect, it } from "vitest";
import type { ExitInfo, ProcessHandle, SpawnFailure } from "../../../shells/exec/process-runner.js";
import { startCommand } from "../../../shells/exec/pty-runner.js";

interface Run {
  h: ProcessHandle;
  out: () => string;
  exit: Promise<ExitInfo>;
  spawned: Promise<number>;
  error: Promise<SpawnFailure>;
}

function run(argv: string[], rows = 24, cols = 80): Run {
  let text = "";
  let onExit!: (i: ExitInfo) => void;
  let onSpawn!: (pid: number) => void;
  let onError!: (e: SpawnFailure) => void;
  const exit = new Promise<ExitInfo>((r) => (onExit = r));
  const spawned = new Promise<number>((r) => (onSpawn = r));
  const error = new Promise<SpawnFailure>((r) => (onError = r));
  const h = startCommand(
    { kind: "argv", argv, stdinOpen: true, terminal: { rows, cols, term: "xterm" } },
    {
      onSpawn,
      onSpawnError: onError,
      onOutput: (s, c) => {
        expect(s).toBe("stdout"); // one stream: the terminal
        text += Buffer.from(c).toString();
      },
      onExit,
    },
  );
  return { h, out: () => text, exit, spawned, error };
}

async function until(what: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!what()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe.runIf(process.platform === "linux")("commands on a terminal (pty-runner)", () => {
  it("the program sees a terminal of the asked size, and its exit code comes back", async () => {
    const r = run(["sh", "-c", "test -t 0 && test -t 1 && echo tty; stty size; echo $TERM; exit 7"], 33, 101);
    expect(await r.spawned).toBeGreaterThan(1);
    const info = await r.exit;
    expect(info).toMatchObject({ exitCode: 7, signal: null, outputComplete: { stdout: true, stderr: true } });
    expect(r.out()).toContain("tty");
    expect(r.out()).toContain("33 101");
    expect(r.out()).toContain("xterm");
  });

  it("Ctrl-C as a byte interrupts the foreground program; Ctrl-D ends the shell's input", async () => {
    const r = run(["sh", "-c", "trap 'echo trapped' INT; sleep 30; echo after=$?; read x; echo read=$?"]);
    await r.spawned;
    await new Promise((res) => setTimeout(res, 200));
    await r.h.writeStdin(new Uint8Array([3])); // Ctrl-C: the line discipline sends SIGINT to the foreground group
    await until(() => r.out().includes("after="));
    await r.h.writeStdin(new Uint8Array([4])); // Ctrl-D: read sees EOF
    const info = await r.exit;
    expect(r.out()).toContain("trapped");
    expect(r.out()).toMatch(/after=130/);
    expect(r.out()).toContain("read=1");
    expect(info.exitCode).toBe(0);
  }, 15_000);

  it("resize changes the window size the program reads", async () => {
    const r = run(["sh", "-c", "read x; stty size; read y"]);
    await r.spawned;
    r.h.resize?.(50, 132);
    await r.h.writeStdin(new TextEncoder().encode("go\r"));
    await until(() => r.out().includes("50 132"));
    r.h.terminate();
    const info = await r.exit;
    expect(info.signal).toBe("SIGHUP");
  }, 15_000);

  it("a program that is not there is a spawn error (ENOENT), as without a terminal", async () => {
    const r = run(["no-such-program-rvbox"]);
    expect((await r.error).code).toBe("ENOENT");
  });
});
