import type { Cluster, Redis } from 'ioredis';
import { decodeState } from '../../src/store/state.js';

/**
 * A Redis-backed key's stored state as text, "w0 w1 lastSeen" (the script stores it packed: src/store/state.ts),
 * null when the key is absent; a value that is not a state is returned as it is, as text.
 */
export async function readState(client: Redis | Cluster, key: string): Promise<string | null> {
  const raw = await client.getBuffer(key);
  if (raw === null) return null;
  const s = decodeState(raw);
  return s === null ? raw.toString() : s.join(' ');
}
