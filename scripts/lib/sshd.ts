// A throwaway OpenSSH server for the bench's ssh baselines (scripts/bench.ts).
//
// Everything lives in a fresh temp directory: a host key, a user key, an
// authorized_keys file and an sshd_config of our own. sshd listens on
// 127.0.0.1 on a free port, in the foreground (-D), as the current user
// (root here: PermitRootLogin prohibit-password, so only the throwaway key
// gets in). No system file is read or written: -f names our config, the
// client gets -F /dev/null and its own known_hosts. The client side is one
// multiplexed master connection (ControlMaster), so each baseline `ssh`
// pays for a session on an open connection, not for a key exchange, which
// is how an operator with ControlPersist uses ssh.
//
// Installing openssh-server when /usr/sbin/sshd is missing is the caller's
// choice (ensureSshd); nothing here touches the system's configuration.
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

export const SSHD = "/usr/sbin/sshd";

export interface SshHarness {
  port: number;
  dir: string;
  /** argv (without the remote command) of an ssh client over the master connection. */
  ssh: string[];
  /** Runs `ssh host -- cmd` over the master; stdout as given. */
  run(cmd: string, stdio?: "pipe" | "ignore"): ChildProcess;
  close(): Promise<void>;
}

/** sshd's path, installing Debian's openssh-server if it is missing (apt-get). */
export function ensureSshd(): string {
  if (existsSync(SSHD)) return SSHD;
  process.stderr.write("bench: /usr/sbin/sshd missing; installing openssh-server\n");
  execFileSync("apt-get", ["install", "-y", "--no-install-recommends", "openssh-server"], {
    stdio: "inherit",
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
  if (!existsSync(SSHD)) throw new Error("sshd: openssh-server installed but /usr/sbin/sshd is still missing");
  return SSHD;
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
  const p = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return p;
}

export async function startSshd(): Promise<SshHarness> {
  const sshd = ensureSshd();
  const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-sshd-"));
  const keygen = (file: string) => execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", file], { stdio: "ignore" });
  keygen(path.join(dir, "host_key"));
  keygen(path.join(dir, "user_key"));
  writeFileSync(path.join(dir, "authorized_keys"), readFileSync(path.join(dir, "user_key.pub")), { mode: 0o600 });
  const user = os.userInfo().username;
  const port = await freePort();
  const config = [
    `Port ${port}`,
    "ListenAddress 127.0.0.1",
    `HostKey ${path.join(dir, "host_key")}`,
    `PidFile ${path.join(dir, "sshd.pid")}`,
    `AuthorizedKeysFile ${path.join(dir, "authorized_keys")}`,
    `AllowUsers ${user}`,
    "PermitRootLogin prohibit-password",
    "PubkeyAuthentication yes",
    "PasswordAuthentication no",
    "KbdInteractiveAuthentication no",
    "UsePAM no",
    // Our authorized_keys sits in a temp dir whose parents sshd would otherwise vet.
    "StrictModes no",
    "UseDNS no",
    "PrintMotd no",
    "PrintLastLog no",
    "MaxSessions 64",
    "MaxStartups 64",
    "LogLevel ERROR",
    "Subsystem sftp internal-sftp",
    "",
  ].join("\n");
  const cfg = path.join(dir, "sshd_config");
  writeFileSync(cfg, config);
  // sshd refuses to start without its privilege-separation directory, compiled in as
  // /run/sshd (on Debian systemd's RuntimeDirectory makes it): an empty directory on tmpfs,
  // made here if missing and removed again at close.
  const privsep = "/run/sshd";
  const madePrivsep = !existsSync(privsep);
  if (madePrivsep) mkdirSync(privsep, { mode: 0o755 });
  const t = spawnSync(sshd, ["-t", "-f", cfg], { encoding: "utf8" });
  if (t.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`sshd -t: ${t.stderr.trim()}`);
  }
  const cleanupDirs = () => {
    rmSync(dir, { recursive: true, force: true });
    if (madePrivsep) rmSync(privsep, { recursive: true, force: true });
  };
  const daemon = spawn(sshd, ["-D", "-e", "-f", cfg], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  daemon.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  const ctl = path.join(dir, "ctl");
  const ssh = [
    "ssh",
    "-F",
    "/dev/null",
    "-i",
    path.join(dir, "user_key"),
    "-p",
    String(port),
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "BatchMode=yes",
    "-o",
    `UserKnownHostsFile=${path.join(dir, "known_hosts")}`,
    "-o",
    "StrictHostKeyChecking=accept-new",
    "-o",
    "LogLevel=ERROR",
    "-o",
    `ControlPath=${ctl}`,
    `${user}@127.0.0.1`,
  ];
  // The master: -M -N in the background (-f), waits until authenticated.
  const end = Date.now() + 15_000;
  for (;;) {
    const m = spawnSync(ssh[0]!, [...ssh.slice(1, -1), "-o", "ControlMaster=yes", "-o", "ControlPersist=yes", "-f", "-N", ssh[ssh.length - 1]!], {
      encoding: "utf8",
      timeout: 15_000,
    });
    if (m.status === 0) break;
    if (Date.now() > end || daemon.exitCode !== null) {
      daemon.kill("SIGTERM");
      cleanupDirs();
      throw new Error(`sshd harness: master connection failed: ${m.stderr.trim()} ${err.trim()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    spawnSync(ssh[0]!, [...ssh.slice(1, -1), "-O", "exit", ssh[ssh.length - 1]!], { stdio: "ignore", timeout: 5000 });
    if (daemon.exitCode === null) {
      daemon.kill("SIGTERM");
      await new Promise((r) => daemon.once("exit", r));
    }
    cleanupDirs();
  };
  // Clean up even if the bench dies on an exception or a signal.
  const onExit = () => {
    if (closed) return;
    closed = true;
    spawnSync(ssh[0]!, [...ssh.slice(1, -1), "-O", "exit", ssh[ssh.length - 1]!], { stdio: "ignore", timeout: 5000 });
    daemon.kill("SIGTERM");
    cleanupDirs();
  };
  process.once("exit", onExit);
  return {
    port,
    dir,
    ssh,
    run: (cmd, stdio = "pipe") => spawn(ssh[0]!, [...ssh.slice(1), "--", cmd], { stdio: ["ignore", stdio, "inherit"] }),
    close: async () => {
      process.removeListener("exit", onExit);
      await close();
    },
  };
}
