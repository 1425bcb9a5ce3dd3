/**
 * deploy/: the Prometheus alert rules pass `promtool check rules` and their unit tests (`promtool test rules`,
 * deploy/prometheus/sluice-alerts.test.yml), and every metric the rules, their tests and the Grafana dashboard
 * name is one a running server exports: the names are read from `/metrics` of a server with shards, a Redis
 * store (a database of the shared test redis-server), strict, sync, shadow and allow-list policies, after checks of each.
 * promtool is Debian's `prometheus` package (.ci/run installs it); without it those two tests are skipped,
 * saying so.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createLimiter } from '../../src/index.js';
import { startServer, type SluiceServer } from '../../src/server/http.js';
import type { Limiter } from '../../src/types.js';
import { PROJECT_ROOT, send } from '../helpers/server.js';
import { insideWindow, keysUnder, sharedRedis, type SharedRedis } from '../helpers/redis.js';

const PROMTOOL = process.env.PROMTOOL_PATH ?? '/usr/bin/promtool';
const HAS_PROMTOOL = existsSync(PROMTOOL);
if (!HAS_PROMTOOL) console.warn('deploy.test: promtool is missing (Debian package "prometheus", or set PROMTOOL_PATH): the rule checks are skipped');

const RULES = path.join(PROJECT_ROOT, 'deploy', 'prometheus', 'sluice-alerts.yml');
const RULE_TESTS = path.join(PROJECT_ROOT, 'deploy', 'prometheus', 'sluice-alerts.test.yml');
const DASHBOARD = path.join(PROJECT_ROOT, 'deploy', 'grafana', 'sluice-dashboard.json');

/** Metric names in a PromQL text (sluice_* and process_*). */
function metricNames(promql: string): string[] {
  return [...promql.matchAll(/\b(?:sluice|process)_[a-z0-9_]+\b/g)].map((m) => m[0]);
}

/** Every string under `key` anywhere in a JSON/YAML value. */
function stringsUnder(v: unknown, keys: readonly string[], out: string[] = []): string[] {
  if (Array.isArray(v)) for (const x of v) stringsUnder(x, keys, out);
  else if (typeof v === 'object' && v !== null) {
    for (const [k, x] of Object.entries(v)) {
      if (keys.includes(k) && typeof x === 'string') out.push(x);
      else stringsUnder(x, keys, out);
    }
  }
  return out;
}

describe('deploy/: alert rules and dashboard', () => {
  it.skipIf(!HAS_PROMTOOL)('promtool check rules accepts the rules', () => {
    const out = execFileSync(PROMTOOL, ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(out).toMatch(/SUCCESS: 20 rules found/);
  });

  it.skipIf(!HAS_PROMTOOL)('promtool test rules: each tested alert fires as its test says', () => {
    const out = execFileSync(PROMTOOL, ['test', 'rules', RULE_TESTS], { encoding: 'utf8', cwd: path.dirname(RULE_TESTS) });
    expect(out).toMatch(/SUCCESS/);
  });

  describe('every metric named is exported', () => {
    let redis: SharedRedis;
    let limiter: Limiter;
    let server: SluiceServer;
    let exported: Set<string>;
    beforeAll(async () => {
      redis = await sharedRedis();
      limiter = await createLimiter({
        shards: 1,
        maxKeys: 4096,
        redis: { url: redis.url, prefix: 'deploy-test:', syncIntervalMs: 10 },
        policies: {
          free: { algorithm: 'token_bucket', limit: 5, period: 60_000, allow: ['vip'] },
          strict: { algorithm: 'fixed_window', limit: 5, period: 60_000, consistency: 'strict', onStoreError: 'open' },
          sync: { algorithm: 'token_bucket', limit: 5, period: 60_000, consistency: 'sync' },
          trial: { algorithm: 'token_bucket', limit: 1, period: 60_000, shadow: true },
        },
      });
      server = await startServer({ limiter, host: '127.0.0.1', port: 0, activity: { timer: false } });
      const url = `http://127.0.0.1:${server.port}`;
      for (const q of ['policy=free&key=a', 'policy=free&key=vip', 'policy=strict&key=a', 'policy=sync&key=a', 'policy=trial&key=a', 'policy=trial&key=a']) {
        for (let i = 0; i < 6; i++) expect((await send(`${url}/v1/check?${q}`)).status).toBe(200);
      }
      // a strict key holding a list: its check is decided by its rule (degraded, open), so the degraded family has a sample.
      // Its key (a fixed window of a minute, Redis's clock) must not expire at the minute's end before it is found.
      await insideWindow(redis.client, 60_000, 2_000);
      expect((await send(`${url}/v1/check?policy=strict&key=poisoned`)).status).toBe(200);
      const [poisoned] = (await keysUnder(redis.client, 'deploy-test:')).filter((k) => k.includes(':poisoned}'));
      expect(poisoned).toBeDefined();
      await redis.client.del(poisoned);
      await redis.client.lpush(poisoned, 'x');
      expect((await send(`${url}/v1/check?policy=strict&key=poisoned`)).text).toContain('"degradedBy":"open"');
      server.metrics.reloaded('api', 'rejected');
      await new Promise((r) => setTimeout(r, 100)); // a sync merge
      const text = (await send(`${url}/metrics`)).text;
      exported = new Set([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].flatMap(([, name, type]) =>
        type === 'histogram' ? [name, `${name}_bucket`, `${name}_sum`, `${name}_count`] : [name]));
      // a family that renders no sample yet is not exported: every name must also have a sample
      for (const name of [...exported]) if (!new RegExp(`^${name}(\\{| )`, 'm').test(text)) exported.delete(name);
    }, 30_000);
    afterAll(async () => {
      await server?.close();
      await limiter?.close();
      await redis?.stop();
    });

    it('by the alert rules and their tests', () => {
      const rules = parse(readFileSync(RULES, 'utf8'));
      const exprs = stringsUnder(rules, ['expr']);
      expect(exprs.length).toBe(20);
      const tests = parse(readFileSync(RULE_TESTS, 'utf8'));
      const used = new Set([...exprs, ...stringsUnder(tests, ['series'])].flatMap(metricNames));
      expect([...used].filter((n) => !exported.has(n))).toStrictEqual([]);
      expect(used.size).toBeGreaterThanOrEqual(15);
    });

    it('by the Grafana dashboard', () => {
      const dash = JSON.parse(readFileSync(DASHBOARD, 'utf8'));
      const exprs = [...stringsUnder(dash, ['expr']), ...stringsUnder(dash.templating, ['query'])];
      const used = new Set(exprs.flatMap(metricNames));
      expect([...used].filter((n) => !exported.has(n))).toStrictEqual([]);
      // the dashboard covers every sluice metric family the server exports
      const families = [...exported].filter((n) => n.startsWith('sluice_') && !/_(bucket|sum|count)$/.test(n));
      const covered = new Set([...used].map((n) => n.replace(/_(bucket|sum|count)$/, '')));
      expect(families.filter((n) => !covered.has(n))).toStrictEqual([]);
    });
  });
});
