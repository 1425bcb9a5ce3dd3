import type { LimitState } from '../../types/keys.js';
import type { CompiledLimit } from '../../config/policy-spec.js';

/**
 * One leased limit's state as inspect reports it, from its lease HASH (lua/lease.lua's fields) at `now`,
 * brought up to `now` as the script would (refill capped by the outstanding tokens; windows rolled), and
 * what this instance holds. Changes nothing.
 */
export function leaseLimitState(l: CompiledLimit, h: Record<string, string>, now: number,
  here: { leaseId: string; held: number; unreported: number } | null): LimitState {
  const L = l.limit, P = l.periodMs, B = l.burst;
  const held = h.x !== undefined;
  const x = Number(h.x ?? 0), t = Number(h.t ?? now), o = Number(h.o ?? 0), k = Number(h.k ?? 0), p = Number(h.p ?? 0);
  const leases: Array<{ id: string; count: number; expiresAt: number }> = [];
  for (const [f, v] of Object.entries(h)) {
    if (!f.startsWith('n:')) continue;
    const [count, expiresAt] = v.split(' ').map(Number);
    // an expired lease counts as all used until a lease call removes it: it is still outstanding here
    leases.push({ id: f.slice(2), count, expiresAt });
  }
  const s: LimitState = {
    name: l.name, algorithm: l.algorithm as LimitState['algorithm'], limit: L, burst: B, periodMs: P, held, lastUpdateMs: held ? t : null,
    remaining: 0, resetAfterMs: 0, lease: { outstanding: o, leases, here },
  };
  if (l.algorithmCode <= 1) {
    const cap = Math.max(0, (B - o) * P);
    const level = !held ? B * P : Math.min(cap, x + Math.max(0, now - t) * L);
    s.tokens = Math.floor(level / P);
    s.remaining = s.tokens;
    s.resetAfterMs = L > 0 ? Math.max(0, Math.ceil((B * P - level - o * P) / L)) : 0;
  } else {
    const kk = Math.floor(now / P);
    const cur = held && k === kk ? x : 0;
    const prev = held ? (k === kk ? p : k + 1 === kk ? x : 0) : 0;
    s.count = cur;
    if (l.algorithm === 'sliding_window') s.previousCount = prev;
    const e = now - kk * P;
    s.remaining = Math.max(0, L - cur - (l.algorithm === 'sliding_window' ? Math.ceil(prev * (P - e) / P) : 0));
    s.resetAfterMs = (kk + 1) * P - now;
  }
  return s;
}
