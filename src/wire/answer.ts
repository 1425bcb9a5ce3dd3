import type { Decision } from '../types/decision.js';
import type { CompiledLimit, CompiledPolicy } from '../config/policy-spec.js';
import { msUntilMoreQuota, rateLimitPolicyHeader, retryAfterSeconds, secondsUp, sfInteger, sfString } from './headers.js';

/**
 * A check's HTTP answer (its rate-limit fields and its decision JSON) as bytes, for uWS to copy: the same bytes
 * as the strings of src/wire/headers.ts and src/wire/codec.ts `decisionJson`, written into two reused buffers
 * instead of built as strings per answer. A string answer costs its pieces, their concatenation, the flattening
 * that uWS's conversion forces and a UTF-8 copy into a fresh buffer; the fixed parts here are encoded once
 * per policy and limit (`RateLimit-Policy`, `RateLimit: "name";r=`, `,"policy":"name"}`), only the numbers are
 * written per answer, and the result is a view of the buffer cached by length: nothing is allocated once
 * every length has been seen.
 *
 * Only the common decision is written here: no `reason`, `degraded`, `stalenessMs`, `shadow` or `delayMs`, a
 * binding limit of the check's policy, and every number a non-negative safe integer. For anything else
 * {@link AnswerBytes.header} returns null and the caller writes the strings (the same bytes, computed the old
 * way): those answers are rare, and two ways of writing their extra fields would be two places to get wrong.
 */

/** One binding limit's fixed parts. */
interface LimitAnswer {
  readonly limit: CompiledLimit;
  /** `<RateLimit-Policy value>\r\nRateLimit: "<name>";r=` */
  readonly head: Uint8Array;
  /** `{"allowed":true,"limit":<L>,"remaining":` and its `false` twin, for a decision whose limit is the limit's L */
  readonly admitted: Uint8Array;
  readonly denied: Uint8Array;
  /** `,"policy":"<name>"}`, and `,"retryAfterMs":0,"policy":"<name>"}` for an admitted decision */
  readonly tail: Uint8Array;
  readonly zeroTail: Uint8Array;
}

/** A policy's answers: one entry per limit a decision of it can name (its limits, then its guard's). */
export interface PolicyAnswers {
  readonly limits: readonly LimitAnswer[];
}

const UTF8 = new TextEncoder();
const bytes = (s: string): Uint8Array => UTF8.encode(s);

/** Per policy name of a set: its answers' fixed parts (built once per policy set, see the server). */
export function answerTable(policies: ReadonlyMap<string, CompiledPolicy>): Map<string, PolicyAnswers> {
  const out = new Map<string, PolicyAnswers>();
  for (const [name, p] of policies) {
    const guard = p.guard === null ? undefined : policies.get(p.guard);
    const header = rateLimitPolicyHeader(p, guard);
    const limits = guard === undefined ? p.limits : [...p.limits, ...guard.limits];
    out.set(name, {
      // the first limit of a name wins, as bindingLimit() finds it
      limits: limits.filter((l, i) => limits.findIndex((m) => m.name === l.name) === i).map((limit) => ({
        limit,
        head: bytes(`${header}\r\nRateLimit: ${sfString(limit.name)};r=`),
        admitted: bytes(`{"allowed":true,"limit":${limit.limit},"remaining":`),
        denied: bytes(`{"allowed":false,"limit":${limit.limit},"remaining":`),
        tail: bytes(`,"policy":${JSON.stringify(limit.name)}}`),
        zeroTail: bytes(`,"retryAfterMs":0,"policy":${JSON.stringify(limit.name)}}`),
      })),
    });
  }
  return out;
}

const CONTENT_TYPE = bytes('\r\nContent-Type: application/json');
const RETRY_AFTER = bytes('\r\nRetry-After: ');
const ALLOWED = bytes('{"allowed":true,"limit":');
const DENIED = bytes('{"allowed":false,"limit":');
const REMAINING = bytes(',"remaining":');
const RESET = bytes(',"resetAfterMs":');
const RETRY = bytes(',"retryAfterMs":');
const NULL = bytes('null');

/** Largest header block and body written here; a policy with a longer `RateLimit-Policy` uses the strings. */
const HEAD_BYTES = 4096;
const BODY_BYTES = 256;
/** Room for the numbers and fixed parts after a limit's head (4 numbers of at most 16 digits and their names). */
const HEAD_SLACK = 96;
/** Room for the body's fixed parts and numbers before a limit's tail. */
const BODY_SLACK = 160;

/** The rate-limit fields and decision JSON of one answer at a time, as views of reused buffers. */
export class AnswerBytes {
  private readonly head = new Uint8Array(new ArrayBuffer(HEAD_BYTES));
  private readonly body = new Uint8Array(new ArrayBuffer(BODY_BYTES));
  /** Views of `head` and `body` by length: made once per length. */
  private readonly headViews: Array<Uint8Array | undefined> = [];
  private readonly bodyViews: Array<Uint8Array | undefined> = [];
  /** The limit {@link header} found, for {@link json}. */
  private found: LimitAnswer | null = null;

  /**
   * The value of the `RateLimit-Policy` field (the policy's, then `RateLimit`, then for a denied answer with
   * `deniedStatus` Retry-After, then with `contentType` the JSON Content-Type), or null when this decision is
   * not one written here (see above). Valid until the next call.
   */
  header(d: Decision, answers: PolicyAnswers | undefined, deniedStatus: boolean, contentType: boolean): Uint8Array | null {
    this.found = null;
    if (answers === undefined || d.reason !== undefined || d.degraded !== undefined || d.delayMs !== undefined ||
      d.stalenessMs !== undefined || d.shadow !== undefined) return null;
    let a: LimitAnswer | undefined;
    const ls = answers.limits;
    for (let i = 0; i < ls.length; i++) {
      if (ls[i].limit.name === d.policy) {
        a = ls[i];
        break;
      }
    }
    if (a === undefined || a.head.length + HEAD_SLACK > HEAD_BYTES || a.zeroTail.length + BODY_SLACK > BODY_BYTES) return null;
    const { remaining, retryAfterMs } = d;
    if (!natural(remaining) || !natural(d.limit) || !natural(d.resetAfterMs) || (retryAfterMs !== null && !natural(retryAfterMs))) return null;
    let t: number;
    if (d.allowed === false) t = retryAfterMs === null ? -1 : retryAfterSeconds(retryAfterMs);
    else if (d.allowed === true) {
      const next = msUntilMoreQuota(d, a.limit);
      t = next < 0 ? -1 : sfInteger(secondsUp(next));
    } else return null;
    const b = this.head;
    b.set(a.head, 0);
    let at = writeNatural(b, a.head.length, sfInteger(remaining));
    if (t >= 0) {
      b[at] = 0x3b; // ;t=
      b[at + 1] = 0x74;
      b[at + 2] = 0x3d;
      at = writeNatural(b, at + 3, t);
    }
    if (deniedStatus && !d.allowed && retryAfterMs !== null) {
      b.set(RETRY_AFTER, at);
      at = writeNatural(b, at + RETRY_AFTER.length, retryAfterSeconds(retryAfterMs));
    }
    if (contentType) {
      b.set(CONTENT_TYPE, at);
      at += CONTENT_TYPE.length;
    }
    this.found = a;
    return (this.headViews[at] ??= b.subarray(0, at));
  }

  /**
   * The decision JSON (`decisionJson`'s bytes) of the decision {@link header} last wrote, null if it wrote
   * none. Valid until the next call.
   */
  json(d: Decision): Uint8Array | null {
    const a = this.found;
    if (a === null) return null;
    const b = this.body;
    // the fixed parts of the common case in one piece each: L is the limit's, an admitted wait is 0
    let at: number;
    if (d.limit === a.limit.limit) {
      const open = d.allowed ? a.admitted : a.denied;
      b.set(open, 0);
      at = open.length;
    } else {
      const open = d.allowed ? ALLOWED : DENIED;
      b.set(open, 0);
      at = writeNatural(b, open.length, d.limit);
      b.set(REMAINING, at);
      at += REMAINING.length;
    }
    at = writeNatural(b, at, d.remaining);
    b.set(RESET, at);
    at = writeNatural(b, at + RESET.length, d.resetAfterMs);
    if (d.retryAfterMs === 0) {
      b.set(a.zeroTail, at);
      at += a.zeroTail.length;
    } else {
      b.set(RETRY, at);
      at += RETRY.length;
      if (d.retryAfterMs === null) {
        b.set(NULL, at);
        at += NULL.length;
      } else at = writeNatural(b, at, d.retryAfterMs);
      b.set(a.tail, at);
      at += a.tail.length;
    }
    return (this.bodyViews[at] ??= b.subarray(0, at));
  }
}

/** A non-negative safe integer: written as `${n}` would write it (no sign, exponent or fraction). */
function natural(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

/** Writes the decimal digits of `n` (a non-negative safe integer) at `at`; returns the index after them. */
function writeNatural(b: Uint8Array, at: number, n: number): number {
  if (n < 10) {
    b[at] = 48 + n;
    return at + 1;
  }
  let end = at + 1;
  for (let x = n; x >= 10; x = Math.floor(x / 10)) end++;
  // Math.floor(x / 10) is exact below 2^53: x / 10 is off by less than its ulp (at most 1/8 there), which a
  // remainder of 9 tenths never crosses to the next integer
  for (let i = end - 1, x = n; i >= at; i--) {
    const q = x < 0x80000000 ? (x / 10) | 0 : Math.floor(x / 10);
    b[i] = 48 + (x - q * 10);
    x = q;
  }
  return end;
}
