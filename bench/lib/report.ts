/** Ratios and tables: every figure next to its ratio to a baseline measured in the same run. */
import type { Row, Section } from './types.js';

/** Fills `row.ratios` for every row: value ÷ the baseline subject's value for the same case and metric. */
export function computeRatios(s: Section): void {
  const ratioMetrics = s.ratioMetrics ?? s.metrics.map((m) => m.key);
  for (const row of s.rows) {
    row.ratios = {};
    for (const b of s.baselines) {
      const base = s.rows.find((r) => r.case === row.case && r.subject === b.subject);
      for (const m of ratioMetrics) {
        const v = row.values[m];
        const bv = base?.values[m];
        if (v !== undefined && bv !== undefined && Number.isFinite(v) && Number.isFinite(bv) && bv !== 0) {
          row.ratios[`${m} / ${b.label}`] = v / bv;
        }
      }
    }
  }
}

/** 3 significant digits with k/M/G for large numbers: 1.23 M, 845 k, 12.3. */
export function fmtNum(v: number | undefined, digits = 3): string {
  if (v === undefined || !Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1e9) return `${sig(v / 1e9, digits)} G`;
  if (a >= 1e6) return `${sig(v / 1e6, digits)} M`;
  if (a >= 1e4) return `${sig(v / 1e3, digits)} k`;
  return sig(v, digits);
}

function sig(v: number, digits: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  const decimals = Math.max(0, digits - 1 - Math.floor(Math.log10(a)));
  return v.toFixed(Math.min(decimals, 3));
}

export function fmtRatio(r: number | undefined): string {
  if (r === undefined || !Number.isFinite(r)) return '–';
  if (r >= 100) return `${r.toFixed(0)}×`;
  if (r >= 10) return `${r.toFixed(1)}×`;
  return `${r.toFixed(2)}×`;
}

/** The section as a list of table rows (header first), cells as strings. */
function cells(s: Section): string[][] {
  const ratioMetrics = new Set(s.ratioMetrics ?? s.metrics.map((m) => m.key));
  const head = ['case', 'subject'];
  for (const m of s.metrics) {
    head.push(m.label);
    if (ratioMetrics.has(m.key)) for (const b of s.baselines) head.push(`÷ ${b.label}`);
  }
  head.push('notes');
  const out = [head];
  for (const r of s.rows) {
    const line = [r.case, r.subject];
    for (const m of s.metrics) {
      const spread = r.spread?.[m.key];
      line.push(fmtNum(r.values[m.key], m.digits) + (spread ? ` (${fmtNum(spread[0], 2)}–${fmtNum(spread[1], 2)})` : ''));
      if (ratioMetrics.has(m.key)) for (const b of s.baselines) line.push(fmtRatio(r.ratios?.[`${m.key} / ${b.label}`]));
    }
    line.push(r.info ?? '');
    out.push(line);
  }
  return out;
}

/** A Markdown table, columns padded so it also reads as plain text. */
export function table(s: Section): string {
  const rows = cells(s);
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  const fmt = (r: string[]): string => `| ${r.map((x, c) => x.padEnd(widths[c])).join(' | ')} |`;
  return [fmt(rows[0]), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.slice(1).map(fmt)].join('\n');
}

export interface RunMeta {
  date: string;
  mode: 'quick' | 'full';
  filters: string[];
  node: string;
  v8: string;
  platform: string;
  cpus: string;
  cores: number;
  loadavgStart: number[];
  loadavgEnd?: number[];
  /** CPU steal over the run, % of the host's CPU time (bench/lib/host.ts); null where it is not known. */
  stealPercent?: number | null;
  durationMs?: number;
  wrk: string | null;
  commit: string | null;
}

export function markdown(meta: RunMeta, sections: Section[], targets?: string): string {
  const lines: string[] = [
    `# sluice bench: ${meta.date} (${meta.mode})`,
    '',
    `Node ${meta.node} (V8 ${meta.v8}), ${meta.platform}, ${meta.cores} × ${meta.cpus}; ` +
      `load average at start ${meta.loadavgStart.map((l) => l.toFixed(2)).join(' ')}` +
      (meta.loadavgEnd ? `, at end ${meta.loadavgEnd.map((l) => l.toFixed(2)).join(' ')}` : '') +
      (meta.stealPercent != null ? `; CPU steal ${meta.stealPercent.toFixed(1)} % of the run's CPU time` : '') +
      `; commit ${meta.commit ?? 'unknown'}; wrk ${meta.wrk ?? 'not installed'}` +
      (meta.filters.length > 0 ? `; filters: ${meta.filters.join(' ')}` : '') +
      (meta.durationMs !== undefined ? `; took ${(meta.durationMs / 1000).toFixed(0)} s` : '') + '.',
    '',
    'Each ratio is the row\'s figure divided by the named baseline\'s figure for the same case, measured in this ' +
      'run. For throughput above 1× is better; for latency, CPU and bytes below 1× is better. Ranges in ' +
      'parentheses are the slowest and fastest rounds. See bench/README.md for what each row measures.',
  ];
  if (targets) lines.push('', '## Targets', '', targets);
  for (const s of sections) {
    lines.push('', `## ${s.title}`, '', s.method);
    if (s.rows.length > 0) lines.push('', table(s));
    for (const n of s.notes) lines.push('', `- ${n}`);
  }
  return lines.join('\n') + '\n';
}
