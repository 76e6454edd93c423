// `npm run bench:pg-client`: the two well-kept PostgreSQL clients for Node,
// node-postgres (`pg`) and Postgres.js (`postgres`), on the writes and reads
// the server's store makes, against one throwaway cluster (loopback), in one
// process, rounds alternating the clients (A B A B ...) so a noisy machine
// slows both alike; each figure is the median over rounds.
//   ingest   one transaction per group of GROUP output events (bytea: the
//            validated zstd frames of log-like 64 KiB chunks) plus the
//            command row's update, as the group commit writes them
//   commit   p50 of a transaction of one small event and the command update
//            (what a lone `true` costs the store)
//   read     the stored frames back in pages of 64, in order (FollowOutput)
// Each client is used the fastest way its API offers: `pg` one multi-row
// INSERT per group, `postgres` the group's statements pipelined.
// Flags: --mib=N compressed bytes ingested per round (default 32), --rounds=N (5).
import pg from "pg";
import postgres from "postgres";
import { compress, initZstd } from "../shells/zstd/index.js";
import { startPgCluster } from "../test/support/pg-cluster.js";
import { logLikeChunks } from "./lib/log-text.js";

const args = process.argv.slice(2);
const flag = (name: string, dflt: number): number => Number(args.find((x) => x.startsWith(`--${name}=`))?.slice(name.length + 3) ?? dflt);
const MIB = flag("mib", 32);
const ROUNDS = flag("rounds", 5);
const GROUP = 8;
const SMALL = 500;
const SCHEMA = `DROP TABLE IF EXISTS ev; CREATE TABLE ev (uuid text NOT NULL, seq bigint NOT NULL, zstd bytea NOT NULL, PRIMARY KEY (uuid, seq));
 DROP TABLE IF EXISTS cmd; CREATE TABLE cmd (uuid text PRIMARY KEY, stored_through bigint NOT NULL); INSERT INTO cmd VALUES ('c', 0), ('s', 0);`;

interface Figures {
  ingest: number;
  commit: number;
  read: number;
}
interface Candidate {
  name: string;
  round(url: string, frames: Uint8Array[]): Promise<Figures>;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mibPerS = (bytes: number, ms: number): number => bytes / 1048576 / (ms / 1000);

const nodePostgres: Candidate = {
  name: "pg (node-postgres)",
  async round(url, frames) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query(SCHEMA);
    let t = performance.now();
    let bytes = 0;
    for (let seq = 1; seq <= frames.length; seq += GROUP) {
      const vals: unknown[] = [];
      const rows: string[] = [];
      for (let s = seq; s < seq + GROUP && s <= frames.length; s++) {
        rows.push(`('c', $${vals.length + 1}, $${vals.length + 2})`);
        vals.push(s, frames[s - 1]);
        bytes += frames[s - 1]!.length;
      }
      await c.query("BEGIN");
      await c.query(`INSERT INTO ev VALUES ${rows.join(",")}`, vals);
      await c.query("UPDATE cmd SET stored_through = $1 WHERE uuid = 'c'", [seq + rows.length - 1]);
      await c.query("COMMIT");
    }
    const ingest = mibPerS(bytes, performance.now() - t);
    const lat: number[] = [];
    for (let i = 1; i <= SMALL; i++) {
      const s = performance.now();
      await c.query("BEGIN");
      await c.query("INSERT INTO ev VALUES ('s', $1, $2)", [i, frames[0]!.subarray(0, 200)]);
      await c.query("UPDATE cmd SET stored_through = $1 WHERE uuid = 's'", [i]);
      await c.query("COMMIT");
      lat.push(performance.now() - s);
    }
    t = performance.now();
    let read = 0;
    for (let from = 1; from <= frames.length; from += 64) {
      // Text results (bytea as hex): pg-protocol reads every DataRow field into a UTF-8
      // string, binary ones too, so `binary: true` is slower here and not byte-exact.
      const r = await c.query<{ zstd: Buffer }>("SELECT zstd FROM ev WHERE uuid = 'c' AND seq >= $1 AND seq < $2 ORDER BY seq", [from, from + 64]);
      for (const row of r.rows) read += row.zstd.length;
    }
    const readRate = mibPerS(read, performance.now() - t);
    await c.end();
    return { ingest, commit: median(lat), read: readRate };
  },
};

const postgresJs: Candidate = {
  name: "postgres (Postgres.js)",
  async round(url, frames) {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    await sql.unsafe(SCHEMA);
    let t = performance.now();
    let bytes = 0;
    for (let seq = 1; seq <= frames.length; seq += GROUP) {
      await sql.begin((tx) => {
        const qs = [];
        let s = seq;
        for (; s < seq + GROUP && s <= frames.length; s++) {
          qs.push(tx`INSERT INTO ev VALUES ('c', ${s}, ${frames[s - 1]!})`);
          bytes += frames[s - 1]!.length;
        }
        qs.push(tx`UPDATE cmd SET stored_through = ${s - 1} WHERE uuid = 'c'`);
        return qs;
      });
    }
    const ingest = mibPerS(bytes, performance.now() - t);
    const lat: number[] = [];
    for (let i = 1; i <= SMALL; i++) {
      const s = performance.now();
      await sql.begin((tx) => [
        tx`INSERT INTO ev VALUES ('s', ${i}, ${frames[0]!.subarray(0, 200)})`,
        tx`UPDATE cmd SET stored_through = ${i} WHERE uuid = 's'`,
      ]);
      lat.push(performance.now() - s);
    }
    t = performance.now();
    let read = 0;
    for (let from = 1; from <= frames.length; from += 64) {
      const rows = await sql<{ zstd: Uint8Array }[]>`SELECT zstd FROM ev WHERE uuid = 'c' AND seq >= ${from} AND seq < ${from + 64} ORDER BY seq`;
      for (const row of rows) read += row.zstd.length;
    }
    const readRate = mibPerS(read, performance.now() - t);
    await sql.end();
    return { ingest, commit: median(lat), read: readRate };
  },
};

async function main(): Promise<void> {
  await initZstd();
  const frames: Uint8Array[] = [];
  const next = logLikeChunks();
  let text = new Uint8Array(0);
  for (let total = 0, offset = 0; total < MIB * 1048576; offset += 65536) {
    while (text.length < 65536) text = Buffer.concat([text, Buffer.from(next(offset))]);
    const f = compress(text.subarray(0, 65536), 3);
    text = text.subarray(65536);
    frames.push(f);
    total += f.length;
  }
  const cluster = await startPgCluster();
  try {
    const url = await cluster.createDatabase("bench");
    const candidates = [nodePostgres, postgresJs];
    const figures = new Map<Candidate, Figures[]>(candidates.map((c) => [c, []]));
    for (let r = 0; r < ROUNDS; r++) for (const c of candidates) figures.get(c)!.push(await c.round(url, frames));
    const med = (c: Candidate, k: keyof Figures) => median(figures.get(c)!.map((f) => f[k]));
    console.log(`${frames.length} frames, ${MIB} MiB compressed per round, groups of ${GROUP}, ${ROUNDS} rounds, medians`);
    console.log("client                     ingest MiB/s   commit p50 ms   read MiB/s");
    for (const c of candidates)
      console.log(
        `${c.name.padEnd(26)} ${med(c, "ingest").toFixed(0).padStart(12)} ${med(c, "commit").toFixed(3).padStart(15)} ${med(c, "read").toFixed(0).padStart(12)}`,
      );
    const [a, b] = candidates as [Candidate, Candidate];
    console.log(
      `ratio ${b.name} / ${a.name}: ingest ${(med(b, "ingest") / med(a, "ingest")).toFixed(2)}, commit ${(med(b, "commit") / med(a, "commit")).toFixed(2)}, read ${(med(b, "read") / med(a, "read")).toFixed(2)}`,
    );
  } finally {
    await cluster.stop();
  }
}

await main();
