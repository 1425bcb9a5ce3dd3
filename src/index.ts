/**
 * sluice: may this key spend `cost` now? Exact rate-limit decisions from a WebAssembly kernel, sharded
 * across worker threads. See README.md for the semantics of each algorithm.
 */
export { createLimiter } from './limiter.js';
export type { Decision, CheckRequest, Limiter, LimiterOptions, LimiterStats, ReloadResult, LeaseStats, LeasePolicyCounts, KeyRequest, KeyState, LimitState } from './types.js';
export type { PolicySpec, LimitSpec, Algorithm, CompiledPolicy, CompiledLimit } from './config/policies.js';
export { SluiceError, isSluiceError, ErrorCodes, type ErrorCode } from './util/errors.js';
export { parseDuration } from './config/duration.js';
