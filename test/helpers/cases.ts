/**
 * Loader for the shared failure cases (`../shared/cases/cases.json`, see its README; a checkout on its own
 * reads the copy in test/fixtures/shared/: test/helpers/shared.ts).
 *
 * It normalises the JSON so tests can replay it directly:
 * - the strings "NaN", "Infinity", "-Infinity" in `cost`, `limit`, `period`, `burst` become those numbers
 *   (any other string stays a string: a wrong-type input);
 * - every case gets `policies` (a single `policy` is registered as `main`);
 * - every call gets its policy name (`main` when absent) and records whether `key` / `cost` were present,
 *   so a replay can omit the fields the case omits.
 */
import { readFileSync } from 'node:fs';
import { sharedFile } from './shared.js';

/** Where the shared cases are read from (test/helpers/shared.ts). */
export const CASES_PATH = sharedFile('cases/cases.json');

/** A policy exactly as the case gives it (it may be deliberately invalid). */
export interface CasePolicy {
  algorithm?: unknown;
  limit?: unknown;
  period?: unknown;
  burst?: unknown;
  [field: string]: unknown;
}

/** The asserted fields of a decision; absent fields are not asserted. */
export interface CaseExpect {
  allowed?: boolean;
  remaining?: number;
  resetAfterMs?: number;
  retryAfterMs?: number | null;
  /** onLimit: delay: the wait of a check admitted later. */
  delayMs?: number;
  /** A release's answer (concurrency). */
  released?: boolean;
}

export interface CaseCall {
  /** Position in the case (0-based), for messages. */
  index: number;
  /** Clock value (integer Unix-epoch ms) for this call. */
  t: number;
  /** Policy name: the call's `policy` field, or `main`. */
  policy: string;
  /** Whether the call passes a `key` field at all (a missing key is an input error). */
  hasKey: boolean;
  key: unknown;
  /** Whether the call passes a `cost` field at all (a missing cost is an input error). */
  hasCost: boolean;
  cost: unknown;
  /** Expected decision fields (absent on error rows). */
  expect?: CaseExpect;
  /** The check must throw or reject. */
  expectError: boolean;
  /** Words the error message must contain (case-insensitive). */
  errorMentions: string[];
  /**
   * `check` (the default), or a concurrency policy's `acquire` / `release` (sluice's own cases). An acquire's
   * lease is remembered under `as`; a release gives back the lease remembered under `leaseOf`, or the literal
   * `leaseId` (lease ids are random, so cases name them).
   */
  op: 'check' | 'acquire' | 'release';
  as?: string;
  leaseOf?: string;
  leaseId?: unknown;
}

export interface Case {
  id: string;
  title: string;
  policies: Record<string, CasePolicy>;
  calls: CaseCall[];
  /** The policies are invalid: `createLimiter` must reject. */
  expectConfigError: boolean;
  /** For `expectConfigError`: the words the load error must contain (gathered from the calls). */
  configErrorMentions: string[];
  /** Either every call passes exactly, or `createLimiter` rejects naming these words. */
  orConfigError?: { errorMentions: string[] };
}

/** The check input for a call, with `key` / `cost` omitted when the case omits them. */
export function checkInput(call: CaseCall): Record<string, unknown> {
  const input: Record<string, unknown> = { policy: call.policy };
  if (call.hasKey) input.key = call.key;
  if (call.hasCost) input.cost = call.cost;
  return input;
}

const SPECIAL_NUMBERS: Record<string, number> = {
  NaN: Number.NaN,
  Infinity: Number.POSITIVE_INFINITY,
  '-Infinity': Number.NEGATIVE_INFINITY,
};

/** "NaN" / "Infinity" / "-Infinity" → the number; anything else unchanged. */
export function decodeNumber(value: unknown): unknown {
  return typeof value === 'string' && Object.hasOwn(SPECIAL_NUMBERS, value) ? SPECIAL_NUMBERS[value] : value;
}

function decodePolicy(raw: Record<string, unknown>): CasePolicy {
  const out: CasePolicy = { ...raw };
  for (const field of ['limit', 'period', 'burst'] as const) {
    if (Object.hasOwn(raw, field)) out[field] = decodeNumber(raw[field]);
  }
  return out;
}

interface RawCall {
  t: number;
  policy?: string;
  key?: unknown;
  cost?: unknown;
  expect?: CaseExpect;
  expectError?: boolean;
  errorMentions?: string[];
  op?: 'check' | 'acquire' | 'release';
  as?: string;
  leaseOf?: string;
  leaseId?: unknown;
}

interface RawCase {
  id: string;
  title?: string;
  policy?: Record<string, unknown>;
  policies?: Record<string, Record<string, unknown>>;
  calls: RawCall[];
  expectConfigError?: boolean;
  orConfigError?: { errorMentions: string[] };
}

export function parseCases(json: string): Case[] {
  const raw = JSON.parse(json) as RawCase[];
  return raw.map((c) => {
    const rawPolicies = c.policies ?? (c.policy !== undefined ? { main: c.policy } : {});
    const policies: Record<string, CasePolicy> = {};
    for (const [name, p] of Object.entries(rawPolicies)) policies[name] = decodePolicy(p);

    const calls: CaseCall[] = c.calls.map((call, index) => ({
      index,
      t: call.t,
      policy: call.policy ?? 'main',
      hasKey: Object.hasOwn(call, 'key'),
      key: call.key,
      hasCost: Object.hasOwn(call, 'cost'),
      cost: decodeNumber(call.cost),
      expect: call.expect,
      expectError: call.expectError === true,
      errorMentions: call.errorMentions ?? [],
      op: call.op ?? 'check',
      ...(call.as !== undefined ? { as: call.as } : {}),
      ...(call.leaseOf !== undefined ? { leaseOf: call.leaseOf } : {}),
      ...(Object.hasOwn(call, 'leaseId') ? { leaseId: call.leaseId } : {}),
    }));

    const configErrorMentions = [...new Set(calls.flatMap((call) => call.errorMentions))];
    const out: Case = {
      id: c.id,
      title: c.title ?? c.id,
      policies,
      calls,
      expectConfigError: c.expectConfigError === true,
      configErrorMentions,
    };
    if (c.orConfigError !== undefined) out.orConfigError = c.orConfigError;
    return out;
  });
}

/** Reads and normalises `cases.json` (default: {@link CASES_PATH}). */
export function loadCases(file: string = CASES_PATH): Case[] {
  return parseCases(readFileSync(file, 'utf8'));
}

/** Picks the fields of `actual` that `expected` asserts, for an exact `toStrictEqual`. */
export function pickExpected(actual: Record<string, unknown>, expected: CaseExpect): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of Object.keys(expected)) out[field] = actual[field];
  return out;
}

/** Whether `message` contains every word, case-insensitively; returns the missing words. */
export function missingMentions(message: string, words: string[]): string[] {
  const lower = message.toLowerCase();
  return words.filter((w) => !lower.includes(w.toLowerCase()));
}
