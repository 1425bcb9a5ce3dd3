/**
 * The shared failure cases (../shared/cases/cases.json), and the project's own cases in the same format
 * (test/fixtures/cases/*.json), against the engine, with `shards: 0` and `shards: 2`.
 *
 * Each case runs on a fresh limiter with a controlled clock (`clock: () => t`, `t` set before each call, every
 * call awaited before the next). Calls omit `key` / `cost` when the case omits them.
 * - `expect`: the asserted decision fields match exactly (`null` is `null`).
 * - `expectError`: the check throws or rejects, and the message names each `errorMentions` word.
 * - `expectConfigError`: `createLimiter` rejects, naming the policy and the field.
 * - `orConfigError`: either `createLimiter` rejects naming those words, or every call matches exactly.
 */
import { describe, expect, it } from 'vitest';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { createLimiter } from '../../src/index.js';
import { checkInput, loadCases, missingMentions, pickExpected, type Case } from '../helpers/cases.js';
import { TEST_MAX_KEYS } from '../helpers/limiter.js';

type LimiterOptions = Parameters<typeof createLimiter>[0];
type Limiter = Awaited<ReturnType<typeof createLimiter>>;
type CheckInput = Parameters<Limiter['check']>[0];

const OWN_CASES = path.resolve(import.meta.dirname, '../fixtures/cases');
const cases = [
  ...loadCases(),
  ...readdirSync(OWN_CASES).filter((f) => f.endsWith('.json')).sort().flatMap((f) => loadCases(path.join(OWN_CASES, f))),
];

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function expectMentions(err: unknown, words: string[], where: string): void {
  expect(err, `${where}: expected an Error`).toBeInstanceOf(Error);
  expect(missingMentions(messageOf(err), words), `${where}: message "${messageOf(err)}" must name ${words.join(', ')}`)
    .toStrictEqual([]);
}

async function runCase(c: Case, shards: number): Promise<void> {
  let t = 0;
  // maxKeys: TEST_MAX_KEYS, not the default 1,000,000 (a table that size costs ~100 ms of CPU per limiter, 210
  // limiters here): no case uses more than 38 keys, so none is evicted under either
  const options = { policies: c.policies, shards, clock: () => t, maxKeys: TEST_MAX_KEYS } as unknown as LimiterOptions;

  let limiter: Limiter;
  try {
    limiter = await createLimiter(options);
  } catch (err) {
    if (c.expectConfigError) return expectMentions(err, c.configErrorMentions, `${c.id}: createLimiter`);
    if (c.orConfigError !== undefined) {
      return expectMentions(err, c.orConfigError.errorMentions, `${c.id}: createLimiter`);
    }
    throw err;
  }

  try {
    if (c.expectConfigError) {
      expect.fail(`${c.id}: createLimiter should reject (must name ${c.configErrorMentions.join(', ')})`);
    }
    /** Lease ids by the name an acquire gave them (`as`). */
    const leases = new Map<string, string>();
    for (const call of c.calls) {
      t = call.t;
      const where = `${c.id} call #${call.index + 1} at t=${call.t}`;
      const input = checkInput(call) as unknown as CheckInput;
      const { cost: _cost, ...target } = input as unknown as Record<string, unknown>;
      const run = (): Promise<unknown> => {
        if (call.op === 'acquire') return limiter.acquire(target as never);
        if (call.op === 'release') {
          const leaseId = call.leaseOf !== undefined ? leases.get(call.leaseOf) : call.leaseId;
          return limiter.release({ ...target, leaseId } as never);
        }
        return limiter.check(input);
      };
      // An async wrapper turns a synchronous throw into a rejection, so both count as "the check failed".
      const outcome = await (async () => run())().then(
        (decision) => ({ ok: true as const, decision }),
        (error: unknown) => ({ ok: false as const, error }),
      );
      if (call.expectError) {
        expect(outcome.ok, `${where}: expected an error naming ${call.errorMentions.join(', ')}`).toBe(false);
        if (!outcome.ok) expectMentions(outcome.error, call.errorMentions, where);
        continue;
      }
      if (!outcome.ok) throw outcome.error;
      const leaseId = (outcome.decision as { leaseId?: unknown }).leaseId;
      if (call.as !== undefined && typeof leaseId === 'string') leases.set(call.as, leaseId);
      if (call.expect !== undefined) {
        const actual = pickExpected(outcome.decision as unknown as Record<string, unknown>, call.expect);
        expect(actual, where).toStrictEqual(call.expect);
      }
    }
  } finally {
    await limiter.close();
  }
}

describe.each([0, 2])('shared cases, shards: %i', (shards) => {
  it.each(cases.map((c) => [c.id, c] as [string, Case]))('%s', async (_id, c) => {
    await runCase(c, shards);
  });
});
