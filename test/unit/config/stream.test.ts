import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config/load.js';

const BASE = 'policies:\n  p: { algorithm: fixed_window, limit: 1, period: 1s }\n';

describe('server.stream in the policies file', () => {
  it('takes the /v1/stream limits', () => {
    const c = parseConfig(`${BASE}server:\n  stream:\n    maxInFlight: 128\n    maxFrameBytes: 65536\n    idleTimeoutSeconds: 0\n`, 's.yaml');
    expect(c.server.stream).toStrictEqual({ maxInFlight: 128, maxFrameBytes: 65536, idleTimeoutSeconds: 0 });
  });

  it('refuses an unknown limit and a bad value, naming the path', () => {
    expect(() => parseConfig(`${BASE}server:\n  stream:\n    maxInflight: 1\n`, 's.yaml')).toThrow(/^s\.yaml: server\.stream\.maxInflight: unknown key/);
    expect(() => parseConfig(`${BASE}server:\n  stream:\n    maxInFlight: 0\n`, 's.yaml')).toThrow(/^s\.yaml: server\.stream\.maxInFlight: must be a positive safe integer \(got 0\)/);
  });
});
