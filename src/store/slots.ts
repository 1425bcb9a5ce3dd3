import calculateSlot from 'cluster-key-slot';

/**
 * Placing a store batch on a Redis Cluster. A script may only touch keys of one hash slot (else CROSSSLOT), so
 * a batch that spans slots is sent as one script call per slot; the calls to one node share a pipeline.
 */

/** One script call's share of a batch: its keys and per-leg arguments, and where its legs came from. */
export interface SlotPart {
  slot: number;
  /** The hash tag every key of this part hashes by (for a merge marker that must share the slot). */
  tag: string;
  keys: string[];
  args: number[];
  /** Index, in the whole batch, of each leg of this part, in order. */
  legs: number[];
}

/** The hash tag of a key as Redis Cluster reads it: between the first `{` and the next `}` if not empty, else the whole key. */
export function hashTag(key: string): string {
  const open = key.indexOf('{');
  if (open < 0) return key;
  const close = key.indexOf('}', open + 1);
  return close <= open + 1 ? key : key.slice(open + 1, close);
}

/**
 * The key a leg is stored under in a Cluster when its check's group spans slots: `<prefix>{<tag>}<rest>`,
 * where `<rest>` is the key without its prefix. A guarded policy's own keys are tagged by their tenant,
 * its guard's by the guard; the guard is shared by every tenant, so the tenant's keys move into the guard's
 * slot (as, in one instance, guarded checks all go to the guard's shard). The result is unique: a guard
 * key is `<prefix>{<tag>}:<i>`, a moved key `<prefix>{<tag>}{...`.
 */
export function placedKey(prefix: string, tag: string, key: string): string {
  return `${prefix}{${tag}}${key.startsWith(prefix) ? key.slice(prefix.length) : key}`;
}

/**
 * A key `<head>{<tag>}` that Redis Cluster places in `slot` (0–16383): the tag is the first decimal number
 * whose CRC16 slot is `slot` (found by trying them in turn: ~16,000 tries on average, once per caller). For a
 * command that must reach the master serving that slot, as a breaker's probe (src/store/breaker.ts probeWrite).
 */
export function keyInSlot(head: string, slot: number): string {
  for (let i = 0; ; i++) if (calculateSlot(String(i)) === slot) return `${head}{${i}}`;
}

function partFor(parts: Map<number, SlotPart>, slot: number, tag: string): SlotPart {
  let p = parts.get(slot);
  if (p === undefined) parts.set(slot, (p = { slot, tag, keys: [], args: [], legs: [] }));
  return p;
}

/**
 * Splits a check batch (`args`: `width` numbers per leg, the group length at `groupAt` on a group's first
 * leg, plus maxDelayMs·65536 on any leg of a delayed check, as lua/check.lua reads it) into one part per slot. A group (a check's limits, then its guard's) is
 * decided atomically, so it goes whole to the slot of its last key; any of its keys with another hash tag is
 * renamed into that slot (placedKey). Parts come in the order of their first leg.
 */
export function splitChecks(prefix: string, keys: readonly string[], args: readonly number[], width: number, groupAt: number): SlotPart[] {
  const parts = new Map<number, SlotPart>();
  const n = keys.length;
  let i = 0;
  while (i < n) {
    let g = args[i * width + groupAt] % 65536;
    if (!(g >= 1)) g = 1;
    if (i + g > n) g = n - i;
    const tag = hashTag(keys[i + g - 1]);
    const p = partFor(parts, calculateSlot(keys[i + g - 1]), tag);
    for (let j = i; j < i + g; j++) {
      p.keys.push(hashTag(keys[j]) === tag ? keys[j] : placedKey(prefix, tag, keys[j]));
      for (let a = 0; a < width; a++) p.args.push(args[j * width + a]);
      p.legs.push(j);
    }
    i += g;
  }
  return [...parts.values()];
}

/** Splits a merge batch (`width` numbers per key, every key independent) into one part per slot. */
export function splitKeys(keys: readonly string[], args: readonly number[], width: number): SlotPart[] {
  const parts = new Map<number, SlotPart>();
  for (let j = 0; j < keys.length; j++) {
    const p = partFor(parts, calculateSlot(keys[j]), hashTag(keys[j]));
    p.keys.push(keys[j]);
    for (let a = 0; a < width; a++) p.args.push(args[j * width + a]);
    p.legs.push(j);
  }
  return [...parts.values()];
}
