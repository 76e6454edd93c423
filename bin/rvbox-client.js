// `rvbox` with RVBOX_PERSIST set: the small client of the resident client
// (shells/operator/resident.ts), started by the first line of bin/rvbox.js.
// It loads node:net, the frames (shells/operator/resident-wire.js) and the argv check (argv-utf8.js), nothing of the CLI:
// it sends this process's argv, environment and working directory to the
// resident, streams stdin when asked, forwards SIGINT, SIGTERM and SIGHUP,
// writes what comes back to stdout and stderr, and exits with the code it is
// given (or by the signal nothing handled, as the CLI would have).
//
// No resident yet (or a stale socket): it starts one, detached, for
// RVBOX_PERSIST, and runs this command line through it once it listens. When
// the resident cannot be used (its directory is not this user's alone, it is
// busy, it cannot start), the command line runs as it does without
// RVBOX_PERSIST, in a child with the terminal, with a note on stderr only when
// something is wrong.
import { connect } from "node:net";
import { existsSync, fstatSync, openSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  BUSY,
  DIE,
  EXIT,
  frame,
  frameReader,
  HELLO,
  LOAD_TIME_VARIABLES,
  OUT_CLOSED,
  persistMs,
  PROTOCOL_VERSION,
  SIGNAL,
  socketDir,
  socketName,
  STDERR,
  STDIN,
  STDIN_END,
  STDOUT,
  WANT_STDIN,
} from "../shells/operator/resident-wire.js";
import { refuseNonUtf8Args } from "./argv-utf8.js";

/** How long a resident just started may take to listen before this command line runs without it. */
const START_WAIT_MS = 5_000;

const root = resolve(fileURLToPath(new URL("..", import.meta.url)));
const launcher = join(root, "bin/rvbox.js");
const argv = process.argv.slice(2);
// The resident and the fallback child would get argv as (replaced, valid) text.
refuseNonUtf8Args(argv);

/** This command line without the resident: the launcher in a child with the terminal (bin/cli-child.js). */
async function withoutResident(note) {
  if (note) process.stderr.write(`rvbox: resident client not used: ${note}\n`);
  const { runChild } = await import("./cli-child.js");
  runChild(process.execPath, [launcher, ...argv], { ...process.env, RVBOX_PERSIST: "" });
}

async function startResident(sock, idleMs) {
  const { spawn } = await import("node:child_process");
  const own = join(root, "node_modules/.bin/node");
  const log = openSync(`${sock}.log`, "a", 0o600);
  const child = spawn(existsSync(own) ? own : process.execPath, [launcher, "__resident", "--socket", sock, "--idle", String(idleMs)], {
    detached: true,
    stdio: ["ignore", log, log],
    cwd: "/",
    env: { ...process.env, RVBOX_PERSIST: "" },
  });
  child.unref();
}

function tryConnect(sock) {
  return new Promise((resolve) => {
    const s = connect(sock);
    s.once("connect", () => {
      s.removeAllListeners("error");
      resolve(s);
    });
    s.once("error", () => resolve(null));
  });
}

async function main() {
  const idleMs = persistMs(process.env.RVBOX_PERSIST);
  if (idleMs === null) return withoutResident(`RVBOX_PERSIST=${process.env.RVBOX_PERSIST}: expected a duration (90s, 10m, 1h)`);
  const d = socketDir(process.env, true);
  if (d.problem !== null) return withoutResident(`${d.dir}: ${d.problem}`);
  // Read while the CLI's modules load, so fixed in a resident by whichever command line started it:
  // a command line that sets them runs on its own, as without RVBOX_PERSIST.
  if (LOAD_TIME_VARIABLES.some((k) => process.env[k] !== undefined)) return withoutResident("");
  const path = join(d.dir, socketName(root));
  let s = await tryConnect(path);
  if (s === null) {
    await startResident(path, idleMs);
    const until = Date.now() + START_WAIT_MS;
    for (let wait = 5; s === null && Date.now() < until; wait = Math.min(wait * 2, 100)) {
      await new Promise((r) => setTimeout(r, wait));
      s = await tryConnect(path);
    }
    if (s === null) return withoutResident(`the resident did not start within ${START_WAIT_MS / 1000} s (its log: ${path}.log)`);
  }
  run(s);
}

function run(s) {
  let stdinIsDirectory;
  try {
    stdinIsDirectory = fstatSync(0).isDirectory();
  } catch {
    stdinIsDirectory = undefined;
  }
  const send = (type, payload) => {
    const [head, body] = frame(type, payload);
    s.write(head);
    return s.write(body);
  };
  send(HELLO, JSON.stringify({ v: PROTOCOL_VERSION, argv, env: process.env, cwd: process.cwd(), stdinIsDirectory }));

  let served = false;
  let finished = false;
  const closed = { stdout: false, stderr: false };
  const signals = ["SIGINT", "SIGTERM", "SIGHUP"];
  const onSignal = (name) => send(SIGNAL, name);
  for (const sig of signals) process.on(sig, onSignal);

  const out = (stream, name, payload) => {
    if (closed[name]) return;
    if (!stream.write(payload)) {
      s.pause();
      stream.once("drain", () => s.resume());
    }
  };
  for (const [stream, name] of [
    [process.stdout, "stdout"],
    [process.stderr, "stderr"],
  ])
    stream.on("error", (e) => {
      if (closed[name]) return;
      closed[name] = true;
      s.resume();
      send(OUT_CLOSED, `${name} ${e.code ?? "EIO"}`);
    });

  const readStdin = () => {
    const i = process.stdin;
    i.on("data", (b) => {
      if (!send(STDIN, b)) {
        i.pause();
        s.once("drain", () => i.resume());
      }
    });
    i.on("end", () => send(STDIN_END));
    i.on("error", () => send(STDIN_END));
  };

  const end = (code) => {
    finished = true;
    // Exit once stdout and stderr have taken everything (a pipe may be full).
    let left = 2;
    const one = () => {
      if (--left === 0) process.exit(code);
    };
    for (const [stream, name] of [
      [process.stdout, "stdout"],
      [process.stderr, "stderr"],
    ])
      if (closed[name] || stream.writableLength === 0) one();
      else stream.write("", one);
  };

  const read = frameReader((type, payload) => {
    served = true;
    switch (type) {
      case STDOUT:
        return out(process.stdout, "stdout", payload);
      case STDERR:
        return out(process.stderr, "stderr", payload);
      case WANT_STDIN:
        return readStdin();
      case EXIT:
        return end(Number(payload.toString("utf8")) || 0);
      case DIE: {
        finished = true;
        for (const sig of signals) process.removeListener(sig, onSignal);
        process.kill(process.pid, payload.toString("utf8"));
        return;
      }
      case BUSY:
        finished = true;
        s.destroy();
        for (const sig of signals) process.removeListener(sig, onSignal);
        {
          // Busy, stopping, or a command it does not run (help, a typo): quietly as without it.
          const why = payload.toString("utf8");
          return void withoutResident(why === "busy" || why === "stopping" || why === "not a resident command" ? "" : why);
        }
      default:
        process.stderr.write(`rvbox: the resident client sent an unknown frame ${type}\n`);
        process.exit(1);
    }
  });
  s.on("data", (b) => {
    try {
      read(b);
    } catch (e) {
      process.stderr.write(`rvbox: the resident client: ${e.message}\n`);
      process.exit(1);
    }
  });
  s.on("error", () => {});
  s.on("close", () => {
    if (finished) return;
    if (!served) return void withoutResident("it closed the connection");
    process.stderr.write("rvbox: the resident client went away before the command line ended; what it submitted goes on (rvbox ls shows it)\n");
    process.exit(1);
  });
}

await main();
