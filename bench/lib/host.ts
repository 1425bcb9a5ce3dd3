/**
 * The host's CPU time as Linux counts it in /proc/stat (its first line: every CPU together, in clock ticks),
 * so a run can say how much of it the hypervisor gave to other guests. Steal is the time a virtual CPU was
 * ready to run and was not run; on a shared host it comes and goes within minutes, and a figure that depends
 * on two processes handing work back and forth (a Redis round trip) drops with it.
 */
import { readFileSync } from 'node:fs';

/** Clock ticks since boot: all CPU time (every state), and the steal among it. */
export interface CpuTicks {
  total: number;
  steal: number;
}

/** The host's ticks now, or null where /proc/stat cannot be read (not Linux). */
export function cpuTicks(): CpuTicks | null {
  let line: string;
  try {
    line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0];
  } catch {
    return null;
  }
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice (guest time is inside user)
  const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
  if (f.length < 8 || f.some((x) => !Number.isFinite(x))) return null;
  return { total: f.reduce((a, x) => a + x, 0), steal: f[7] };
}

/** Steal between two readings, as a % of all CPU time then (null: unknown, or no time passed). */
export function stealPercent(a: CpuTicks | null, b: CpuTicks | null): number | null {
  if (a === null || b === null || b.total <= a.total) return null;
  return (100 * (b.steal - a.steal)) / (b.total - a.total);
}
