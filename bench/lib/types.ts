/** The runner ↔ scenario contract: what a scenario is given and what it hands back. */
import type { Timing } from './measure.js';

export interface Ctx {
  quick: boolean;
  /** Engine/replay loop timing for this mode. */
  timing: Timing;
  /** Whether the job with this id (e.g. `engine/1M/kernel`) was selected by the command-line filters. */
  want(id: string): boolean;
  /** One progress line (to stderr, so stdout stays the table). */
  progress(msg: string): void;
  /** The package root. */
  root: string;
}

/** How one metric column is shown. */
export interface Metric {
  key: string;
  /** Column header, with the unit. */
  label: string;
  /** Whether larger is better (throughput) or worse (latency, bytes): only for reading the ratios. */
  higherIsBetter: boolean;
  digits?: number;
}

/** One measured subject in one case: a row of a section's table. */
export interface Row {
  /** Job id, as matched by the filter. */
  id: string;
  /** e.g. "100k keys", "pipelining 10". */
  case: string;
  subject: string;
  /** Metric key → value. */
  values: Record<string, number>;
  /** Metric key → [min, max] over rounds, where there were rounds. */
  spread?: Record<string, [number, number]>;
  /** Filled by the runner: `${metric} / ${baseline label}` → value ÷ baseline's value (same case, same run). */
  ratios?: Record<string, number>;
  /** Free text shown in the last column (admitted share, evictions, errors…). */
  info?: string;
  /** Raw extra data kept in the JSON. */
  extra?: Record<string, unknown>;
}

/** One table: rows of several subjects over a few cases, each figure also given as a ratio to baselines. */
export interface Section {
  scenario: string;
  id: string;
  title: string;
  /** What the figures mean and how they were taken (one short paragraph). */
  method: string;
  metrics: Metric[];
  /** Ratios are computed against these subjects, in the same case. `label` heads the ratio column. */
  baselines: Array<{ label: string; subject: string }>;
  /** Metrics that get ratio columns (default: all). */
  ratioMetrics?: string[];
  rows: Row[];
  notes: string[];
}

export interface Scenario {
  name: string;
  /** One line for `--list`. */
  summary: string;
  run(ctx: Ctx): Promise<Section[]>;
}
