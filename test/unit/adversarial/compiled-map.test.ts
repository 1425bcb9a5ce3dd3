/**
 * ADVERSARIAL (expected to FAIL on 3b83af1): createLimiter trusts a Map of "compiled" policies blindly
 * (limiter.ts: `opts.policies instanceof Map ? opts.policies : compilePolicies(...)`). Nothing re-checks the
 * names (which become RateLimit / RateLimit-Policy header values) or the exactness bounds, so a hand-built Map
 * gets unchecked 64-bit math and CR/LF into response headers (header injection through the limit name).
 */
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import type { CompiledPolicy } from '../../../src/config/policy-spec.js';

describe('createLimiter with a Map of policies', () => {
  it('refuses a policy the loader would refuse', async () => {
    const p = {
      name: 'p', version: '1', descriptors: [], guard: null, consistency: 'local', onStoreError: 'local',
      limits: [{ algorithm: 'token_bucket', algorithmCode: 0, limit: 2 ** 40, periodMs: 2 ** 40, burst: 2 ** 40, name: 'p"\r\nSet-Cookie: pwn=1\r\nX: "' }],
    } as unknown as CompiledPolicy;
    const r = await createLimiter({ policies: new Map([['p', p]]), maxKeys: 16 }).then(
      async (l) => { await l.close(); return 'accepted'; },
      (e: { code: string }) => e.code,
    );
    // actual on 3b83af1: 'accepted' (and the check admits/denies on wrapped 64-bit numbers)
    expect(r).toBe('CONFIG');
  });
});
