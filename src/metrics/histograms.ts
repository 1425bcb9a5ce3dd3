/**
 * Label-less Prometheus histograms that prom-client renders as it renders its own (registered with
 * `registry.registerMetric`): `_bucket{le=...}` (cumulative, `+Inf` last), `_sum`, `_count`, in seconds.
 */

/** One rendered sample, as prom-client's `get()` hands them to its registry. */
export interface HistogramValue {
  labels: Record<string, string | number>;
  value: number;
  metricName: string;
}

/** What prom-client reads from a metric it renders. */
export interface HistogramMetric {
  name: string;
  help: string;
  type: string;
  aggregator: string;
  values: HistogramValue[];
}

/**
 * The samples of histogram `name` with upper bounds `bounds` (seconds) and `counts` per bucket (`+Inf` last,
 * so `bounds.length + 1` of them): the cumulative buckets, then the sum and the count (`n`, or the buckets'
 * total when omitted).
 */
function histogramValues(name: string, bounds: readonly number[], counts: ArrayLike<number>, sum: number, n?: number): HistogramValue[] {
  const values: HistogramValue[] = [];
  let cumulative = 0;
  for (let i = 0; i <= bounds.length; i++) {
    cumulative += counts[i];
    values.push({ labels: { le: i < bounds.length ? bounds[i] : '+Inf' }, value: cumulative, metricName: `${name}_bucket` });
  }
  values.push({ labels: {}, value: sum, metricName: `${name}_sum` });
  values.push({ labels: {}, value: n ?? cumulative, metricName: `${name}_count` });
  return values;
}

/**
 * A histogram that costs a few nanoseconds per observation (prom-client's costs about 500 ns: a label hash per
 * call): the decision latency, observed once per check.
 */
export class LatencyHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly counts: Float64Array;
  private sum = 0;
  private n = 0;

  /** @param bounds the buckets' upper bounds, in seconds, ascending */
  constructor(readonly name: string, readonly help: string, private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  /** One observation, in seconds. */
  observe(seconds: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && seconds > b[i]) i++;
    this.counts[i]++;
    this.sum += seconds;
    this.n++;
  }

  /** `n` observations of the same value, in seconds (none when `n` <= 0). */
  observeMany(seconds: number, n: number): void {
    if (n <= 0) return;
    const b = this.bounds;
    let i = 0;
    while (i < b.length && seconds > b[i]) i++;
    this.counts[i] += n;
    this.sum += seconds * n;
    this.n += n;
  }

  /** Forgets every observation. */
  reset(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.n = 0;
  }

  /** The samples as prom-client renders them (called once per scrape). */
  async get(): Promise<HistogramMetric> {
    const values = histogramValues(this.name, this.bounds, this.counts, this.sum, this.n);
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

/**
 * A histogram rendered from a snapshot another component keeps (the store's call latency): bucket bounds
 * (seconds), counts (`+Inf` last) and the sum in seconds; `read` giving undefined renders no samples.
 */
export class SnapshotHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly read: () => { bounds: readonly number[]; counts: number[]; sumSeconds: number } | undefined,
  ) {}

  /** The samples of the snapshot read now, as prom-client renders them (called once per scrape). */
  async get(): Promise<HistogramMetric> {
    const snap = this.read();
    const values = snap === undefined ? [] : histogramValues(this.name, snap.bounds, snap.counts, snap.sumSeconds);
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}
