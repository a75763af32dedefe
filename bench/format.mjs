// format.mjs: the numbers of the bench's reports, as analyze.mjs, drain.mjs and
// custom_rows.mjs write them ("–" for a figure that is not there).

// The p-quantile (0..1) of an ascending array: the element at floor((n - 1) · p).
export const pct = (sorted, p) => (sorted.length ? sorted[Math.floor((sorted.length - 1) * p)] : null);
export const f0 = (x) => (x == null ? "–" : Math.round(x).toLocaleString("en-US"));
export const f1 = (x) =>
  x == null ? "–" : x.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
export const ms = (us) => (us == null ? "–" : (us / 1000).toFixed(2));
