/**
 * A headless Chromium driven over the Chrome DevTools Protocol (https://chromedevtools.github.io/devtools-protocol/)
 * directly, through the `ws` package: no browser automation library. Debian's `chromium` at /usr/bin/chromium
 * (or CHROMIUM_PATH); {@link chromiumPath} is null when it is missing, so a test can say so and skip.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { exited } from './redis.js';

/** The browser binary, or null when it is not installed. */
export function chromiumPath(): string | null {
  const p = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  return existsSync(p) ? p : null;
}

/** What the page logged that a test wants to see: console errors, uncaught exceptions, failed loads, CSP reports. */
export interface PageProblem {
  source: string;
  text: string;
}

export interface Page {
  /** Navigates and resolves once the load event fired. */
  goto(url: string): Promise<void>;
  /** Evaluates `expression` in the page and returns its value (by value: JSON-able results only). */
  evaluate<T>(expression: string): Promise<T>;
  /** Polls `expression` until it is truthy (every 100 ms, up to `timeoutMs`); resolves with its value. */
  waitFor<T>(expression: string, timeoutMs?: number): Promise<T>;
  /** A PNG screenshot of the viewport. */
  screenshot(): Promise<Buffer>;
  /** Every problem reported so far. */
  readonly problems: PageProblem[];
}

export interface Browser {
  /** A new tab with a `width` x `height` viewport. */
  newPage(width?: number, height?: number): Promise<Page>;
  close(): Promise<void>;
}

/** Starts headless Chromium with a fresh profile and connects to it. */
export async function launchChromium(executable: string): Promise<Browser> {
  const profile = mkdtempSync(path.join(os.tmpdir(), 'sluice-chromium-'));
  const child: ChildProcess = spawn(executable, [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage', `--user-data-dir=${profile}`,
    '--remote-debugging-port=0', 'about:blank',
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  const wsUrl = await new Promise<string>((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`chromium did not start: ${err}`)), 20_000);
    child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`chromium exited (${code}): ${err}`)); });
  });
  const ws = new WebSocket(wsUrl, { perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => { ws.once('open', () => resolve()); ws.once('error', reject); });
  let nextId = 1;
  const waiting = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  const listeners: Array<(method: string, params: any, sessionId?: string) => void> = [];
  ws.on('message', (data) => {
    const msg = JSON.parse(String(data)) as { id?: number; result?: unknown; error?: { message: string }; method?: string; params?: unknown; sessionId?: string };
    if (msg.id !== undefined) {
      const w = waiting.get(msg.id);
      waiting.delete(msg.id);
      if (msg.error) w?.reject(new Error(msg.error.message));
      else w?.resolve(msg.result);
    } else if (msg.method !== undefined) {
      for (const l of listeners) l(msg.method, msg.params, msg.sessionId);
    }
  });
  const call = (method: string, params: object = {}, sessionId?: string): Promise<any> => new Promise((resolve, reject) => {
    const id = nextId++;
    waiting.set(id, { resolve, reject });
    ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
  });

  return {
    async newPage(width = 1280, height = 900): Promise<Page> {
      const { targetId } = await call('Target.createTarget', { url: 'about:blank' });
      const { sessionId } = await call('Target.attachToTarget', { targetId, flatten: true });
      const problems: PageProblem[] = [];
      let loaded: (() => void) | null = null;
      listeners.push((method, p, sid) => {
        if (sid !== sessionId) return;
        if (method === 'Runtime.consoleAPICalled' && (p.type === 'error' || p.type === 'assert')) {
          problems.push({ source: 'console', text: p.args.map((a: { value?: unknown; description?: string }) => String(a.value ?? a.description)).join(' ') });
        } else if (method === 'Runtime.exceptionThrown') {
          problems.push({ source: 'exception', text: p.exceptionDetails.exception?.description ?? p.exceptionDetails.text });
        } else if (method === 'Log.entryAdded' && p.entry.level === 'error') {
          problems.push({ source: p.entry.source, text: `${p.entry.text} ${p.entry.url ?? ''}` });
        } else if (method === 'Page.loadEventFired') {
          loaded?.();
        }
      });
      const s = (m: string, params: object = {}): Promise<any> => call(m, params, sessionId);
      await Promise.all([s('Page.enable'), s('Runtime.enable'), s('Log.enable')]);
      await s('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false });
      const evaluate = async <T>(expression: string): Promise<T> => {
        const r = await s('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
        if (r.exceptionDetails) throw new Error(`evaluate ${expression}: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
        return r.result.value as T;
      };
      return {
        problems,
        async goto(url: string): Promise<void> {
          const done = new Promise<void>((r) => (loaded = r));
          await s('Page.navigate', { url });
          await done;
        },
        evaluate,
        async waitFor<T>(expression: string, timeoutMs = 10_000): Promise<T> {
          const until = Date.now() + timeoutMs;
          for (;;) {
            const v = await evaluate<T>(expression);
            if (v) return v;
            if (Date.now() > until) throw new Error(`timed out waiting for ${expression}`);
            await new Promise((r) => setTimeout(r, 100));
          }
        },
        async screenshot(): Promise<Buffer> {
          const { data } = await s('Page.captureScreenshot', { format: 'png' });
          return Buffer.from(data as string, 'base64');
        },
      };
    },
    async close(): Promise<void> {
      try {
        await Promise.race([call('Browser.close'), new Promise((r) => setTimeout(r, 2000))]);
      } catch {
        // already gone
      }
      ws.close();
      if (child.exitCode === null && child.signalCode === null) {
        const gone = exited(child);
        setTimeout(() => child.kill('SIGKILL'), 2000).unref();
        await gone;
      }
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
