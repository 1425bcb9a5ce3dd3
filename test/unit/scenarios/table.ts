/**
 * Table-driven scenario tests in the notation of the shared cases (/work/shared/cases/README.md):
 *
 * | cell | asserts |
 * |---|---|
 * | `allow r=9 reset=1000` | allowed: true, remaining: 9, resetAfterMs: 1000, retryAfterMs: 0 |
 * | `deny r=0 retry=99 reset=999` | allowed: false, remaining: 0, retryAfterMs: 99, resetAfterMs: 999 |
 * | `deny r=5 retry=null` | allowed: false, remaining: 5, retryAfterMs: null |
 * | `error (cost)` | the check throws or rejects, and the message names `cost` |
 *
 * A field the cell does not show is not asserted. Numbers may be grouped with `_` (`10_000`). Each table runs
 * on a fresh limiter with a controlled clock set to the row's `t` before the call; every call is awaited.
 */
import { expect } from 'vitest';
import { createLimiter, type Decision } from '../../../src/index.js';
import { TEST_MAX_KEYS } from '../../helpers/limiter.js';
import { checkBe, checkStrictEqual, checkTrue } from '../../helpers/assert.js';

export type Limiter = Awaited<ReturnType<typeof createLimiter>>;
export type Policies = Parameters<typeof createLimiter>[0]['policies'];
export type CheckInput = Parameters<Limiter['check']>[0];

/** Every table runs in-thread and on two worker shards; both must give the same answers. */
export const SHARDS = [0, 2] as const;

/** 2^53 − 1. */
export const MAX = Number.MAX_SAFE_INTEGER;

/** A field left out of a check (a missing `key` or `cost`). */
export const NONE: unique symbol = Symbol('none');

export interface Expected {
  allowed: boolean;
  remaining?: number;
  resetAfterMs?: number;
  retryAfterMs?: number | null;
}

export type Outcome = { kind: 'decision'; expect: Expected } | { kind: 'error'; mentions: string[] };

function parseNumber(text: string, cell: string): number {
  const clean = text.replace(/_/g, '');
  if (!/^\d+$/.test(clean)) throw new Error(`bad number "${text}" in cell "${cell}"`);
  const n = Number(clean);
  if (!Number.isSafeInteger(n)) throw new Error(`unsafe number "${text}" in cell "${cell}"`);
  return n;
}

/** Parses one cell of a case table (see the module comment). Throws on anything it does not know. */
export function cell(text: string): Outcome {
  const error = /^error \(([^)]+)\)$/.exec(text.trim());
  if (error !== null) return { kind: 'error', mentions: error[1].split(',').map((w) => w.trim()) };
  const [verdict, ...fields] = text.trim().split(/\s+/);
  if (verdict !== 'allow' && verdict !== 'deny') throw new Error(`bad cell "${text}"`);
  const out: Expected = { allowed: verdict === 'allow' };
  if (out.allowed) out.retryAfterMs = 0;
  for (const f of fields) {
    const [name, value] = f.split('=');
    if (value === undefined) throw new Error(`bad field "${f}" in cell "${text}"`);
    if (name === 'r') out.remaining = parseNumber(value, text);
    else if (name === 'reset') out.resetAfterMs = parseNumber(value, text);
    else if (name === 'retry' && !out.allowed) out.retryAfterMs = value === 'null' ? null : parseNumber(value, text);
    else throw new Error(`bad field "${f}" in cell "${text}"`);
  }
  return { kind: 'decision', expect: out };
}

/** One call of a table. `key` / `cost` may be {@link NONE} (left out) or a wrong-type value. */
export interface Row {
  t: number;
  policy?: string;
  key?: unknown;
  cost?: unknown;
  /** A cell, e.g. `allow r=9 reset=1000`. */
  expect: string;
  /** Shown in failure messages, e.g. the row number of the .md table. */
  label?: string;
}

/** A limiter on a controlled clock. `check` turns a synchronous throw into a rejection. */
export class Session {
  private constructor(
    readonly limiter: Limiter,
    private readonly clock: { now: number },
  ) {}

  /** `extra.maxKeys`: the key table's capacity, default {@link TEST_MAX_KEYS} (no table here holds more than ~200 keys). */
  static async open(policies: Policies, shards: number, extra: { maxKeys?: number } = {}): Promise<Session> {
    const clock = { now: 0 };
    const limiter = await createLimiter({ policies, shards, clock: () => clock.now, maxKeys: TEST_MAX_KEYS, ...extra });
    return new Session(limiter, clock);
  }

  /** The controlled clock's value (set by each check; set it directly before a Promise.all batch). */
  get now(): number {
    return this.clock.now;
  }

  set now(t: number) {
    this.clock.now = t;
  }

  async check(t: number, input: Record<string, unknown>): Promise<Decision> {
    this.clock.now = t;
    return (async () => this.limiter.check(input as unknown as CheckInput))();
  }

  /** Runs one row and asserts its cell exactly. */
  async row(row: Row, where: string): Promise<Decision | undefined> {
    const input: Record<string, unknown> = { policy: row.policy ?? 'main' };
    const key = row.key === undefined ? 'k' : row.key;
    if (key !== NONE) input.key = key;
    const cost = row.cost === undefined ? 1 : row.cost;
    if (cost !== NONE) input.cost = cost;
    const at = `${where}${row.label !== undefined ? ` row ${row.label}` : ''} (t=${row.t}, cost=${String(cost === NONE ? '(none)' : cost)})`;
    const outcome = cell(row.expect);
    const result = await this.check(row.t, input).then(
      (d) => ({ ok: true as const, d }),
      (e: unknown) => ({ ok: false as const, e }),
    );
    if (outcome.kind === 'error') {
      expect(result.ok, `${at}: expected an error naming ${outcome.mentions.join(', ')}`).toBe(false);
      if (!result.ok) {
        expect(result.e, at).toBeInstanceOf(Error);
        const message = (result.e as Error).message.toLowerCase();
        for (const word of outcome.mentions) expect(message, `${at}: the message must name ${word}`).toContain(word.toLowerCase());
      }
      return undefined;
    }
    if (!result.ok) throw result.e;
    const d = result.d;
    const actual: Record<string, unknown> = {};
    for (const field of Object.keys(outcome.expect)) actual[field] = d[field as keyof Decision];
    checkStrictEqual(actual, outcome.expect, at);
    expectWellFormed(d, at);
    return d;
  }

  close(): Promise<void> {
    return this.limiter.close();
  }
}

/** Shape rules every decision keeps (shared case 08 "Also check", case 02: never negative). */
export function expectWellFormed(d: Decision, where: string): void {
  // check*: expect() only on a failure (test/helpers/assert.ts): this runs for every row of every table
  checkTrue(Number.isSafeInteger(d.remaining) && d.remaining >= 0, () => `${where}: remaining ${d.remaining}`);
  checkTrue(Number.isSafeInteger(d.resetAfterMs) && d.resetAfterMs >= 0, () => `${where}: resetAfterMs ${d.resetAfterMs}`);
  if (d.allowed) checkBe(d.retryAfterMs, 0, () => `${where}: an admitted check waits 0`);
  else if (d.retryAfterMs !== null && !(d.retryAfterMs >= 1)) expect(d.retryAfterMs, `${where}: a denial that can succeed later waits ≥ 1 ms`).toBeGreaterThanOrEqual(1);
}

/** Runs `fn` on a fresh session; always closes it. */
export async function withSession<T>(
  policies: Policies,
  shards: number,
  fn: (s: Session) => Promise<T>,
  extra: { maxKeys?: number } = {},
): Promise<T> {
  const s = await Session.open(policies, shards, extra);
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

/** Runs every row of a table, in order, on one fresh limiter. */
export async function runTable(policies: Policies, shards: number, rows: readonly Row[], where = ''): Promise<Decision[]> {
  return withSession(policies, shards, async (s) => {
    const out: Decision[] = [];
    for (const [i, row] of rows.entries()) {
      const d = await s.row({ label: String(i + 1), ...row }, where);
      if (d !== undefined) out.push(d);
    }
    return out;
  });
}

/** The single-limit policy `main`. */
export function main(algorithm: string, limit: number, period: number | string, burst?: number): Policies {
  const p: Record<string, unknown> = { algorithm, limit, period };
  if (burst !== undefined) p.burst = burst;
  return { main: p } as Policies;
}

/**
 * A "(× n)" row: n identical calls whose `remaining` counts down from `from` (cells written with `{r}`,
 * e.g. `allow r={r} reset=1000`).
 */
export function times(n: number, row: Omit<Row, 'expect'> & { expect: string }, from: number): Row[] {
  return Array.from({ length: n }, (_, i) => ({ ...row, expect: row.expect.replace('{r}', String(from - i)) }));
}
