/**
 * Regions: which region this instance is in, the region list, how a `scope: global` policy's limit is
 * split between regions, and the global Redis the reconciler reports to (src/engine/regions/). The same
 * rules serve the library option (`createLimiter({ region })`) and the file's `region:`, `globalRedis:` and
 * `regions:` keys (src/config/schema.ts), so both refuse the same inputs with the same reasons.
 *
 * ```yaml
 * region: eu                          # or --region / SLUICE_REGION
 * globalRedis: redis://global:6379    # or --global-redis / SLUICE_GLOBAL_REDIS; the reconciler's only
 * regions:
 *   names: [eu, us, ap]
 *   shares: adaptive                  # default; or fixed weights: { eu: 2, us: 1, ap: 1 }
 *   reconcileIntervalMs: 1000
 * ```
 */
import { configError } from '../util/errors.js';
import { describeValue } from './duration.js';
import type { CompiledLimit, CompiledPolicy } from './policy-spec.js';

/** The `region` option as written (library) or assembled from flags, environment and file (CLI). */
export interface RegionSpec {
  /** This instance's region: one of `names`. */
  name: string;
  /** Every region of the deployment (2 to 16 names of A-Z a-z 0-9 _ -), in one order on every instance. */
  names: string[];
  /**
   * `adaptive` (the default): every region starts with an equal share and the reconcilers move unused share
   * to the regions that run short. Or fixed positive integer weights, one per region: the shares never move.
   */
  shares?: 'adaptive' | Record<string, number>;
  /** How often the region's reconciler reports usage and moves share, in ms (50 to 3,600,000). Default 1000. */
  reconcileIntervalMs?: number;
  /**
   * The global Redis (`redis://host:port[/db]`), used by the reconciler only, never on a check. Without it a
   * region keeps its initial share forever (as when cut off).
   */
  globalRedis?: string;
  /** Most keys the reconciler watches (1 to 1,000,000; default 10,000): past it a new key is not watched (counted). */
  maxActiveKeys?: number;
}

/** A validated {@link RegionSpec}. */
export interface RegionSettings {
  name: string;
  names: readonly string[];
  adaptive: boolean;
  /** Weight per region name (adaptive: 1 each). */
  weights: Readonly<Record<string, number>>;
  reconcileIntervalMs: number;
  globalRedis: string | null;
  maxActiveKeys: number;
}

/** A share of one limit of a global policy: tokens per period and bucket capacity, both integers. */
export interface Share {
  limit: number;
  burst: number;
}

const NAME = /^[A-Za-z0-9_-]{1,32}$/;
const KEYS = ['name', 'names', 'shares', 'reconcileIntervalMs', 'globalRedis', 'maxActiveKeys'];
export const DEFAULT_RECONCILE_INTERVAL_MS = 1000;
export const DEFAULT_MAX_ACTIVE_KEYS = 10_000;

/**
 * Validates the region option.
 * @param where the prefix of error messages (`createLimiter`, or the file's name).
 * @param base the path of the list's fields in errors: `region` (the library option) or `regions` (the file).
 * @param nameField the path named when `name` is wrong (the file: `region`, or the flag that gave it).
 * @throws SluiceError CONFIG naming the field (`region.names`, `region.shares.eu`...).
 */
export function compileRegion(v: unknown, where = 'createLimiter', base = 'region', nameField = `${base}.name`): RegionSettings {
  const fail = (field: string, why: string): never => {
    const f = field.replace(/^region(?=\.|\[|$)/, base);
    // in the file, the name and the global Redis are top-level keys beside `regions:`
    throw configError(where, f === `${base}.name` ? nameField : base === 'regions' && f === 'regions.globalRedis' ? 'globalRedis' : f, why);
  };
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return fail('region', `must be an object (got ${describeValue(v)})`);
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!KEYS.includes(k)) fail(`region.${k}`, `unknown key (accepted: ${KEYS.join(', ')})`);
  if (!Array.isArray(o.names) || o.names.length < 2 || o.names.length > 16) {
    fail('region.names', `must list 2 to 16 region names (got ${describeValue(o.names)})`);
  }
  const names = o.names as unknown[];
  names.forEach((n, i) => {
    if (typeof n !== 'string' || !NAME.test(n)) fail(`region.names[${i}]`, `must be 1 to 32 characters of A-Z a-z 0-9 _ - (got ${describeValue(n)})`);
    if (names.indexOf(n) !== i) fail(`region.names[${i}]`, `${describeValue(n)} is listed twice`);
  });
  if (typeof o.name !== 'string' || !names.includes(o.name)) {
    fail('region.name', `must be one of the region names ${names.join(', ')} (got ${describeValue(o.name)})`);
  }
  const shares = o.shares ?? 'adaptive';
  const weights: Record<string, number> = {};
  if (shares === 'adaptive') {
    for (const n of names as string[]) weights[n] = 1;
  } else if (typeof shares === 'object' && shares !== null && !Array.isArray(shares)) {
    const w = shares as Record<string, unknown>;
    for (const k of Object.keys(w)) if (!names.includes(k)) fail(`region.shares.${k}`, `is not a region name (names: ${names.join(', ')})`);
    for (const n of names as string[]) {
      const x = w[n];
      if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 1 || x > 1_000_000) {
        fail(`region.shares.${n}`, `must be a weight from 1 to 1000000 for every region (got ${describeValue(x)})`);
      }
      weights[n] = x as number;
    }
  } else {
    fail('region.shares', `must be "adaptive" or a mapping of region names to weights (got ${describeValue(shares)})`);
  }
  const interval = o.reconcileIntervalMs ?? DEFAULT_RECONCILE_INTERVAL_MS;
  if (typeof interval !== 'number' || !Number.isInteger(interval) || interval < 50 || interval > 3_600_000) {
    fail('region.reconcileIntervalMs', `must be an integer of ms from 50 to 3600000 (got ${describeValue(interval)})`);
  }
  const g = o.globalRedis;
  if (g !== undefined && (typeof g !== 'string' || !/^rediss?:\/\/\S+$/.test(g))) {
    fail('region.globalRedis', `must be a redis:// or rediss:// URL (got ${describeValue(g)})`);
  }
  const maxActive = o.maxActiveKeys ?? DEFAULT_MAX_ACTIVE_KEYS;
  if (typeof maxActive !== 'number' || !Number.isInteger(maxActive) || maxActive < 1 || maxActive > 1_000_000) {
    fail('region.maxActiveKeys', `must be an integer from 1 to 1000000 (got ${describeValue(maxActive)})`);
  }
  return Object.freeze({
    name: o.name as string,
    names: Object.freeze([...(names as string[])]),
    adaptive: shares === 'adaptive',
    weights: Object.freeze(weights),
    reconcileIntervalMs: interval as number,
    globalRedis: (g as string | undefined) ?? null,
    maxActiveKeys: maxActive as number,
  });
}

/**
 * A region's initial share of a limit: its weight's part of the limit and of the burst, rounded down (so the
 * shares of all regions never add up to more than the limit; the rounding remainder starts in the global
 * pool). Also what the lease script uses for a key whose share hash is absent.
 */
export function regionDefaultShare(limit: Pick<CompiledLimit, 'limit' | 'burst'>, region: RegionSettings, name = region.name): Share {
  const total = region.names.reduce((a, n) => a + region.weights[n], 0);
  const w = BigInt(region.weights[name]);
  const part = (x: number): number => Number((BigInt(x) * w) / BigInt(total));
  return { limit: part(limit.limit), burst: part(limit.burst) };
}

/**
 * The region option of `sluice serve`: `--region` / SLUICE_REGION / the file's `region:`, `--global-redis` /
 * SLUICE_GLOBAL_REDIS / `globalRedis:`, with the file's `regions:` list; null when no region is named.
 * @throws SluiceError CONFIG naming the flag or field: a region without `regions.names`, a name not listed.
 */
export function regionFromSources(flags: { region?: string; globalRedis?: string }, env: NodeJS.ProcessEnv,
  file: { region?: string; globalRedis?: string; regions?: Record<string, unknown> }, where: string): RegionSettings | null {
  const flagName = flags.region !== undefined ? '--region' : env.SLUICE_REGION ? 'SLUICE_REGION' : 'region';
  const name = flags.region ?? (env.SLUICE_REGION || undefined) ?? file.region;
  const globalRedis = flags.globalRedis ?? (env.SLUICE_GLOBAL_REDIS || undefined) ?? file.globalRedis;
  if (name === undefined) {
    if (globalRedis !== undefined) throw configError(where, flags.globalRedis !== undefined ? '--global-redis' : 'globalRedis', 'needs a region: give --region NAME (or SLUICE_REGION, or region: in the file)');
    if (file.regions !== undefined) throw configError(where, 'regions', 'needs a region: give --region NAME (or SLUICE_REGION, or region: in the file)');
    return null;
  }
  if (file.regions === undefined) throw configError(where, flagName, 'needs regions.names in the policies file: the list of every region');
  return compileRegion({ ...file.regions, name, ...(globalRedis === undefined ? {} : { globalRedis }) }, where, 'regions', flagName);
}

/** The option that compiles to `r` (what `sluice serve` hands createLimiter). */
export function regionSpec(r: RegionSettings): RegionSpec {
  return {
    name: r.name, names: [...r.names], shares: r.adaptive ? 'adaptive' : { ...r.weights },
    reconcileIntervalMs: r.reconcileIntervalMs, maxActiveKeys: r.maxActiveKeys,
    ...(r.globalRedis === null ? {} : { globalRedis: r.globalRedis }),
  };
}

/** Refuses `scope: global` policies on a limiter without regions, naming the field. */
export function checkScopes(policies: ReadonlyMap<string, CompiledPolicy>, region: RegionSettings | null): void {
  if (region !== null) return;
  for (const p of policies.values()) {
    if (p.scope === 'global') {
      throw configError(`policy "${p.name}"`, 'scope', 'is global, but this limiter has no region: give the region option (sluice serve --region NAME with regions.names)');
    }
  }
}
