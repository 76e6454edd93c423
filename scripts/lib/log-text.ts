/**
 * Log-like text for the benchmarks (throughput, zstd): deterministic (a
 * seeded xorshift), about as compressible as a web server's access log.
 * `next(offset)` gives the next chunk of 500 lines; `offset` (bytes produced
 * so far) sets their timestamps, so every caller produces the same bytes.
 */
export function logLikeChunks(): (offset: number) => string {
  let x = 0x9e3779b9;
  const rnd = (): number => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x >>> 0;
  };
  const levels = ["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"];
  const paths = ["/api/v1/items", "/api/v1/users", "/healthz", "/api/v1/orders", "/static/app.js"];
  return (offset) => {
    let s = "";
    for (let i = 0; i < 500; i++) {
      const t = 1_764_500_000_000 + offset;
      s += `${new Date(t).toISOString()} ${levels[rnd() % 6]} worker-${rnd() % 16} req=${rnd().toString(16).padStart(8, "0")} ${paths[rnd() % 5]}/${rnd() % 100000} status=${[200, 200, 200, 404, 500][rnd() % 5]} bytes=${rnd() % 50000} dur_ms=${(rnd() % 100000) / 100}\n`;
    }
    return s;
  };
}
