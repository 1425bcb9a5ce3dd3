/**
 * Progress of a long `sluice replay` on stderr: one line, rewritten in place, with the rows done, the rate
 * and the time left. Shown only on a terminal and only once a replay has run for a while, so short runs, pipes
 * and logs stay clean; `--quiet` turns it off.
 */

/** Where a replay is: which pass (one per policy) over how many, rows done in this pass, bytes read of it. */
export interface ReplayProgress {
  policy: string;
  /** 1-based pass number; each policy is one pass over the trace. */
  pass: number;
  passes: number;
  /** Rows decided in this pass. */
  rows: number;
  /** Bytes of the trace read in this pass. */
  bytes: number;
}

export interface ProgressLineOptions {
  /** Writes to the terminal (process.stderr.write). */
  write: (s: string) => void;
  /** Size of the trace in bytes (each pass reads it whole); 0 when unknown: no ETA. */
  totalBytes: number;
  /** Milliseconds clock. Default performance.now. */
  now?: () => number;
  /** Nothing is shown before this many ms. Default 1000. */
  delayMs?: number;
  /** At most one line per this many ms. Default 250. */
  intervalMs?: number;
}

/** A progress line printer: feed it {@link ReplayProgress} as often as you like; call end() when done. */
export class ProgressLine {
  private readonly now: () => number;
  private readonly start: number;
  private last = -Infinity;
  private shown = false;
  private pass = 0;
  private passStart = 0;

  constructor(private readonly o: ProgressLineOptions) {
    this.now = o.now ?? (() => performance.now());
    this.start = this.now();
  }

  update(p: ReplayProgress): void {
    const t = this.now();
    if (p.pass !== this.pass) {
      this.pass = p.pass;
      this.passStart = t;
    }
    const elapsed = t - this.start;
    if (elapsed < (this.o.delayMs ?? 1000) || t - this.last < (this.o.intervalMs ?? 250)) return;
    this.last = t;
    this.shown = true;
    this.o.write(`\r${formatProgress(p, t - this.passStart, elapsed, this.o.totalBytes)}\x1b[K`);
  }

  /** Clears the line if one was shown. */
  end(): void {
    if (this.shown) this.o.write('\r\x1b[K');
    this.shown = false;
  }
}

/**
 * `replay per-client (1/2): 1,200,000 rows, 310,000 rows/s, ETA 4 s`: rows and rate of this pass
 * (`passMs` since it began); the ETA from the share of all passes' bytes read in `elapsedMs`.
 */
export function formatProgress(p: ReplayProgress, passMs: number, elapsedMs: number, totalBytes: number): string {
  const n = (x: number): string => Math.round(x).toLocaleString('en-US');
  const passes = p.passes > 1 ? ` (${p.pass}/${p.passes})` : '';
  let line = `replay ${p.policy}${passes}: ${n(p.rows)} rows`;
  if (passMs > 0) line += `, ${n((p.rows * 1000) / passMs)} rows/s`;
  const done = totalBytes > 0 ? (p.pass - 1 + Math.min(1, p.bytes / totalBytes)) / p.passes : 0;
  if (done > 0) line += `, ETA ${n((elapsedMs * (1 - done)) / done / 1000)} s`;
  return line;
}
