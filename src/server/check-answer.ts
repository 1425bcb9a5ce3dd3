/**
 * A check's decision written as an HTTP answer: `/v1/check`'s JSON body (always 200), or `/v1/auth`'s status and
 * headers only. The common answer's bytes come prebuilt per policy from src/wire/answer.ts; the rare ones
 * (a reason, degraded, a delay, shadow, staleness, an unknown limit) are written as strings.
 */
import type { HttpResponse } from 'uWebSockets.js';
import type { CheckRequest, Decision } from '../types/decision.js';
import type { CompiledLimit, CompiledPolicy } from '../config/policy-spec.js';
import { decisionJson } from '../wire/codec.js';
import { bindingLimit, rateLimitHeader, rateLimitPolicyHeader, retryAfterSeconds } from '../wire/headers.js';
import { AnswerBytes, answerTable, type PolicyAnswers } from '../wire/answer.js';
import { statusLine, type Exchange, type Exchanges, type ResponseCounter } from './exchange.js';

/** Per policy name of one policy set: `RateLimit-Policy` values, and the answers' fixed bytes. */
interface AnswerTables {
  headers: Map<string, string>;
  answers: Map<string, PolicyAnswers>;
}

/**
 * Writes checks' decisions for one server. `auth` 0 writes the decision as JSON (/v1/check, always 200), else
 * it is the status to send (/v1/auth: 200, or the deny status) with the headers only. `set`: the policies in
 * force when the check was issued, whose headers the answer carries, so that an answer written after a reload
 * never pairs the old decision with new headers.
 */
export class CheckAnswers {
  /** Per policy set, per policy name: the `RateLimit-Policy` value and the answers' fixed bytes. */
  private readonly answerTables = new WeakMap<ReadonlyMap<string, CompiledPolicy>, AnswerTables>();
  private tables: AnswerTables = { headers: new Map(), answers: new Map() };
  private tablesOf: ReadonlyMap<string, CompiledPolicy> | null = null;
  /** The bytes of the common answer (one at a time: cork runs its callback at once). */
  private readonly answerBytes = new AnswerBytes();
  // The answer is written by one shared function through these, so that an answer allocates no closure for
  // cork: cork runs its callback at once, and nothing in it writes another answer.
  private wRes: HttpResponse | null = null;
  private wDecision: Decision | null = null;
  private wCheck: CheckRequest | null = null;
  private wSet: ReadonlyMap<string, CompiledPolicy> | null = null;
  private wStatus = 0;

  constructor(private readonly exchanges: Exchanges, private readonly metrics: ResponseCounter) {}

  /** Answers a check awaited in exchange `x` with its decision (unless the client left). */
  answer(x: Exchange, d: Decision, req: CheckRequest, auth: number, set: ReadonlyMap<string, CompiledPolicy>): void {
    if (x.aborted) return;
    x.aborted = true; // answered: a later abort must not count twice
    this.answerNow(x.res, d, req, auth, set);
    this.exchanges.finish();
  }

  /**
   * {@link answer} with no exchange. `inHandler`: called from the route's handler itself, where uWS has the
   * socket corked already (as bare uWS servers answer), so the writes need no cork() call of their own.
   */
  answerNow(res: HttpResponse, d: Decision, req: CheckRequest, auth: number, set: ReadonlyMap<string, CompiledPolicy>, inHandler = false): void {
    this.wRes = res;
    this.wDecision = d;
    this.wCheck = req;
    this.wSet = set;
    this.wStatus = auth;
    try {
      if (inHandler) this.writeDecisionNow();
      else res.cork(this.writeDecisionNow);
    } finally {
      this.wRes = this.wDecision = this.wCheck = this.wSet = null;
    }
    this.metrics.response(auth === 0 ? 200 : auth);
  }

  private tablesFor(set: ReadonlyMap<string, CompiledPolicy>): AnswerTables {
    if (set !== this.tablesOf) {
      let t = this.answerTables.get(set);
      if (t === undefined) this.answerTables.set(set, (t = { headers: policyHeaderTable(set), answers: answerTable(set) }));
      this.tables = t;
      this.tablesOf = set;
    }
    return this.tables;
  }

  private readonly writeDecisionNow = (): void => {
    const d = this.wDecision!;
    const res = this.wRes!;
    const status = this.wStatus;
    const set = this.tablesFor(this.wSet!);
    const policy = this.wCheck!.policy;
    // uWS copies what it is given before it returns, so the reused buffers behind these views are free again
    const head = this.answerBytes.header(d, set.answers.get(policy), status !== 0, status === 0);
    if (head !== null) {
      if (status === 0) {
        res.writeHeader('RateLimit-Policy', head);
        res.end(this.answerBytes.json(d)!);
      } else {
        if (status !== 200) res.writeStatus(statusLine(status));
        res.writeHeader('RateLimit-Policy', head);
        res.end();
      }
      return;
    }
    // the rare decisions (reason, degraded, delay, shadow, staleness, an unknown limit): the same bytes as strings
    const rateLimit = rateLimitFields(d, set.headers.get(policy), bindingLimit(this.wSet!, policy, d.policy), status !== 0);
    if (status === 0) {
      res.writeHeader(rateLimit.name, `${rateLimit.value}\r\nContent-Type: application/json`);
      res.end(decisionJson(d));
    } else {
      if (status !== 200) res.writeStatus(statusLine(status));
      res.writeHeader(rateLimit.name, rateLimit.value);
      res.end();
    }
  };
}

/**
 * A decision's rate-limit headers as one header for one `writeHeader` call: `RateLimit-Policy` (when the
 * policy is known), `RateLimit`, `Retry-After` on a denied answer (`deniedStatus`: /v1/auth's 429 or 403)
 * with a finite wait, and `Sluice-Degraded: open | closed | local` on a strict decision Redis did not make,
 * joined by CRLF. /v1/check answers 200 whatever the decision, and Retry-After on a 200 means nothing (RFC 9110
 * §10.2.3): there the wait is RateLimit's t and the body's retryAfterMs. uWS writes `name: value\r\n` as given,
 * so the bytes are those of separate calls, at one crossing into native code instead of three (names and
 * numbers here are plain ASCII: policy names are `A-Z a-z 0-9 _ . - #`).
 */
function rateLimitFields(d: Decision, policyHeader: string | undefined, limit: CompiledLimit | undefined, deniedStatus: boolean): { name: string; value: string } {
  let retry = deniedStatus && !d.allowed && d.retryAfterMs !== null ? `\r\nRetry-After: ${retryAfterSeconds(d.retryAfterMs)}` : '';
  // a strict decision Redis did not make says so, and by which rule (README "Failure behaviour")
  if (d.degraded === true) retry += `\r\nSluice-Degraded: ${d.degradedBy ?? 'local'}`;
  // onLimit: delay: admitted with a wait (a held answer comes when it is over; with wait=0 the caller waits it)
  if (d.delayMs !== undefined) retry += `\r\nSluice-Delay-Ms: ${d.delayMs}`;
  const rateLimit = rateLimitHeader(d, limit);
  FIELDS.name = policyHeader === undefined ? 'RateLimit' : 'RateLimit-Policy';
  FIELDS.value = policyHeader === undefined ? `${rateLimit}${retry}` : `${policyHeader}\r\nRateLimit: ${rateLimit}${retry}`;
  return FIELDS;
}
/** {@link rateLimitFields}'s result, reused: it is read at once. */
const FIELDS = { name: '', value: '' };

function policyHeaderTable(policies: ReadonlyMap<string, CompiledPolicy>): Map<string, string> {
  const out = new Map<string, string>();
  for (const [name, p] of policies) out.set(name, rateLimitPolicyHeader(p, p.guard === null ? undefined : policies.get(p.guard)));
  return out;
}
