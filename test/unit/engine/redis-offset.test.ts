import { describe, expect, it } from 'vitest';
import { RedisOffset } from '../../../src/engine/strict/redis-offset.js';

describe('RedisOffset: bounds of Redis time − local time from answered calls', () => {
  it('knows nothing before a sample', () => {
    const o = new RedisOffset();
    expect(o.upper()).toBe(Number.POSITIVE_INFINITY);
    expect(o.lower()).toBe(Number.NEGATIVE_INFINITY);
  });

  it('bounds the offset by t + 1 − s0 above and t − s1 − 1 below, keeping the tightest of a window', () => {
    const o = new RedisOffset();
    // Redis 500 ms ahead: a call sent at 1,000, answered at 1,004, decided at Redis time 1,502
    o.sample(1_502, 1_000, 1_004);
    expect(o.upper()).toBe(503);
    expect(o.lower()).toBe(497);
    // a tighter one (1 ms round trip) narrows both; a looser one changes nothing
    o.sample(2_500, 2_000, 2_001);
    expect([o.upper(), o.lower()]).toEqual([501, 498]);
    o.sample(3_510, 3_000, 3_020);
    expect([o.upper(), o.lower()]).toEqual([501, 498]);
  });

  it('ignores a sample without a Redis time (t ≤ 0)', () => {
    const o = new RedisOffset();
    o.sample(0, 1_000, 1_001);
    expect(o.upper()).toBe(Number.POSITIVE_INFINITY);
  });

  it('starts the bounds over at the first sample 10 s after they began', () => {
    const o = new RedisOffset();
    o.sample(1_500, 1_000, 1_001); // bounds begin at 1,001: upper 1,500 + 1 − 1,000 = 501, lower 1,500 − 1,001 − 1 = 498
    expect([o.upper(), o.lower()]).toEqual([501, 498]);
    // 10 s later the local clock stepped back by 300 ms: that sample's bounds replace the old ones
    o.sample(11_801, 11_000, 11_001);
    expect([o.upper(), o.lower()]).toEqual([802, 799]);
    // within the new bounds' 10 s a looser sample (upper 821, lower 769) changes nothing
    o.sample(12_820, 12_000, 12_050);
    expect([o.upper(), o.lower()]).toEqual([802, 799]);
  });

  it('clear() forgets the bounds', () => {
    const o = new RedisOffset();
    o.sample(1_500, 1_000, 1_001);
    o.clear();
    expect(o.upper()).toBe(Number.POSITIVE_INFINITY);
    expect(o.lower()).toBe(Number.NEGATIVE_INFINITY);
  });
});
