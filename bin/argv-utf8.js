// Arguments that are not valid UTF-8 are refused, by index, before anything
// else runs. Node decodes argv as UTF-8 and replaces each invalid sequence
// with U+FFFD, silently: `rvbox run web-1 -- cat $'\xff'` would run
// `cat '\uFFFD'`. The control API carries arguments as protobuf `string`s
// (UTF-8 text), so bytes cannot be carried as they are; the honest answer is
// to say so. The raw bytes are read from /proc/self/cmdline (Linux): the
// process the user started, before its argv is passed on to any other (the
// snapshot's fallback child, the re-execution under the project's Node, the
// daemons' execve, the resident client's HELLO), since each of those would
// pass the replaced text on as valid UTF-8. Elsewhere there is no such file
// and nothing is checked.
//
// Plain JavaScript: bin/rvbox.js and bin/rvbox-client.js load it before tsx
// or the bundle; bin/rvbox.ts and bin/rvbox-snapshot.ts import it too.
import { readFileSync } from "node:fs";

/** `a\xffb`: printable ASCII as is, every other byte as \xHH. */
function shown(bytes) {
  let s = "";
  for (const b of bytes) s += b >= 0x20 && b < 0x7f && b !== 0x5c ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`;
  return s;
}

/** NUL-terminated entries of a cmdline as byte views. */
function entries(cmdline) {
  const out = [];
  let start = 0;
  for (let i = 0; i < cmdline.length; i++) {
    if (cmdline[i] === 0) {
      out.push(cmdline.subarray(start, i));
      start = i + 1;
    }
  }
  if (start < cmdline.length) out.push(cmdline.subarray(start));
  return out;
}

/**
 * The message for the first of `args` (process.argv.slice(2)) whose bytes in
 * `cmdline` are not valid UTF-8, or null. The user's arguments are the
 * cmdline's last entries; if those do not decode to `args` (the process
 * rewrote its title, say), nothing is claimed.
 */
export function invalidUtf8Arg(args, cmdline) {
  const raw = entries(cmdline).slice(-args.length);
  if (args.length === 0 || raw.length !== args.length) return null;
  for (let i = 0; i < args.length; i++) if (Buffer.from(raw[i]).toString("utf8") !== args[i]) return null;
  const fatal = new TextDecoder("utf-8", { fatal: true });
  for (let i = 0; i < args.length; i++) {
    try {
      fatal.decode(raw[i]);
    } catch {
      return (
        `rvbox: argument ${i + 1} is not valid UTF-8: "${shown(raw[i])}"\n` +
        "rvbox: arguments travel as UTF-8 text, so other bytes cannot be sent as they are; " +
        "write them as escapes in a shell line instead (e.g. -- sh -c \"printf '\\377'\")\n"
      );
    }
  }
  return null;
}

/** Exits 2 (a usage error, client/exit-codes.ts) with the message if an argument is not valid UTF-8. */
export function refuseNonUtf8Args(args = process.argv.slice(2)) {
  let cmdline;
  try {
    cmdline = readFileSync("/proc/self/cmdline");
  } catch {
    return;
  }
  const why = invalidUtf8Arg(args, cmdline);
  if (why === null) return;
  process.stderr.write(why);
  process.exit(2);
}
