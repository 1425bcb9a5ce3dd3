/**
 * sluice: may this key spend `cost` now? Exact rate-limit decisions from a WebAssembly kernel, sharded
 * across worker threads. See README.md for the semantics of each algorithm.
 */
export { createLimiter } from './limiter.js';
export type { Decision, CheckRequest } from './types/decision.js';
export type { Limiter, LimiterOptions } from './types.js';
export type { LimiterStats, LeaseStats, LeasePolicyCounts } from './types/stats.js';
export type { ReloadResult } from './types/reload.js';
export type { KeyRequest, KeyState, LimitState } from './types/keys.js';
export type { PolicySpec, LimitSpec, Algorithm, CompiledPolicy, CompiledLimit } from './config/policy-spec.js';
export { SluiceError, isSluiceError, ErrorCodes, type ErrorCode } from './util/errors.js';
export { parseDuration } from './config/duration.js';
