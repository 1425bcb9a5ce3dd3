import { describe, expect, it } from 'vitest';
import { compileRegion, regionDefaultShare, regionFromSources, regionSpec, checkScopes } from '../../../src/config/regions.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { parseConfig } from '../../../src/config/load.js';
import { createLimiter } from '../../../src/limiter.js';
import { isSluiceError, type SluiceError } from '../../../src/util/errors.js';

function error(f: () => unknown): SluiceError {
  try {
    f();
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    return e as SluiceError;
  }
  throw new Error('expected an error');
}

const NAMES = ['eu', 'us', 'ap'];
const LEASE = { algorithm: 'token_bucket', limit: 1000, period: '1m', consistency: 'lease' } as const;

describe('region option', () => {
  it('compiles with the defaults: adaptive, equal weights, 1 s rounds, 10,000 keys watched', () => {
    expect(compileRegion({ name: 'us', names: NAMES })).toEqual({
      name: 'us', names: NAMES, adaptive: true, weights: { eu: 1, us: 1, ap: 1 }, reconcileIntervalMs: 1000,
      globalRedis: null, maxActiveKeys: 10_000,
    });
    const fixed = compileRegion({ name: 'eu', names: NAMES, shares: { eu: 2, us: 1, ap: 1 }, globalRedis: 'redis://g:6379' });
    expect(fixed).toMatchObject({ adaptive: false, weights: { eu: 2, us: 1, ap: 1 }, globalRedis: 'redis://g:6379' });
    expect(compileRegion(regionSpec(fixed))).toEqual(fixed);
  });

  it('splits a limit by weight, rounding down, so the shares never add up to more than the limit', () => {
    const r = compileRegion({ name: 'eu', names: NAMES, shares: { eu: 2, us: 1, ap: 1 } });
    const parts = NAMES.map((n) => regionDefaultShare({ limit: 1001, burst: 7 }, r, n));
    expect(parts).toEqual([{ limit: 500, burst: 3 }, { limit: 250, burst: 1 }, { limit: 250, burst: 1 }]);
    const eq = compileRegion({ name: 'eu', names: NAMES });
    expect(regionDefaultShare({ limit: 2 ** 53 - 1, burst: 2 }, eq)).toEqual({ limit: 3002399751580330, burst: 0 });
  });

  it.each([
    [{ names: NAMES }, 'region.name', 'must be one of the region names eu, us, ap (got undefined)'],
    [{ name: 'xx', names: NAMES }, 'region.name', 'must be one of the region names eu, us, ap (got "xx")'],
    [{ name: 'eu', names: ['eu'] }, 'region.names', 'must list 2 to 16 region names'],
    [{ name: 'eu', names: ['eu', 'eu'] }, 'region.names[1]', '"eu" is listed twice'],
    [{ name: 'eu', names: ['eu', 'u s'] }, 'region.names[1]', 'must be 1 to 32 characters of A-Z a-z 0-9 _ -'],
    [{ name: 'eu', names: NAMES, shares: 'equal' }, 'region.shares', 'must be "adaptive" or a mapping'],
    [{ name: 'eu', names: NAMES, shares: { eu: 1, us: 1 } }, 'region.shares.ap', 'must be a weight from 1 to 1000000 for every region (got undefined)'],
    [{ name: 'eu', names: NAMES, shares: { eu: 1, us: 1, ap: 1, mars: 1 } }, 'region.shares.mars', 'is not a region name'],
    [{ name: 'eu', names: NAMES, shares: { eu: 0.5, us: 1, ap: 1 } }, 'region.shares.eu', 'must be a weight'],
    [{ name: 'eu', names: NAMES, reconcileIntervalMs: 10 }, 'region.reconcileIntervalMs', 'must be an integer of ms from 50 to 3600000 (got 10)'],
    [{ name: 'eu', names: NAMES, globalRedis: 'g:6379' }, 'region.globalRedis', 'must be a redis:// or rediss:// URL'],
    [{ name: 'eu', names: NAMES, maxActiveKeys: 0 }, 'region.maxActiveKeys', 'must be an integer from 1 to 1000000'],
    [{ name: 'eu', names: NAMES, colour: 'red' }, 'region.colour', 'unknown key'],
  ])('refuses %j naming the field', (spec, field, why) => {
    const e = error(() => compileRegion(spec));
    expect(e.field).toBe(field);
    expect(e.message).toContain(`createLimiter: ${field}: ${why}`);
  });
});

describe('scope: global', () => {
  it('is a lease policy of token_bucket or gcra; refused elsewhere, naming the field', () => {
    expect(compilePolicies({ api: { ...LEASE, scope: 'global' } }).get('api')!.scope).toBe('global');
    expect(compilePolicies({ api: { ...LEASE, algorithm: 'gcra', scope: 'global' } }).get('api')!.scope).toBe('global');
    expect(compilePolicies({ api: LEASE }).get('api')!.scope).toBe('local');
    const strict = error(() => compilePolicies({ api: { ...LEASE, consistency: 'strict', scope: 'global' } }));
    expect(strict.message).toBe('policy "api": scope: global applies to consistency lease only (got consistency strict): a region decides from its share through leases');
    expect(strict.field).toBe('scope');
    const win = error(() => compilePolicies({ api: { ...LEASE, algorithm: 'fixed_window', scope: 'global' } }));
    expect(win.message).toContain('policy "api": scope: global works for token_bucket and gcra only (got fixed_window)');
    expect(error(() => compilePolicies({ api: { ...LEASE, scope: 'planet' } })).field).toBe('scope');
  });

  it('changes the policy set version only when global', () => {
    const a = compilePolicies({ api: LEASE }).get('api')!;
    const b = compilePolicies({ api: { ...LEASE, scope: 'local' } }).get('api')!;
    expect(b).toEqual(a);
  });

  it('needs a region on the limiter', async () => {
    const policies = compilePolicies({ api: { ...LEASE, scope: 'global' } });
    const e = error(() => checkScopes(policies, null));
    expect(e.message).toBe('policy "api": scope: is global, but this limiter has no region: give the region option (sluice serve --region NAME with regions.names)');
    await expect(createLimiter({ policies: { api: { algorithm: 'token_bucket', limit: 1, period: '1s' } }, region: { name: 'eu', names: NAMES } }))
      .rejects.toMatchObject({ code: 'CONFIG', field: 'region' });
  });
});

describe('regions in the file and on the command line', () => {
  const POLICIES = 'policies:\n  api: { algorithm: token_bucket, limit: 10, period: 1m }\n';
  it('reads region, globalRedis and regions; flags win over the environment, which wins over the file', () => {
    const c = parseConfig(`${POLICIES}region: eu\nglobalRedis: redis://g:1\nregions: { names: [eu, us], shares: { eu: 3, us: 1 }, reconcileIntervalMs: 500 }\n`, 'p.yaml');
    expect(regionFromSources({}, {}, c.regions, 'serve')).toMatchObject({ name: 'eu', globalRedis: 'redis://g:1', weights: { eu: 3, us: 1 }, reconcileIntervalMs: 500 });
    expect(regionFromSources({}, { SLUICE_REGION: 'us', SLUICE_GLOBAL_REDIS: 'redis://e:2' }, c.regions, 'serve')).toMatchObject({ name: 'us', globalRedis: 'redis://e:2' });
    expect(regionFromSources({ region: 'eu', globalRedis: 'redis://f:3' }, { SLUICE_REGION: 'us' }, c.regions, 'serve')).toMatchObject({ name: 'eu', globalRedis: 'redis://f:3' });
    expect(regionFromSources({}, {}, parseConfig(POLICIES, 'p.yaml').regions, 'serve')).toBeNull();
  });

  it('refuses a region without the list, a list without a region, and a bad list, naming the field', () => {
    const plain = parseConfig(POLICIES, 'p.yaml').regions;
    expect(error(() => regionFromSources({ region: 'eu' }, {}, plain, 'sluice serve')).message).toBe('sluice serve: --region: needs regions.names in the policies file: the list of every region');
    expect(error(() => regionFromSources({ globalRedis: 'redis://g:1' }, {}, plain, 'sluice serve')).field).toBe('--global-redis');
    const listed = parseConfig(`${POLICIES}regions: { names: [eu, us] }\n`, 'p.yaml').regions;
    expect(error(() => regionFromSources({}, {}, listed, 'sluice serve')).field).toBe('regions');
    expect(error(() => regionFromSources({ region: 'mars' }, {}, listed, 'sluice serve')).message).toBe('sluice serve: --region: must be one of the region names eu, us (got "mars")');
    expect(error(() => parseConfig(`${POLICIES}region: eu\n`, 'p.yaml')).message).toBe('p.yaml: region: needs regions.names: the list of every region');
    expect(error(() => parseConfig(`${POLICIES}region: eu\nregions: { names: [eu, eu] }\n`, 'p.yaml')).message).toBe('p.yaml: regions.names[1]: "eu" is listed twice');
    expect(error(() => parseConfig(`${POLICIES}region: fr\nregions: { names: [eu, us] }\n`, 'p.yaml')).message).toBe('p.yaml: region: must be one of the region names eu, us (got "fr")');
    expect(error(() => parseConfig(`${POLICIES}region: eu\nglobalRedis: nope\nregions: { names: [eu, us] }\n`, 'p.yaml')).message).toBe('p.yaml: globalRedis: must be a redis:// or rediss:// URL (got "nope")');
  });
});
