import { isConcurrency, type CompiledLimit, type CompiledPolicy, type StoreErrorRule } from '../config/policy-spec.js';
import { DELAY_SHIFT, IN_HASH_HI, IN_HASH_LO, MAX_GROUP } from '../shard/abi.js';
import type { Hasher } from '../keys/hasher.js';
import { storeKey } from '../keys/store-key.js';
import { buildLists, type PolicyLists } from './lists.js';

/** The key whose state a guard keeps: one per guard policy, shared by every guarded check. */
export const GUARD_KEY = '*';

/**
 * A policy as the front uses it: kernel limit ids for each leg, the hash seed that carries the policy's
 * name and version, per-leg salts, and, for a guarded policy, the guard's legs (constant hashes).
 */
export interface PolicyRuntime {
  policy: CompiledPolicy;
  seedLo: number;
  seedHi: number;
  /** Legs of one check: own limits, then the guard's. */
  legCount: number;
  limitIds: Int32Array;
  /** Salt XORed into the key hash for own leg i (leg 0: none). */
  saltLo: Uint32Array;
  saltHi: Uint32Array;
  /** Own limits then guard limits, for composing decisions. */
  legLimits: CompiledLimit[];
  /** Guard legs' fixed hashes (lo, hi interleaved), or null. */
  guardHashes: Uint32Array | null;
  /** Routed to a store-backed mode's decider (consistency strict or lease). */
  stored: boolean;
  /**
   * The rule a check takes when the store fails (src/engine/failure.ts): the policy's `onStoreError`, or its
   * guard's when that is stricter (closed, then local, then open): a guard set to fail closed protects what
   * all its tenants share, and a tenant's `open` must not let checks past it unchecked.
   */
  onStoreError: StoreErrorRule;
  /** Decided locally and merged into the store behind (consistency sync). */
  synced: boolean;
  /** Decided on the front thread from tokens leased from the store (consistency lease: src/engine/lease/). */
  leased: boolean;
  /** The guard legs' Redis keys, for a store-backed guarded policy. */
  guardStoreKeys: string[] | null;
  /** A shadow policy: its decisions are counted and turned into admissions (see PolicyCounters.shadowed). */
  shadow: boolean;
  /** The policy's allow and deny lists, or null when it has none. */
  lists: PolicyLists | null;
  /** Candidates shadowing this (live) policy, each evaluated on every check of it; null when none. */
  shadows: ShadowLink[] | null;
  /**
   * onLimit: delay (the policy's or its guard's): the same runtime with {@link legDelayMs} set, which a check
   * is decided under when it holds a wait place (src/engine/delay.ts); null for a policy without delay.
   */
  delayed: PolicyRuntime | null;
  /**
   * Per leg, the maxDelayMs the kernel (IN_LIMIT's DELAY_SHIFT part) or the script is given: set on the
   * {@link delayed} twin only; null on every runtime a check is decided under with no delay.
   */
  legDelayMs: Float64Array | null;
}

/** The maxDelayMs leg j of a check on `rt` carries (0: decided as ever), as IN_LIMIT's part: ms × DELAY_SHIFT. */
export function legDelayWord(rt: PolicyRuntime, j: number): number {
  return rt.legDelayMs === null ? 0 : rt.legDelayMs[j] * DELAY_SHIFT;
}

/**
 * Leg `j`'s hash for a key whose hash under the policy's seed is (lo, hi), written to out[at] (low half) and
 * out[at + 1] (high half): an own leg XORs its salt into the key's hash (0 becomes 1: it marks an empty slot
 * in the kernel), a guard leg is the guard key's fixed hash.
 */
export function writeLegHash(rt: PolicyRuntime, lo: number, hi: number, j: number, out: Float64Array, at: number): void {
  const own = rt.saltLo.length;
  let hl: number, hh: number;
  if (j < own) {
    hl = (lo ^ rt.saltLo[j]) >>> 0;
    hh = (hi ^ rt.saltHi[j]) >>> 0;
    if (hl === 0 && hh === 0) hl = 1;
  } else {
    hl = rt.guardHashes![2 * (j - own)];
    hh = rt.guardHashes![2 * (j - own) + 1];
  }
  out[at + IN_HASH_LO] = hl;
  out[at + IN_HASH_HI] = hh;
}

/** A candidate policy (`shadowOf`) and how its key comes from the live check's key. */
export interface ShadowLink {
  rt: PolicyRuntime;
  /**
   * For each of the candidate's descriptors, the index of the same descriptor in the live policy's; null when
   * the candidate takes the live key as it is (no descriptors, or the live policy's in the same order).
   */
  pick: Int32Array | null;
  /** The number of parts a live key must split into (the live policy's descriptors), when `pick` is set. */
  parts: number;
}

const GOLDEN = 0x9e3779b97f4a7c15n;
const MASK64 = (1n << 64n) - 1n;

function salt(i: number): [number, number] {
  const s = (BigInt(i) * GOLDEN) & MASK64;
  return [Number(s & 0xffffffffn), Number(s >> 32n)];
}

/**
 * The hash seed of a policy's keys: its name, its version when given, and its descriptor names. A version
 * derived from the numbers is left out, so that a reload that changes only numbers finds the keys' old state
 * (under the old limit id: read as fresh, or carried over, by the kernel); a given version bumped on purpose
 * starts every key afresh.
 */
export function seedText(p: CompiledPolicy): string {
  return `sluice\u0000${p.name}\u0000${p.versionGiven ? p.version : ''}\u0000${p.descriptors.map((d) => d.name).join('\u0000')}`;
}

/**
 * The concurrency policies of each runtime map {@link buildRuntimes} made (they have no runtime: they are
 * never checked), so that a check naming one is told so rather than that the policy is unknown.
 */
const LEASE_POLICIES = new WeakMap<ReadonlyMap<string, PolicyRuntime>, ReadonlySet<string>>();

/** Whether `name` is a concurrency policy of the set `runtimes` was built from. */
export function isLeasePolicy(runtimes: ReadonlyMap<string, PolicyRuntime>, name: string): boolean {
  return LEASE_POLICIES.get(runtimes)?.has(name) ?? false;
}

/**
 * Builds every policy's runtime; `ids` gives each policy's kernel limit ids (LimitTable.plan), `hasher`
 * computes seeds and guard hashes.
 */
export function buildRuntimes(
  policies: ReadonlyMap<string, CompiledPolicy>,
  ids: ReadonlyMap<string, readonly number[]>,
  hasher: Hasher,
  storePrefix = '',
): Map<string, PolicyRuntime> {
  const seeds = new Map<string, [number, number]>();
  for (const [name, p] of policies) seeds.set(name, hasher.hashOne(seedText(p), 0, 0));
  const out = new Map<string, PolicyRuntime>();
  const leased = new Set<string>();
  LEASE_POLICIES.set(out, leased);
  for (const [name, p] of policies) {
    // no checks under a concurrency policy: its leases are src/engine/leases.ts's (acquire, release)
    if (isConcurrency(p)) {
      leased.add(name);
      continue;
    }
    const guard = p.guard === null ? null : policies.get(p.guard)!;
    const own = p.limits.length;
    const legCount = own + (guard ? guard.limits.length : 0);
    if (legCount > MAX_GROUP) throw new Error(`policy "${name}": more than ${MAX_GROUP} limits with its guard`);
    const limitIds = new Int32Array(legCount);
    const saltLo = new Uint32Array(own);
    const saltHi = new Uint32Array(own);
    for (let i = 0; i < own; i++) {
      limitIds[i] = ids.get(name)![i];
      [saltLo[i], saltHi[i]] = salt(i);
    }
    let guardHashes: Uint32Array | null = null;
    if (guard) {
      guardHashes = new Uint32Array(guard.limits.length * 2);
      const [gSeedLo, gSeedHi] = seeds.get(guard.name)!;
      const [lo, hi] = hasher.hashOne(GUARD_KEY, gSeedLo, gSeedHi);
      for (let i = 0; i < guard.limits.length; i++) {
        limitIds[own + i] = ids.get(guard.name)![i];
        const [sl, sh] = salt(i);
        const hl = (lo ^ sl) >>> 0, hh = (hi ^ sh) >>> 0;
        guardHashes[2 * i] = hl === 0 && hh === 0 ? 1 : hl;
        guardHashes[2 * i + 1] = hh;
      }
    }
    const [seedLo, seedHi] = seeds.get(name)!;
    // strict and lease checks are routed to their mode's decider (src/engine/decider.ts)
    const stored = p.consistency === 'strict' || p.consistency === 'lease';
    const synced = p.consistency === 'sync';
    const quotaLeased = p.consistency === 'lease';
    const rt: PolicyRuntime = {
      policy: p, seedLo, seedHi, legCount, limitIds, saltLo, saltHi, guardHashes, stored, synced, leased: quotaLeased,
      onStoreError: guard === null ? p.onStoreError : stricter(p.onStoreError, guard.onStoreError),
      legLimits: guard ? [...p.limits, ...guard.limits] : [...p.limits],
      guardStoreKeys: (stored || synced || quotaLeased) && guard ? guard.limits.map((_, i) => storeKey(storePrefix, guard.name, guard.version, GUARD_KEY, i)) : null,
      shadow: p.shadow,
      lists: buildLists(p.allow, p.deny, p.descriptors.length),
      shadows: null,
      delayed: null,
      legDelayMs: null,
    };
    if (p.maxDelayMs !== undefined || (guard !== null && guard.maxDelayMs !== undefined)) {
      const d = new Float64Array(legCount);
      for (let j = 0; j < legCount; j++) d[j] = (j < own ? p.maxDelayMs : guard!.maxDelayMs) ?? 0;
      rt.delayed = { ...rt, legDelayMs: d };
    }
    out.set(name, rt);
  }
  for (const [name, p] of policies) {
    if (p.shadowOf === null) continue;
    const live = out.get(p.shadowOf)!;
    (live.shadows ??= []).push(shadowLink(out.get(name)!, live.policy));
    if (live.delayed !== null) live.delayed.shadows = live.shadows;
  }
  return out;
}

/** The stricter of two store failure rules: closed, then local, then open. */
function stricter(a: StoreErrorRule, b: StoreErrorRule): StoreErrorRule {
  const rank = { open: 0, local: 1, closed: 2 } as const;
  return rank[a] >= rank[b] ? a : b;
}

function shadowLink(rt: PolicyRuntime, live: CompiledPolicy): ShadowLink {
  const mine = rt.policy.descriptors.map((d) => d.name);
  const theirs = live.descriptors.map((d) => d.name);
  const same = mine.length === theirs.length && mine.every((n, i) => n === theirs[i]);
  if (mine.length === 0 || same) return { rt, pick: null, parts: 0 };
  return { rt, pick: Int32Array.from(mine.map((n) => theirs.indexOf(n))), parts: theirs.length };
}
