/**
 * `sluice validate FILE ...`: checks policies files without starting anything. Prints `FILE: ok (N policies)`
 * per good file and exits 0; otherwise prints every error found, one a line as `FILE: PATH: reason` (the
 * same messages `serve` and `replay` stop at), and exits 1.
 */
import { parseCommand } from './usage.js';
import { parseYaml, readConfigText } from '../config/load.js';
import { configFromDocument, policyPath } from '../config/schema.js';
import { isEnvoyRateLimitDocument } from '../config/envoy-ratelimit.js';
import { joinPath } from '../config/fields.js';
import { logEntriesProblems } from '../config/limits.js';
import { SLIDING_LOG_MAX_ENTRIES } from '../config/policy-spec.js';
import { isSluiceError, usage } from '../util/errors.js';

/** Most errors reported for one file (a generated file could hold thousands). */
const MAX_ERRORS = 1000;

/**
 * A valid stand-in for a policy found invalid, so that checks of the others (guards and shadowOf naming it)
 * do not report errors that only follow from the first.
 */
const STAND_IN = Object.freeze({ algorithm: 'token_bucket', limit: 1, period: 1000 });

export async function validate(argv: string[]): Promise<number> {
  const { positionals } = parseCommand('validate', argv);
  if (positionals.length === 0) throw usage('takes one or more policies files');
  let failed = false;
  for (const file of positionals) {
    const r = await validateFile(file);
    if (r.errors.length === 0) process.stdout.write(`${file}: ok (${r.policies} ${r.policies === 1 ? 'policy' : 'policies'})\n`);
    else {
      failed = true;
      for (const e of r.errors) process.stderr.write(e + '\n');
    }
  }
  return failed ? 1 : 0;
}

/** The outcome of {@link validateFile}: every error message (empty when valid) and the number of policies. */
export interface Validation {
  errors: string[];
  policies: number;
}

/**
 * Every error of a policies file. The loader stops at the first error, so this runs it again and again:
 * after each error the offending part is set aside (an invalid policy replaced by a valid stand-in, an invalid
 * entry of `server` or `engine` removed; in envoyproxy/ratelimit's format, the descriptor at fault replaced by a
 * valid stand-in rule) until the rest loads. A syntax error, or one about the document as
 * a whole, ends the search. Messages are the loader's: `FILE: PATH: reason`.
 */
export async function validateFile(file: string): Promise<Validation> {
  let raw: unknown;
  try {
    raw = parseYaml(await readConfigText(file), file);
  } catch (e) {
    if (isSluiceError(e)) return { errors: [e.message], policies: 0 };
    throw e;
  }
  const errors: string[] = [];
  const doc = structuredClone(raw);
  while (errors.length < MAX_ERRORS) {
    try {
      const config = configFromDocument(doc, file);
      // what the limiter refuses when it starts, as serve would: a sliding_log whose worst case exceeds the
      // file's engine.maxLogEntries
      const maxLogEntries = config.engine.maxLogEntries ?? SLIDING_LOG_MAX_ENTRIES;
      for (const x of logEntriesProblems(config.policies, maxLogEntries)) errors.push(`${file}: ${policyPath({ policy: x.policy, field: x.field })}: ${x.why}`);
      return { errors, policies: errors.length === 0 ? config.policies.size : 0 };
    } catch (e) {
      if (!isSluiceError(e) || e.code !== 'CONFIG') throw e;
      errors.push(e.message);
      if (!setAside(doc, e.field)) break;
    }
  }
  return { errors, policies: 0 };
}

/** Removes what `path` points at from the document (see {@link validateFile}); false when it cannot. */
function setAside(doc: unknown, path: string | undefined): boolean {
  if (path === undefined || !isMapping(doc)) return false;
  if (isEnvoyRateLimitDocument(doc)) return setAsideEnvoy(doc, path);
  const policies = doc.policies;
  if (isMapping(policies)) {
    for (const name of Object.keys(policies)) {
      const at = joinPath('policies', name);
      if (path === at || path.startsWith(at + '.') || path.startsWith(at + '[')) {
        if (policies[name] === STAND_IN) return false;
        policies[name] = STAND_IN;
        return true;
      }
    }
  }
  // server.port, server.admin.host, engine.shards, server.unknownKey...: plain names only
  const parts = path.split('.');
  if (parts.length < 2 || parts[0] === 'policies' || !parts.every((p) => /^[A-Za-z0-9_-]+$/.test(p))) return false;
  let node: unknown = doc;
  for (const p of parts.slice(0, -1)) {
    if (!isMapping(node)) return false;
    node = node[p];
  }
  if (!isMapping(node) || !Object.hasOwn(node, parts[parts.length - 1])) return false;
  delete node[parts[parts.length - 1]];
  return true;
}

/**
 * The same for envoyproxy/ratelimit's format: the descriptor an error points into
 * (`descriptors[1].descriptors[0].rate_limit.unit`) becomes a valid stand-in rule under a key of its own,
 * keeping its children so that their errors are found too; a `descriptors` that is not a list is removed;
 * `domain` and unknown top-level keys likewise.
 */
function setAsideEnvoy(doc: Record<string, unknown>, path: string): boolean {
  if (path === 'domain') {
    if (doc.domain === ENVOY_STAND_IN_DOMAIN) return false;
    doc.domain = ENVOY_STAND_IN_DOMAIN;
    return true;
  }
  if (/^[A-Za-z0-9_-]+$/.test(path) && path !== 'descriptors' && Object.hasOwn(doc, path)) {
    delete doc[path];
    return true;
  }
  const steps = /^(?:descriptors\[\d+\]\.)*descriptors\[\d+\]/.exec(path);
  let parent: Record<string, unknown> = doc;
  let node: unknown = doc;
  let index = -1;
  for (const m of (steps?.[0] ?? '').matchAll(/descriptors\[(\d+)\]/g)) {
    if (!isMapping(node) || !Array.isArray(node.descriptors)) return false;
    parent = node;
    index = Number(m[1]);
    node = node.descriptors[index];
  }
  const rest = path.slice(steps?.[0].length ?? 0);
  if (rest === '.descriptors' || (steps === null && path === 'descriptors')) {
    // the list itself is at fault (not a list, or no rule in it): drop it
    const owner = steps === null ? doc : node;
    if (!isMapping(owner) || !Object.hasOwn(owner, 'descriptors')) return false;
    delete owner.descriptors;
    return true;
  }
  if (index < 0 || !Array.isArray(parent.descriptors)) return false;
  if (isMapping(node) && typeof node.key === 'string' && node.key.startsWith(ENVOY_STAND_IN_KEY)) return false;
  const children = isMapping(node) && Array.isArray(node.descriptors) ? node.descriptors : undefined;
  parent.descriptors[index] = {
    key: `${ENVOY_STAND_IN_KEY}${++envoyStandIns}`, rate_limit: { unit: 'second', requests_per_unit: 1 },
    ...(children === undefined ? {} : { descriptors: children }),
  };
  return true;
}

const ENVOY_STAND_IN_DOMAIN = 'sluice-validate-stand-in';
const ENVOY_STAND_IN_KEY = 'sluice-validate-stand-in-';
let envoyStandIns = 0;

function isMapping(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
