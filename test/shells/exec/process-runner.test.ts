import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildChildEnv, killProcessGroup, MAX_OUTPUT_CHUNK_BYTES, resolveCommand, startProcess } from "../../../shells/exec/index.js";
import { isGone, liveGroupMembers, run, sleep } from "./run-helper.js";

const posix = process.platform !== "win32";
const hasBash = existsSync("/bin/bash") || existsSync("/usr/bin/bash");

let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "rvbox-exec-test-"));
});
afterAll(() => {
  rmSync(work, { recursive: true, force: true });
});

describe.runIf(posix)("startProcess: basics", () => {
  it("runs an argv command and reports exit 0 with complete output", async () => {
    const r = await run({ kind: "argv", argv: ["echo", "hi"], stdinOpen: false }).done;
    expect(r.spawnError).toBeUndefined();
    expect(r.spawnCalls).toBe(1);
    expect(typeof r.pid).toBe("number");
    expect(r.stdout.toString()).toBe("hi\n");
    expect(r.stderr.length).toBe(0);
    expect(r.exitCalls).toBe(1);
    expect(r.exit).toEqual({
      exitCode: 0,
      signal: null,
      timedOut: false,
      outputComplete: { stdout: true, stderr: true },
    });
  });

  it("expands $VAR from spec.env in a shell line, without leaking daemon env", async () => {
    process.env.RVBOX_TEST_DAEMON_SECRET = "do-not-leak";
    try {
      const r = await run({
        kind: "shell",
        shell: "sh",
        commandLine: 'echo "$GREETING|${RVBOX_TEST_DAEMON_SECRET-unset}|${PATH:+has-path}"',
        env: { GREETING: "hello world" },
        stdinOpen: false,
      }).done;
      expect(r.stdout.toString()).toBe("hello world|unset|has-path\n");
      expect(r.exit?.exitCode).toBe(0);
    } finally {
      delete process.env.RVBOX_TEST_DAEMON_SECRET;
    }
  });

  it.runIf(hasBash)("runs bash lines", async () => {
    const r = await run({ kind: "shell", shell: "bash", commandLine: 'echo "${BASH_VERSION:+bash}" >&2; exit 0', stdinOpen: false }).done;
    expect(r.stderr.toString()).toBe("bash\n");
  });

  it("reports exit codes 0 and 3", async () => {
    const ok = await run({ kind: "shell", shell: "sh", commandLine: "exit 0", stdinOpen: false }).done;
    const three = await run({ kind: "shell", shell: "sh", commandLine: "echo oops >&2; exit 3", stdinOpen: false }).done;
    expect(ok.exit?.exitCode).toBe(0);
    expect(three.exit?.exitCode).toBe(3);
    expect(three.exit?.signal).toBeNull();
    expect(three.stderr.toString()).toBe("oops\n");
  });

  it("reports death by signal", async () => {
    const r = await run({ kind: "argv", argv: ["sh", "-c", "kill -TERM $$"], stdinOpen: false }).done;
    expect(r.exit?.exitCode).toBeNull();
    expect(r.exit?.signal).toBe("SIGTERM");
    expect(r.exit?.timedOut).toBe(false);
  });

  it("uses cwd", async () => {
    const r = await run({ kind: "argv", argv: ["pwd"], cwd: work, stdinOpen: false }).done;
    expect(r.stdout.toString().trim()).toBe(work);
  });
});

describe.runIf(posix)("startProcess: output and stdin", () => {
  it("delivers 200 KiB of binary output complete, byte-exact, in chunks <= 64 KiB", async () => {
    const file = join(work, "random.bin");
    const gen = await run({ kind: "shell", shell: "sh", commandLine: `head -c 204800 /dev/urandom > '${file}'`, stdinOpen: false }).done;
    expect(gen.exit?.exitCode).toBe(0);
    const expected = readFileSync(file);
    expect(expected.length).toBe(204800);

    const r = await run({ kind: "argv", argv: ["cat", file], stdinOpen: false }).done;
    expect(r.exit?.exitCode).toBe(0);
    expect(r.exit?.outputComplete).toEqual({ stdout: true, stderr: true });
    expect(r.stdout.length).toBe(204800);
    expect(r.stdout.equals(expected)).toBe(true);
    expect(r.chunkSizes.stdout.length).toBeGreaterThan(1);
    for (const n of r.chunkSizes.stdout) {
      expect(n).toBeGreaterThan(0);
      expect(n).toBeLessThanOrEqual(MAX_OUTPUT_CHUNK_BYTES);
    }
  });

  it("keeps stdout and stderr apart", async () => {
    const r = await run({ kind: "shell", shell: "sh", commandLine: "echo out; echo err >&2; echo out2", stdinOpen: false }).done;
    expect(r.stdout.toString()).toBe("out\nout2\n");
    expect(r.stderr.toString()).toBe("err\n");
  });

  it("passes binary stdin through cat byte-exact; writeStdin resolves; closeStdin twice is fine", async () => {
    const input = randomBytes(300 * 1024);
    const p = run({ kind: "argv", argv: ["cat"], stdinOpen: true });
    // several writes, including one > 64 KiB
    await p.handle.writeStdin(input.subarray(0, 10));
    await p.handle.writeStdin(input.subarray(10, 200_000));
    await p.handle.writeStdin(new Uint8Array(input.subarray(200_000)));
    p.handle.closeStdin();
    p.handle.closeStdin();
    const r = await p.done;
    p.handle.closeStdin(); // after exit, still harmless
    expect(r.exit?.exitCode).toBe(0);
    expect(r.stdout.equals(input)).toBe(true);
    for (const n of r.chunkSizes.stdout) expect(n).toBeLessThanOrEqual(MAX_OUTPUT_CHUNK_BYTES);
  });

  it("rejects writeStdin with EPIPE after closeStdin, after exit, and when stdin is not open", async () => {
    const p = run({ kind: "argv", argv: ["cat"], stdinOpen: true });
    p.handle.closeStdin();
    await expect(p.handle.writeStdin(new Uint8Array([1]))).rejects.toMatchObject({ code: "EPIPE" });
    await p.done;
    await expect(p.handle.writeStdin(new Uint8Array([1]))).rejects.toMatchObject({ code: "EPIPE" });

    const q = run({ kind: "argv", argv: ["true"], stdinOpen: false });
    await expect(q.handle.writeStdin(new Uint8Array([1]))).rejects.toMatchObject({ code: "EPIPE" });
    q.handle.closeStdin();
    await q.done;
  });

  it("a pending writeStdin to a process that never reads rejects with EPIPE once it exits", async () => {
    const p = run({ kind: "argv", argv: ["sleep", "0.3"], stdinOpen: true });
    const pending = p.handle.writeStdin(new Uint8Array(8 * 1024 * 1024)).then(
      () => "resolved",
      (err: NodeJS.ErrnoException) => err.code,
    );
    const r = await p.done;
    expect(r.exit?.exitCode).toBe(0);
    expect(await pending).toBe("EPIPE");
  });

  it("rejects writeStdin with EPIPE when the process closed its stdin", async () => {
    // The shell closes fd 0 and keeps running; writes hit a pipe without reader.
    const p = run({ kind: "shell", shell: "sh", commandLine: "exec 0<&-; echo closed; sleep 2", stdinOpen: true });
    await p.firstOutput;
    const big = new Uint8Array(256 * 1024);
    await expect(
      (async () => {
        for (let i = 0; i < 10; i++) await p.handle.writeStdin(big);
      })(),
    ).rejects.toMatchObject({ code: "EPIPE" });
    p.handle.terminate();
    const r = await p.done;
    expect(r.exit?.signal).toBe("SIGTERM");
  });

  it("pauseOutput applies backpressure: no output while paused, everything after resume", async () => {
    const p = run({ kind: "shell", shell: "sh", commandLine: "echo early; head -c 300000 /dev/zero", stdinOpen: false });
    p.handle.pauseOutput();
    await sleep(400); // the writer fills the pipe and blocks
    expect(p.result.chunkSizes.stdout.length).toBe(0);
    expect(p.handle.state).toBe("running");
    p.handle.resumeOutput();
    const r = await p.done;
    expect(r.exit?.exitCode).toBe(0);
    expect(r.exit?.outputComplete).toEqual({ stdout: true, stderr: true });
    expect(r.stdout.length).toBe("early\n".length + 300000);
  });

  it("a slow consumer pausing inside onOutput gets 1 MiB complete, in order, in chunks <= 64 KiB", async () => {
    const file = join(work, "one-mib.bin");
    const expected = randomBytes(1024 * 1024);
    writeFileSync(file, expected);
    const got: Buffer[] = [];
    let maxChunk = 0;
    const info = await new Promise<import("../../../shells/exec/index.js").ExitInfo>((resolve, reject) => {
      const h = startProcess(
        { kind: "argv", argv: ["cat", file], stdinOpen: false, drainTimeoutMs: 100 },
        {
          onSpawnError: reject,
          onOutput(stream, chunk) {
            if (stream !== "stdout") return;
            maxChunk = Math.max(maxChunk, chunk.length);
            got.push(Buffer.from(chunk));
            h.pauseOutput();
            setTimeout(() => h.resumeOutput(), 2);
          },
          onExit: resolve,
        },
      );
    });
    expect(info.exitCode).toBe(0);
    expect(info.outputComplete).toEqual({ stdout: true, stderr: true });
    expect(maxChunk).toBeLessThanOrEqual(MAX_OUTPUT_CHUNK_BYTES);
    expect(Buffer.concat(got).equals(expected)).toBe(true);
  });

  it("a process that exits while output is paused: no drain deadline until resumed, output complete", async () => {
    const p = run({ kind: "shell", shell: "sh", commandLine: "echo bye; echo err >&2", stdinOpen: false, drainTimeoutMs: 50 });
    p.handle.pauseOutput();
    for (let i = 0; i < 100 && p.handle.state !== "exited"; i++) await sleep(10);
    expect(p.handle.state).toBe("exited");
    await sleep(200); // well past the 50 ms drain deadline
    expect(p.result.exitCalls).toBe(0);
    expect(p.result.chunkSizes.stdout.length).toBe(0);
    p.handle.resumeOutput();
    const r = await p.done;
    expect(r.exit).toEqual({ exitCode: 0, signal: null, timedOut: false, outputComplete: { stdout: true, stderr: true } });
    expect(r.stdout.toString()).toBe("bye\n");
    expect(r.stderr.toString()).toBe("err\n");
  });
});

describe.runIf(posix)("startProcess: signals, terminate, timeout", () => {
  it("signal(SIGTERM) to sleep 30 ends it quickly", async () => {
    const p = run({ kind: "argv", argv: ["sleep", "30"], stdinOpen: false });
    while (p.result.spawnCalls === 0) await sleep(5);
    const t0 = Date.now();
    expect(p.handle.signal("SIGTERM")).toBe(true);
    const r = await p.done;
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(r.exit?.signal).toBe("SIGTERM");
    expect(r.exit?.exitCode).toBeNull();
    expect(p.handle.signal("SIGTERM")).toBe(false); // finished
  });

  it("signals reach the whole process group", async () => {
    const p = run({ kind: "shell", shell: "sh", commandLine: "sleep 30 & echo $!; wait", stdinOpen: false });
    await p.firstOutput; // "$!" printed: the background sleep exists
    expect(p.handle.signal("SIGKILL")).toBe(true);
    const r = await p.done;
    const gpid = Number.parseInt(r.stdout.toString().trim(), 10);
    expect(gpid).toBeGreaterThan(1);
    expect(r.exit?.signal).toBe("SIGKILL");
    expect(r.exit?.outputComplete).toEqual({ stdout: true, stderr: true });
    for (let i = 0; i < 50 && !isGone(gpid); i++) await sleep(20);
    expect(isGone(gpid)).toBe(true);
  });

  it("terminate() escalates to SIGKILL after killGraceMs when TERM is ignored", async () => {
    const p = run({
      kind: "shell",
      shell: "sh",
      commandLine: 'trap "" TERM; echo ready; sleep 30',
      stdinOpen: false,
      killGraceMs: 300,
    });
    await p.firstOutput; // the trap is installed
    const t0 = Date.now();
    p.handle.terminate();
    p.handle.terminate(); // idempotent
    const r = await p.done;
    const took = Date.now() - t0;
    expect(r.exit?.signal).toBe("SIGKILL");
    expect(r.exit?.timedOut).toBe(false);
    expect(took).toBeGreaterThanOrEqual(280);
    expect(took).toBeLessThan(3000);
  });

  it("terminate() of a cooperative process ends it with SIGTERM", async () => {
    const p = run({ kind: "argv", argv: ["sleep", "30"], stdinOpen: false, killGraceMs: 5000 });
    while (p.result.spawnCalls === 0) await sleep(5);
    p.handle.terminate();
    const r = await p.done;
    expect(r.exit?.signal).toBe("SIGTERM");
    expect(r.elapsedMs).toBeLessThan(3000);
  });

  it("timeoutMs terminates and reports timedOut", async () => {
    const t0 = Date.now();
    const r = await run({ kind: "argv", argv: ["sleep", "30"], stdinOpen: false, timeoutMs: 200 }).done;
    expect(r.exit?.timedOut).toBe(true);
    expect(r.exit?.signal).toBe("SIGTERM");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(190);
    expect(Date.now() - t0).toBeLessThan(3000);
  });

  it("timeoutMs with a TERM-ignoring process ends in SIGKILL", async () => {
    const r = await run({
      kind: "shell",
      shell: "sh",
      commandLine: 'trap "" TERM; sleep 30',
      stdinOpen: false,
      timeoutMs: 200,
      killGraceMs: 200,
    }).done;
    expect(r.exit?.timedOut).toBe(true);
    expect(r.exit?.signal).toBe("SIGKILL");
  });

  it("a process that finishes before the timeout is not timedOut", async () => {
    const r = await run({ kind: "argv", argv: ["true"], stdinOpen: false, timeoutMs: 5000 }).done;
    expect(r.exit).toMatchObject({ exitCode: 0, timedOut: false });
  });
});

describe.runIf(posix)("startProcess: launch failures", () => {
  it("nonexistent binary: onSpawnError(ENOENT) only, never onSpawn/onExit", async () => {
    let syncHook = false;
    let inStart = true;
    const p = startProcess(
      { kind: "argv", argv: ["rvbox-definitely-not-a-binary"], stdinOpen: true },
      {
        onSpawnError: () => {
          syncHook = inStart;
        },
      },
    );
    inStart = false;
    expect(p.state).toBe("starting");
    const r = await run({ kind: "argv", argv: ["rvbox-definitely-not-a-binary"], stdinOpen: true }, 300).done;
    expect(syncHook).toBe(false);
    expect(r.spawnError?.code).toBe("ENOENT");
    expect(r.spawnCalls).toBe(0);
    expect(r.exitCalls).toBe(0);
    expect(r.pid).toBeUndefined();
  });

  it("absolute path that does not exist: ENOENT; writes and signals are inert", async () => {
    const p = run({ kind: "argv", argv: ["/nonexistent/rvbox/bin"], stdinOpen: true }, 200);
    const write = p.handle.writeStdin(new Uint8Array([1, 2, 3])).then(
      () => "resolved",
      (err: NodeJS.ErrnoException) => err.code,
    );
    const r = await p.done;
    expect(r.spawnError?.code).toBe("ENOENT");
    expect(await write).toBe("EPIPE");
    await expect(p.handle.writeStdin(new Uint8Array([1]))).rejects.toMatchObject({ code: "EPIPE" });
    expect(p.handle.state).toBe("failed");
    expect(p.handle.signal("SIGTERM")).toBe(false);
    p.handle.terminate();
    p.handle.closeStdin();
    expect(r.exitCalls).toBe(0);
  });

  it("non-executable file: EACCES", async () => {
    const f = join(work, "not-exec.sh");
    writeFileSync(f, "#!/bin/sh\necho hi\n", { mode: 0o600 });
    const r = await run({ kind: "script", path: f, stdinOpen: false }, 200).done;
    expect(r.spawnError?.code).toBe("EACCES");
    expect(r.exitCalls).toBe(0);
  });

  it("bad cwd: missing directory (ENOENT) and a file (ENOTDIR)", async () => {
    const missing = await run({ kind: "argv", argv: ["pwd"], cwd: join(work, "nope"), stdinOpen: false }, 200).done;
    expect(missing.spawnError?.code).toBe("ENOENT");
    expect(missing.spawnError?.message).toContain("cwd");
    expect(missing.exitCalls).toBe(0);
    const file = join(work, "a-file");
    writeFileSync(file, "x");
    const notDir = await run({ kind: "argv", argv: ["pwd"], cwd: file, stdinOpen: false }, 200).done;
    expect(notDir.spawnError?.code).toBe("ENOTDIR");
    expect(notDir.exitCalls).toBe(0);
  });

  it("invalid specs: empty argv, NUL bytes, cmd off Windows, negative timeout", async () => {
    const cases = [
      { kind: "argv" as const, argv: [], stdinOpen: false },
      { kind: "argv" as const, argv: ["echo", "a\0b"], stdinOpen: false },
      { kind: "shell" as const, shell: "cmd" as const, commandLine: "echo hi", stdinOpen: false },
      { kind: "argv" as const, argv: ["true"], stdinOpen: false, timeoutMs: -1 },
    ];
    const codes = [];
    for (const spec of cases) {
      const r = await run(spec, 100).done;
      expect(r.exitCalls).toBe(0);
      expect(r.spawnCalls).toBe(0);
      codes.push(r.spawnError?.code);
    }
    expect(codes).toEqual(["EINVAL", "EINVAL", "ENOTSUP", "EINVAL"]);
  });
});

describe.runIf(posix)("startProcess: drain deadline and orphaned groups", () => {
  it("a grandchild holding stdout open: onExit after the drain deadline with outputComplete=false", async () => {
    const p = run({ kind: "shell", shell: "sh", commandLine: "sleep 5 & echo x", stdinOpen: false, drainTimeoutMs: 300 });
    const r = await p.done;
    try {
      expect(r.exitCalls).toBe(1);
      expect(r.exit?.exitCode).toBe(0);
      expect(r.exit?.outputComplete).toEqual({ stdout: false, stderr: false });
      expect(r.stdout.toString()).toBe("x\n");
      expect(r.elapsedMs).toBeGreaterThanOrEqual(290);
      expect(r.elapsedMs).toBeLessThan(2500);
    } finally {
      // the sleep is still alive in the group: clean it up like a daemon would
      expect(killProcessGroup(r.pid!)).toBe(true);
    }
    // (a killed orphan may linger as a zombie until init reaps it, so look for
    // live members rather than expecting ESRCH right away)
    let live = liveGroupMembers(r.pid!);
    for (let i = 0; i < 100 && live !== null && live.length > 0; i++) {
      await sleep(20);
      live = liveGroupMembers(r.pid!);
    }
    if (live !== null) expect(live).toEqual([]);
  });

  it("killProcessGroup on a group that no longer exists returns false (ESRCH)", async () => {
    const r = await run({ kind: "argv", argv: ["true"], stdinOpen: false }).done;
    expect(r.exit?.exitCode).toBe(0);
    expect(killProcessGroup(r.pid!)).toBe(false);
  });

  it("killProcessGroup kills a group this daemon no longer supervises", async () => {
    const p = run({ kind: "shell", shell: "sh", commandLine: 'trap "" TERM; echo up; sleep 30', stdinOpen: false });
    await p.firstOutput;
    const pgid = p.result.pid!;
    expect(killProcessGroup(pgid, "SIGKILL")).toBe(true);
    const r = await p.done;
    expect(r.exit?.signal).toBe("SIGKILL");
  });

  it("killProcessGroup refuses dangerous ids", () => {
    expect(() => killProcessGroup(0)).toThrow(RangeError);
    expect(() => killProcessGroup(1)).toThrow(RangeError);
    expect(() => killProcessGroup(-5)).toThrow(RangeError);
    expect(() => killProcessGroup(1.5)).toThrow(RangeError);
    expect(() => killProcessGroup(process.pid)).toThrow(RangeError);
  });
});

describe("pure helpers", () => {
  it("buildChildEnv keeps only safe keys and merges overrides", () => {
    const env = buildChildEnv({ FOO: "bar", HOME: "/override" }, { PATH: "/bin", HOME: "/root", AWS_SECRET_ACCESS_KEY: "x", LANG: "C.UTF-8" }, "linux");
    expect(env).toEqual({ PATH: "/bin", HOME: "/override", LANG: "C.UTF-8", FOO: "bar" });
    expect(buildChildEnv(undefined, {}, "linux").PATH).toMatch(/\/usr\/bin/);
    const win = buildChildEnv(undefined, { Path: "C:\\Windows", SYSTEMROOT: "C:\\Windows", SECRET: "x" }, "win32");
    expect(win).toEqual({ PATH: "C:\\Windows", SystemRoot: "C:\\Windows" });
  });

  it("resolveCommand maps shells and scripts", () => {
    expect(resolveCommand({ kind: "shell", shell: "sh", commandLine: "x" }, "linux")).toEqual({ file: "/bin/sh", args: ["-c", "x"] });
    expect(resolveCommand({ kind: "shell", shell: "powershell", commandLine: "x" }, "linux")).toMatchObject({ file: "pwsh" });
    expect(resolveCommand({ kind: "shell", shell: "cmd", commandLine: "x" }, "win32")).toMatchObject({
      file: "cmd.exe",
      windowsVerbatimArguments: true,
    });
    expect(resolveCommand({ kind: "script", path: "/s.sh", interpreter: "bash", args: ["a"] })).toEqual({
      file: "bash",
      args: ["/s.sh", "a"],
    });
    expect(resolveCommand({ kind: "script", path: "/s.sh" })).toEqual({ file: "/s.sh", args: [] });
  });
});
