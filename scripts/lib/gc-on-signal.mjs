// Preloaded into a daemon a bench measures (NODE_OPTIONS="--expose-gc
// --import=<this file>"): on SIGUSR2 a full garbage collection, then one line
// on stderr with the heap's figures, so the bench reads the process's RSS
// after a GC and knows how much of it is V8's live heap. Nothing else changes.
process.on("SIGUSR2", () => {
  globalThis.gc?.();
  globalThis.gc?.();
  const m = process.memoryUsage();
  const mib = (n) => (n / 1048576).toFixed(1);
  process.stderr.write(
    `gc-on-signal: done rss=${mib(m.rss)} heapUsed=${mib(m.heapUsed)} heapTotal=${mib(m.heapTotal)} external=${mib(m.external)} arrayBuffers=${mib(m.arrayBuffers)}\n`,
  );
});
