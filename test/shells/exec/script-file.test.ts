import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isSafeScriptName, writeScriptFile } from "../../../shells/exec/index.js";
import { run } from "./run-helper.js";

const posix = process.platform !== "win32";
const sha = (b: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest());
const enc = (s: string): Uint8Array => new TextEncoder().encode(s);

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "rvbox-script-test-"));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe("writeScriptFile", () => {
  it("writes a verified script with mode 0700 into a new 0700 directory, and it runs", async () => {
    const dir = join(root, "a", "scripts");
    const body = enc('#!/bin/sh\necho "script says $1"\n');
    const r = await writeScriptFile(dir, "cmd-1.sh", body, sha(body));
    expect(r).toEqual({ ok: true, path: join(dir, "cmd-1.sh") });
    if (!r.ok) return;
    expect(Buffer.from(readFileSync(r.path)).equals(Buffer.from(body))).toBe(true);
    if (posix) {
      expect(statSync(r.path).mode & 0o777).toBe(0o700);
      expect(statSync(dir).mode & 0o777).toBe(0o700);
    }
    expect(readdirSync(dir)).toEqual(["cmd-1.sh"]); // no temp files left

    if (posix) {
      const direct = await run({ kind: "script", path: r.path, args: ["hi"], stdinOpen: false }).done;
      expect(direct.stdout.toString()).toBe("script says hi\n");
      const viaInterp = await run({ kind: "script", path: r.path, interpreter: "sh", args: ["yo"], stdinOpen: false }).done;
      expect(viaInterp.stdout.toString()).toBe("script says yo\n");
    }
  });

  it("refuses a checksum mismatch and leaves nothing behind", async () => {
    const dir = join(root, "b");
    const body = enc("#!/bin/sh\necho evil\n");
    const wrong = sha(enc("something else"));
    const r = await writeScriptFile(dir, "x.sh", body, wrong);
    expect(r).toMatchObject({ ok: false, code: "CHECKSUM_MISMATCH" });
    const short = await writeScriptFile(dir, "x.sh", body, sha(body).subarray(0, 31));
    expect(short).toMatchObject({ ok: false, code: "CHECKSUM_MISMATCH" });
    let entries: string[] = [];
    try {
      entries = readdirSync(dir);
    } catch {
      /* directory may not even exist */
    }
    expect(entries).toEqual([]);
  });

  it("handles empty and large (2 MiB) scripts", async () => {
    const dir = join(root, "c");
    const empty = new Uint8Array(0);
    expect(await writeScriptFile(dir, "empty", empty, sha(empty))).toMatchObject({ ok: true });
    const big = new Uint8Array(2 * 1024 * 1024).map((_, i) => i % 251);
    const r = await writeScriptFile(dir, "big", big, sha(big));
    expect(r.ok).toBe(true);
    if (r.ok) expect(Buffer.from(readFileSync(r.path)).equals(Buffer.from(big))).toBe(true);
  });

  it("replaces an existing script of the same name atomically", async () => {
    const dir = join(root, "d");
    const v1 = enc("#!/bin/sh\necho v1\n");
    const v2 = enc("#!/bin/sh\necho v2\n");
    expect((await writeScriptFile(dir, "s", v1, sha(v1))).ok).toBe(true);
    const r = await writeScriptFile(dir, "s", v2, sha(v2));
    expect(r.ok).toBe(true);
    expect(readFileSync(join(dir, "s"), "utf8")).toBe("#!/bin/sh\necho v2\n");
    expect(readdirSync(dir)).toEqual(["s"]);
  });

  it("refuses names with path separators or dot names", async () => {
    const body = enc("x");
    for (const name of ["../evil", "a/b", "a\\b", ".", "..", "", "nul\0byte", "/abs"]) {
      expect(isSafeScriptName(name)).toBe(false);
      expect(await writeScriptFile(join(root, "e"), name, body, sha(body))).toMatchObject({
        ok: false,
        code: "WRITE_FAILED",
      });
    }
    expect(isSafeScriptName("run-42.ps1")).toBe(true);
  });

  it.runIf(posix)("refuses a directory that group/others can access, a symlinked dir, or a file", async () => {
    const open = join(root, "open");
    mkdirSync(open, { mode: 0o755 });
    chmodSync(open, 0o755);
    const body = enc("x");
    expect(await writeScriptFile(open, "s", body, sha(body))).toMatchObject({ ok: false, code: "WRITE_FAILED" });

    const real = join(root, "real");
    mkdirSync(real, { mode: 0o700 });
    const link = join(root, "link");
    symlinkSync(real, link);
    expect(await writeScriptFile(link, "s", body, sha(body))).toMatchObject({ ok: false, code: "WRITE_FAILED" });

    await writeScriptFile(join(root, "f"), "plain", body, sha(body));
    expect(await writeScriptFile(join(root, "f", "plain"), "s", body, sha(body))).toMatchObject({
      ok: false,
      code: "WRITE_FAILED",
    });
  });

  it.runIf(posix && process.getuid?.() !== 0)("reports WRITE_FAILED when the directory is not writable", async () => {
    const dir = join(root, "ro");
    mkdirSync(dir, { mode: 0o500 });
    chmodSync(dir, 0o500);
    const body = enc("x");
    expect(await writeScriptFile(dir, "s", body, sha(body))).toMatchObject({ ok: false, code: "WRITE_FAILED" });
    chmodSync(dir, 0o700);
  });
});
