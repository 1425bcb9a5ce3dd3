/**
 * The issues' targets (#6; HTTP: #17), checked against the rows of this run: each line says the figure, the ratio it is judged
 * by, and by how much it is met or missed. Only rows measured in this run count; a target whose rows are
 * missing (filtered out, failed) says so.
 */
import type { Row, Section } from './types.js';

export interface TargetLine {
  target: string;
  measured: string;
  verdict: string;
}

function find(sections: Section[], id: string): Row | undefined {
  for (const s of sections) for (const r of s.rows) if (r.id === id) return r;
  return undefined;
}

const x = (v: number): string => (v >= 10 ? `${v.toFixed(1)}×` : `${v.toFixed(2)}×`);

/** "met" or "missed by N%" for a value that must be ≥ goal (or ≤ goal with `atMost`). */
function verdict(v: number, goal: number, atMost = false): string {
  const ok = atMost ? v <= goal : v >= goal;
  if (ok) return 'met';
  const by = atMost ? (v / goal - 1) * 100 : (1 - v / goal) * 100;
  return `missed by ${by.toFixed(0)}%`;
}

export function checkTargets(sections: Section[]): TargetLine[] {
  const out: TargetLine[] = [];
  const ratio = (id: string, base: string, metric: string): number | undefined => {
    const a = find(sections, id), b = find(sections, base);
    const va = a?.values[metric], vb = b?.values[metric];
    return va !== undefined && vb !== undefined && vb !== 0 ? va / vb : undefined;
  };
  const add = (target: string, v: number | undefined, goal: number, measured: (v: number) => string, atMost = false): void => {
    out.push(v === undefined || !Number.isFinite(v)
      ? { target, measured: 'not measured in this run', verdict: '–' }
      : { target, measured: measured(v), verdict: verdict(v, goal, atMost) });
  };

  add('Engine, batch path ≥ 20× rlf at 1 M keys', ratio('engine/1M/kernel', 'engine/1M/rlf', 'rate'), 20,
    (v) => `raw kernel ${x(v)} rlf`);
  add('Engine, single check() ≥ 3× rlf at 1 M keys', ratio('engine/1M/limiter-s0', 'engine/1M/rlf', 'rate'), 3,
    (v) => `createLimiter shards 0 ${x(v)} rlf`);
  // issue #17
  add('Engine, check() ≥ 3× rlf on one hot key', ratio('engine/1key/limiter-s0', 'engine/1key/rlf', 'rate'), 3,
    (v) => `createLimiter shards 0 ${x(v)} rlf`);
  add('Engine, checkSync() ≥ 10× rlf on one hot key', ratio('engine/1key/limiter-sync', 'engine/1key/rlf', 'rate'), 10,
    (v) => `checkSync shards 0 ${x(v)} rlf`);
  add('Engine, raw kernel ≥ 1× the Map bucket on one hot key', ratio('engine/1key/kernel', 'engine/1key/map', 'rate'), 1,
    (v) => `raw kernel ${x(v)} Map`);
  add('Engine, ≤ 40 bytes per key', find(sections, 'engine/memory/kernel')?.values.bytesPerKey, 40,
    (v) => `${v.toFixed(1)} B/key`, true);

  // issue #17's HTTP targets, for 10k keys and for one hot key
  for (const [w, label] of [['http/wrk-10k', '10k keys'], ['http/wrk-hot', '1 hot key']]) {
    add(`HTTP (wrk, ${label}), ≥ 0.92× bare uWS req/s`, ratio(`${w}/sluice-s0`, `${w}/bare-uws`, 'rps'), 0.92, (v) => `sluice shards 0 ${x(v)}`);
    add(`HTTP (wrk, ${label}), server CPU/req ≤ 1.15× bare uWS`, ratio(`${w}/sluice-s0`, `${w}/bare-uws`, 'cpu'), 1.15, (v) => `${x(v)}`, true);
    add(`HTTP (wrk, ${label}), ≥ 1.5× uWS + rlf req/s`, ratio(`${w}/sluice-s0`, `${w}/uws-rlf`, 'rps'), 1.5, (v) => `${x(v)}`);
  }
  for (const [k, label] of [['10k', '10k keys'], ['hot', '1 hot key']]) {
    const bare = find(sections, `http/co-${k}/bare-uws`)?.values.p99;
    add(`HTTP p99 ≤ 1 ms at half of sluice's peak, corrected (${label})`, find(sections, `http/co-${k}/sluice-s0`)?.values.p99, 1,
      (v) => `${v.toFixed(3)} ms (bare uWS ${bare === undefined ? '–' : bare.toFixed(3)} ms)`, true);
  }
  const w = 'http/wrk-10k';
  add('HTTP (wrk), ≥ 2× node:http + rlf req/s', ratio(`${w}/sluice-s0`, `${w}/node-rlf`, 'rps'), 2, (v) => `${x(v)}`);

  for (const c of [64, 256]) {
    const r = ratio(`redis/c${c}/strict`, `redis/c${c}/rlf`, 'rate');
    const p = ratio(`redis/c${c}/strict`, `redis/c${c}/rlf`, 'p99');
    const target = `Redis strict ≥ 2× rlf RateLimiterRedis at ≤ its p99 (${c} in flight)`;
    if (r === undefined || p === undefined) out.push({ target, measured: 'not measured in this run', verdict: '–' });
    else {
      const v = [r >= 2 ? null : `throughput missed by ${((1 - r / 2) * 100).toFixed(0)}%`, p <= 1 ? null : `p99 ${((p - 1) * 100).toFixed(0)}% higher`]
        .filter((s) => s !== null);
      out.push({ target, measured: `${x(r)} the decisions/s at ${x(p)} the p99`, verdict: v.length === 0 ? 'met' : v.join(', ') });
    }
  }
  add('WebSocket binary, one connection, ≥ 1 M decisions/s', find(sections, 'ws/1conn/sluice-binary')?.values.rate, 1e6,
    (v) => `${(v / 1e6).toFixed(3)} M/s = ${x(v / 1e6)} the target`);
  // issue #17
  add('WebSocket binary, one connection, ≥ 3 M decisions/s', find(sections, 'ws/1conn/sluice-binary')?.values.rate, 3e6,
    (v) => `${(v / 1e6).toFixed(3)} M/s = ${x(v / 3e6)} the target`);
  add('WebSocket JSON, one connection, ≥ 400 k decisions/s', find(sections, 'ws/1conn/sluice-json')?.values.rate, 4e5,
    (v) => `${(v / 1e3).toFixed(0)} k/s = ${x(v / 4e5)} the target`);
  return out;
}

export function targetsMarkdown(lines: TargetLine[]): string {
  const rows = [['target (issues #6, #13, #17)', 'measured in this run', 'verdict'], ...lines.map((l) => [l.target, l.measured, l.verdict])];
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  const fmt = (r: string[]): string => `| ${r.map((v, c) => v.padEnd(widths[c])).join(' | ')} |`;
  return [fmt(rows[0]), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.slice(1).map(fmt)].join('\n');
}
