/**
 * The built-in default configuration: the reference multi-tenant problem, used when no policies file is given.
 */
import { parseConfig, type SluiceConfig } from './load.js';

/** The file name errors in {@link DEFAULT_CONFIG_YAML} would start with. */
export const DEFAULT_CONFIG_FILE = '<built-in default>';

/** The built-in default policies file (YAML). */
export const DEFAULT_CONFIG_YAML = `\
# sluice built-in default policies: a multi-tenant API with a free and a paid tier behind one global cap.
#
# Each policy limits one key per distinct combination of its descriptors' values (here: tenant + action).
# Units: limit and burst are tokens (one request costs 1 unless the check says otherwise); period is a
# positive integer of ms or <digits><unit> with unit ms, s, m, h or d ("500ms", "90s", "1m", "1d").
# token_bucket: the bucket holds at most \`burst\` tokens and refills continuously at \`limit\` per \`period\`.

policies:
  # Free tier: 100 requests per minute for each (tenant, action), refilled continuously (one token every
  # 600 ms). A tenant that has been idle may spend its full bucket of 100 at once, never more.
  free:
    algorithm: token_bucket
    limit: 100            # tokens refilled per period
    period: 1m            # 60 000 ms
    burst: 100            # bucket capacity, in tokens
    descriptors: [tenant, action]
    guard: global         # an admitted request must also fit the global cap below

  # Paid tier: 10 000 requests per minute for each (tenant, action); bursts are capped at 2 000 so a single
  # tenant cannot spend a whole minute's allowance in one spike.
  paid:
    algorithm: token_bucket
    limit: 10000          # tokens refilled per period
    period: 1m
    burst: 2000           # bucket capacity, in tokens
    descriptors: [tenant, action]
    guard: global

  # The aggregate guard: one bucket shared by every request of every tenant on the guarded policies, which
  # protects the backend as a whole: 200 000 requests per minute, at most 20 000 at once. It has no
  # descriptors (a single key) and no guard of its own (guards do not chain).
  global:
    algorithm: token_bucket
    limit: 200000
    period: 1m
    burst: 20000
`;

/** The parsed built-in default (a fresh copy on each call). */
export function defaultConfig(): SluiceConfig {
  return parseConfig(DEFAULT_CONFIG_YAML, DEFAULT_CONFIG_FILE);
}
