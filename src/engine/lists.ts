/**
 * Allow and deny lists (a policy's `allow: [...]` and `deny: [...]`): matching a check against them (on the
 * front, before any kernel or Redis work). Entries are parsed at config load by config/list-entry.ts, whose
 * comment says what an entry is.
 *
 * What is matched: the check's key (for a descriptor policy, its joined form, `acme:search`), and, for a
 * descriptor policy, each descriptor value on its own (unescaped: `acme`, `search`, `2001:db8::1`). An exact
 * entry matches when it equals any of them; a range matches when any of them is an IP address inside it
 * (IPv4-mapped IPv6 addresses such as `::ffff:10.1.2.3` match IPv4 ranges). A check given `key` directly
 * under a descriptor policy is read as the joined form, so it matches exactly as if given its descriptors.
 */
import { BlockList, isIP } from 'node:net';
import { parseListEntry } from '../config/list-entry.js';

/** One list, ready to match: a set of exact keys and a BlockList of ranges. */
export class KeyList {
  private readonly exact = new Set<string>();
  private readonly ranges: BlockList | null;

  /** @param entries entries already validated by the policy compiler. */
  constructor(entries: readonly string[]) {
    let ranges: BlockList | null = null;
    for (const raw of entries) {
      const e = parseListEntry(raw);
      if (typeof e === 'string') throw new Error(`list entry ${JSON.stringify(raw)}: ${e}`);
      if (e.kind === 'exact') this.exact.add(e.key);
      else (ranges ??= new BlockList()).addSubnet(e.address, e.prefix, e.family);
    }
    this.ranges = ranges;
  }

  /** True when `key` or one of `values` (descriptor values; null for a policy without descriptors) matches. */
  matches(key: string, values: readonly string[] | null): boolean {
    if (this.exact.has(key) || this.inRange(key)) return true;
    if (values !== null) {
      for (const v of values) if (this.exact.has(v) || this.inRange(v)) return true;
    }
    return false;
  }

  private inRange(v: string): boolean {
    if (this.ranges === null) return false;
    const family = isIP(v);
    if (family === 0) return false;
    try {
      return this.ranges.check(v, family === 4 ? 'ipv4' : 'ipv6');
    } catch {
      return false; // an address BlockList does not take (a zone id, `fe80::1%eth0`)
    }
  }
}

/** A policy's lists: deny is consulted first (deny wins over allow). */
export interface PolicyLists {
  allow: KeyList | null;
  deny: KeyList | null;
  /** Whether matching needs the descriptor values (the policy has descriptors). */
  split: boolean;
}

/** The lists of a policy, or null when it has none (the check pays nothing). */
export function buildLists(allow: readonly string[], deny: readonly string[], descriptors: number): PolicyLists | null {
  if (allow.length === 0 && deny.length === 0) return null;
  return {
    allow: allow.length === 0 ? null : new KeyList(allow),
    deny: deny.length === 0 ? null : new KeyList(deny),
    split: descriptors > 0,
  };
}

/** Which list a check is on: 'deny', 'allow', or null (neither). Deny wins. */
export function listed(lists: PolicyLists, key: string): 'allow' | 'deny' | null {
  const values = lists.split ? splitKey(key) : null;
  if (lists.deny !== null && lists.deny.matches(key, values)) return 'deny';
  if (lists.allow !== null && lists.allow.matches(key, values)) return 'allow';
  return null;
}

/** The descriptor values of a joined key: split at `:`, each part unescaped (`%3A` → `:`, `%25` → `%`). */
export function splitKey(key: string): string[] {
  return splitEscaped(key).map(unescapePart);
}

/** The escaped parts of a joined key (split at `:`). */
export function splitEscaped(key: string): string[] {
  return key.split(':');
}

function unescapePart(p: string): string {
  if (!p.includes('%')) return p;
  return p.replace(/%3A|%25/g, (m) => (m === '%3A' ? ':' : '%'));
}
