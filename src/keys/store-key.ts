/**
 * Redis keys. Every key of one logical key (its limits' states) shares one hash tag, so one script can touch
 * them all in a Redis Cluster slot:
 *
 *   <prefix>{<policy>:<version>:<key>}:<limit index>
 *
 * Each part escapes `%`, `{`, `}` and `:` (as `%25`, `%7B`, `%7D`, `%3A`), so the tag is never empty, never
 * ends early, and two different (policy, version, key) triples never produce one string.
 */
export function storeKey(prefix: string, policy: string, version: string, key: string, limitIndex: number): string {
  return `${prefix}{${escapeTagPart(policy)}:${escapeTagPart(version)}:${escapeTagPart(key)}}:${limitIndex}`;
}

/** The characters {@link escapeTagPart} escapes. */
const SPECIAL = /[%{}:]/;

export function escapeTagPart(s: string): string {
  // most parts have none: a test is cheaper than a replace with a callback
  return SPECIAL.test(s) ? s.replace(/[%{}:]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase()) : s;
}
