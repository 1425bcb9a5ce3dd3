/**
 * The status page in a real headless Chromium (Debian `chromium`; .ci/run installs it), driven over the
 * DevTools protocol (test/helpers/chromium.ts), for a limiter with 2 shards and a sync and a strict policy on a
 * redis-server of the test's own: served by the admin API with the token given in the URL
 * fragment, it loads with no console error, exception or CSP report, shows the policies, shows a key holding
 * HTML as text, and its chart moves under load (the chart's total grows by exactly the checks sent between
 * two reads). A screenshot goes to a temporary folder; with UPDATE_SCREENSHOT=1 it is also copied to
 * docs/status-page.png (the README's).
 */
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT, TEST_MAX_KEYS, send } from '../helpers/server.js';
import { connected, sharedRedis, type SharedRedis } from '../helpers/redis.js';
import { createLimiter } from '../../src/index.js';
import { startServer, type SluiceServer } from '../../src/server/http.js';
import type { Limiter } from '../../src/types.js';
import { startAdminServer, type AdminServer } from '../../src/server/admin.js';
import { chromiumPath, launchChromium, type Browser } from '../helpers/chromium.js';

const CHROMIUM = chromiumPath();
if (CHROMIUM === null) {
  console.warn('status-page.test: chromium is missing (Debian package "chromium", or set CHROMIUM_PATH): the browser test is skipped');
}
const TOKEN = 'page-token-0123456789abcdef';
/** A sync policy and a strict one on the shared test redis-server (a database of its own): the page then shows the store and the write-behind. */
const POLICIES = {
  free: { algorithm: 'token_bucket' as const, limit: 20, period: 60_000, consistency: 'sync' as const },
  tenant: { algorithm: 'fixed_window' as const, limit: 200, period: 3_600_000, descriptors: ['tenant'], consistency: 'strict' as const, onStoreError: 'open' as const },
};

describe.skipIf(CHROMIUM === null)('status page in headless Chromium', () => {
  let redis: SharedRedis;
  let s: { url: string; limiter: Limiter; server: SluiceServer };
  let admin: AdminServer;
  let browser: Browser;
  beforeAll(async () => {
    redis = await sharedRedis();
    const limiter = await createLimiter({
      policies: POLICIES, shards: 2, maxKeys: TEST_MAX_KEYS,
      redis: { url: redis.url, prefix: 'status-page:', timeoutMs: 500, syncIntervalMs: 50 },
    });
    const server = await startServer({ limiter, host: '127.0.0.1', port: 0 });
    s = { url: `http://127.0.0.1:${server.port}`, limiter, server };
    await connected(limiter);
    admin = await startAdminServer({ limiter, token: TOKEN, port: 0, status: server.status });
    browser = await launchChromium(CHROMIUM!);
  }, 30_000);
  afterAll(async () => {
    await browser?.close();
    await admin?.close();
    await s?.server.close();
    await s?.limiter.close();
    await redis?.stop();
  });

  const check = (key: string): Promise<unknown> => send(`${s.url}/v1/check?policy=free&key=${encodeURIComponent(key)}`);
  const tenant = (t: string): Promise<unknown> => send(`${s.url}/v1/check?policy=tenant&tenant=${encodeURIComponent(t)}`);

  it('loads without errors, shows the policies and escaped keys, and its chart moves under load', async () => {
    // a few seconds of uneven traffic, so the chart has a shape (and the screenshot something to show)
    for (let second = 0; second < 4; second++) {
      const n = [8, 20, 35, 15][second];
      await Promise.all(Array.from({ length: n }, (_, i) => (i % 3 === 0 ? check('tenant-a') : i % 3 === 1 ? check(`user-${i % 5}`) : tenant(`t${i % 4}`))));
      await check('<img src=x onerror="document.title=1">');
      await new Promise((r) => setTimeout(r, 600));
    }
    const page = await browser.newPage(1100, 760);
    await page.goto(`http://127.0.0.1:${admin.port}/#token=${TOKEN}`);
    // the token left the address bar (kept in sessionStorage only)
    expect(await page.evaluate('location.hash')).toBe('');
    await page.waitFor('document.querySelectorAll("section[data-policy]").length === 2');
    expect(await page.evaluate('[...document.querySelectorAll("section[data-policy] h2")].map((h) => h.textContent)')).toStrictEqual(['free', 'tenant']);
    expect(await page.evaluate('document.getElementById("version").textContent')).toBe(`policies ${s.limiter.version}`);
    // the HTML in a key is text: no element was made of it, nothing ran
    const keys = await page.evaluate<string[]>('[...document.querySelectorAll("section[data-policy=free] td.key")].map((td) => td.textContent)');
    expect(keys).toContain('<img src=x onerror="document.title=1">');
    expect(await page.evaluate('document.querySelectorAll("main img").length')).toBe(0);
    expect(await page.evaluate('document.title')).toBe('sluice status');

    const total = 'Number(document.querySelector("section[data-policy=free] svg.chart").getAttribute("data-total"))';
    const before = await page.evaluate<number>(total);
    const status = (await send(`http://127.0.0.1:${admin.port}/v1/status`, { headers: { authorization: `Bearer ${TOKEN}` } })).json;
    const served = status.activity.policies.free.admitted.reduce((a: number, b: number) => a + b, 0)
      + status.activity.policies.free.denied.reduce((a: number, b: number) => a + b, 0);
    expect(before).toBe(served); // the page shows what /v1/status says (no check was sent in between)
    await Promise.all(Array.from({ length: 25 }, (_, i) => check(`burst-${i % 3}`)));
    expect(await page.waitFor<boolean>(`${total} === ${before + 25}`)).toBe(true);
    const points = await page.evaluate<string>('document.querySelector("section[data-policy=free] polyline[data-series=admitted]").getAttribute("points")');
    expect(points.split(' ').length).toBe(60); // up less than a minute: the last 60 s of the 300 s ring

    // two more polls: still no error of any kind
    const polls = await page.evaluate<string>('document.getElementById("updated").textContent');
    await page.waitFor(`document.getElementById("updated").textContent !== ${JSON.stringify(polls)}`);
    expect(page.problems).toStrictEqual([]);

    const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-status-page-'));
    const png = await page.screenshot();
    const file = path.join(dir, 'status-page.png');
    writeFileSync(file, png);
    console.log(`status-page.test: screenshot written to ${file} (${png.length} bytes)`);
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    if (process.env.UPDATE_SCREENSHOT === '1') copyFileSync(file, path.join(PROJECT_ROOT, 'docs', 'status-page.png'));
  }, 60_000);

  it('asks for the token when it has none, and refuses a wrong one', async () => {
    const page = await browser.newPage(800, 600);
    await page.goto(`http://127.0.0.1:${admin.port}/status`);
    await page.waitFor('getComputedStyle(document.getElementById("auth")).display === "block"');
    expect(await page.evaluate('document.querySelectorAll("section[data-policy]").length')).toBe(0);
    await page.evaluate('document.getElementById("token").value = "wrong"; document.getElementById("auth").requestSubmit(); true');
    await page.waitFor('document.getElementById("error").textContent === "the token was refused"');
    await page.evaluate(`document.getElementById("token").value = ${JSON.stringify(TOKEN)}; document.getElementById("auth").requestSubmit(); true`);
    await page.waitFor('document.querySelectorAll("section[data-policy]").length === 2');
    expect(await page.evaluate('getComputedStyle(document.getElementById("auth")).display')).toBe('none');
    // the only problems: the two 401 answers the browser reports as failed loads
    expect(page.problems.length).toBeGreaterThanOrEqual(2);
    expect(page.problems.filter((p) => !(p.source === 'network' && /401/.test(p.text)))).toStrictEqual([]);
  }, 30_000);
});
