// A throwaway PostgreSQL cluster for one test file (or one bench run):
// Debian's package (`/usr/lib/postgresql/N/bin`, the newest N), `initdb`
// into a fresh temp dir, listening on 127.0.0.1 and a Unix socket in that
// dir only, trust authentication, stopped and deleted by `stop()`.
// PostgreSQL refuses to run as root, so as root (CI) the cluster runs as the
// `postgres` account the package creates. Every process it starts carries
// this test run's environment, so the run's leak net (leaks-global.ts)
// names and kills a cluster a test forgot to stop.
import { execFile } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";

const run = promisify(execFile);

export interface PgCluster {
  readonly port: number;
  readonly dir: string;
  /** A connection URL for database `db` (loopback TCP). */
  url(db?: string): string;
  /** Create a fresh database and return its URL. */
  createDatabase(name: string): Promise<string>;
  /** The postmaster's pid (for kill -9 tests). */
  pid(): number;
  /** `kill -9` of the postmaster and its children, then start the cluster again on the same port and data. */
  crashAndRestart(): Promise<void>;
  /** Stop PostgreSQL (fast shutdown: its sessions are ended with admin_shutdown), keeping its data; `up()` starts it again. */
  down(): Promise<void>;
  /** Start PostgreSQL again after `down()`, on the same port and data. */
  up(): Promise<void>;
  /** Run one statement as the superuser in database `db`. */
  sql<T extends pg.QueryResultRow = pg.QueryResultRow>(db: string, text: string, values?: unknown[]): Promise<T[]>;
  /** Stop the cluster (immediate) and delete its directory. Safe to call twice. */
  stop(): Promise<void>;
}

/** The bin dir of the newest installed PostgreSQL, or null if none is installed. */
export function pgBinDir(): string | null {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(path.join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length > 0 ? path.join(root, versions[0]!, "bin") : null;
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function idOf(user: string): Promise<{ uid: number; gid: number }> {
  const [u, g] = await Promise.all([run("id", ["-u", user]), run("id", ["-g", user])]);
  return { uid: Number(u.stdout.trim()), gid: Number(g.stdout.trim()) };
}

export async function startPgCluster(): Promise<PgCluster> {
  const bin = pgBinDir();
  if (!bin) throw new Error("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run installs it)");
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(path.join(tmpdir(), "rvbox-pg-"));
  if (asRoot) {
    const { uid, gid } = await idOf("postgres");
    chownSync(dir, uid, gid);
  }
  const data = path.join(dir, "data");
  const exec = (tool: string, args: string[]) =>
    asRoot ? run("runuser", ["-u", "postgres", "--", path.join(bin, tool), ...args]) : run(path.join(bin, tool), args);
  const port = await freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=50`;
  const start = () => exec("pg_ctl", ["-D", data, "-o", options, "-l", path.join(dir, "log"), "-w", "-t", "30", "start"]);
  await exec("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-instructions"]);
  await start();
  let stopped = false;
  const pid = () => Number(readFileSync(path.join(data, "postmaster.pid"), "utf8").split("\n")[0]);
  const cluster: PgCluster = {
    port,
    dir,
    url: (db = "postgres") => `postgres://postgres@127.0.0.1:${port}/${db}`,
    async createDatabase(name) {
      const c = new pg.Client({ connectionString: cluster.url() });
      await c.connect();
      try {
        await c.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
      } finally {
        await c.end();
      }
      return cluster.url(name);
    },
    pid,
    async down() {
      await exec("pg_ctl", ["-D", data, "-m", "fast", "-w", "-t", "30", "stop"]);
    },
    async up() {
      await start();
    },
    async sql(db, text, values = []) {
      const c = new pg.Client({ connectionString: cluster.url(db) });
      await c.connect();
      try {
        return (await c.query(text, values)).rows;
      } finally {
        await c.end();
      }
    },
    async crashAndRestart() {
      const p = pid();
      // The postmaster and its children (backends, checkpointer, walwriter) all at once, as a
      // machine losing power would; a child left running holds the shared memory a restart needs.
      const family = [p, ...childrenOf(p)];
      for (const target of family) {
        try {
          process.kill(target, "SIGKILL");
        } catch {
          // already gone
        }
      }
      for (let i = 0; i < 400 && family.some(alive); i++) await new Promise((r) => setTimeout(r, 25));
      // A killed postmaster that nobody has reaped yet is a zombie its lock files still name,
      // and PostgreSQL takes a zombie for a live postmaster: the locks are stale, remove them.
      rmSync(path.join(data, "postmaster.pid"), { force: true });
      rmSync(path.join(dir, `.s.PGSQL.${port}.lock`), { force: true });
      await start().catch((err: Error) => {
        throw new Error(`${err.message}\n${readFileSync(path.join(dir, "log"), "utf8").split("\n").slice(-8).join("\n")}`);
      });
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      const p = existsSync(path.join(data, "postmaster.pid")) ? pid() : 0;
      await exec("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]).catch(() => {});
      for (let i = 0; i < 200 && p > 0 && alive(p); i++) await new Promise((r) => setTimeout(r, 25));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return cluster;
}

function childrenOf(parent: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === parent) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/** Whether `pid` is a live process (a zombie, exited but not yet reaped, is not). */
export function alive(pid: number): boolean {
  try {
    return !/^\S+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}
