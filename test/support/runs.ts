// Property-test run counts, scaled by RVBOX_PROPERTY_SCALE (default 1). The
// mutation run sets it low: each mutant re-runs every test that covers it.
export function runs(n: number): number {
  const scale = Number(process.env.RVBOX_PROPERTY_SCALE ?? 1);
  return Math.max(3, Math.round(n * (Number.isFinite(scale) && scale > 0 ? scale : 1)));
}
