import type { HttpRequest } from 'uWebSockets.js';
import type { CheckRequest } from '../types/decision.js';
import type { CompiledDescriptor, CompiledPolicy } from '../config/policy-spec.js';
import { checkFromQuery } from '../wire/codec.js';
import { takeWait } from '../wire/delay.js';
import { invalidArgument, notFound, unknownPolicy } from '../util/errors.js';

/** The forward-auth route; `/v1/auth/<policy>/<original path>` is its path form. */
export const AUTH_PATH = '/v1/auth';

/**
 * The check a forward-auth request stands for (nginx auth_request, Caddy forward_auth, Traefik ForwardAuth,
 * Envoy ext_authz HTTP). Two forms:
 *
 * - `/v1/auth?policy=P[&key=K][&cost=N][&name=value...]`: the query is the auth URL the gateway is configured
 *   with. `cost=` is accepted only from a policy with `authCost: query` (else the policy's fixed authCost,
 *   default 1); `key=` only for a policy whose descriptors (if any) all come from the query (it stands for
 *   them all); a descriptor is read from its declared source only: `from: query` from the query,
 *   `from: header` from its header (a query parameter of its name is refused, never preferred).
 * - `/v1/auth/P[/rest]`: what Envoy's ext_authz sends with `path_prefix: /v1/auth/P` (the original path is
 *   appended). The query string here is the original request's, so none of it is read: the policy is the
 *   first segment, the cost its fixed authCost, descriptors come from headers or the path (`from: path`:
 *   `/rest`, as sent, `/` when absent).
 *
 * Of a multi-hop `X-Forwarded-For`, the first (client) address is used. Reads everything synchronously:
 * uWS's request object dies at the first await.
 * @throws SluiceError INVALID_ARGUMENT naming the parameter, header or descriptor; UNKNOWN_POLICY.
 */
export function authCheck(req: HttpRequest, policies: ReadonlyMap<string, CompiledPolicy>): CheckRequest {
  const url = req.getUrl();
  if (url.length > AUTH_PATH.length) return pathCheck(req, url, policies);
  const query = req.getQuery() ?? '';
  const check = checkFromQuery(query);
  const policy = policyNamed(policies, check.policy);
  // onLimit: delay's wait=0 (answer at once with the delay in Sluice-Delay-Ms); set on the check returned
  const hold = takeWait(check, policies);
  if (policy.authCost === 'query') {
    // as given (default 1)
  } else if (hasParam(query, 'cost')) {
    throw invalidArgument('cost', `is not accepted on ${AUTH_PATH} for policy "${policy.name}": each request costs ${policy.authCost} (set authCost: query to let the auth URL choose)`);
  } else {
    check.cost = policy.authCost;
  }
  if (check.key !== undefined) {
    // A key= stands for every descriptor at once: as good as query descriptors, never a way around a header.
    const fixed = policy.descriptors.find((d) => d.from !== 'query');
    if (fixed === undefined) return hold ? check : { ...check, wait: false } as CheckRequest;
    throw invalidArgument('key', `is not accepted on ${AUTH_PATH} for policy "${policy.name}": descriptor "${fixed.name}" is read from ${sourceOf(fixed)}, never from the query`);
  }
  if (policy.descriptors.length === 0) throw invalidArgument('key', 'is required (the policy has no descriptors)');
  const given = check.descriptors;
  const descriptors = Object.create(null) as Record<string, string>;
  if (given !== undefined) {
    for (const name of Object.keys(given)) {
      const d = policy.descriptors.find((x) => x.name === name);
      if (d === undefined) throw invalidArgument(name, `is not a descriptor of policy "${policy.name}"`);
      if (d.from !== 'query') throw invalidArgument(name, `is read from ${sourceOf(d)} for policy "${policy.name}", never from the query`);
      descriptors[name] = given[name];
    }
  }
  for (const d of policy.descriptors) {
    if (d.from === 'query') {
      if (!Object.hasOwn(descriptors, d.name)) throw invalidArgument(d.name, 'is required (as a query parameter: the descriptor has no header)');
    } else if (d.from === 'header') {
      descriptors[d.name] = headerValue(req, d);
    } else {
      throw invalidArgument(d.name, `is read from the path: use ${AUTH_PATH}/${policy.name}/... (the original request's path appended)`);
    }
  }
  const out = { policy: check.policy, descriptors, cost: check.cost };
  return hold ? out : { ...out, wait: false } as CheckRequest;
}

/** `/v1/auth/<policy>[/rest]`: nothing is read from the query (see {@link authCheck}). */
function pathCheck(req: HttpRequest, url: string, policies: ReadonlyMap<string, CompiledPolicy>): CheckRequest {
  if (url.charCodeAt(AUTH_PATH.length) !== 0x2f /* / */) throw notFound(url);
  const slash = url.indexOf('/', AUTH_PATH.length + 1);
  const name = url.slice(AUTH_PATH.length + 1, slash < 0 ? url.length : slash);
  if (name === '') throw invalidArgument('policy', `is required: ${AUTH_PATH}/<policy>/...`);
  const policy = policyNamed(policies, name);
  const rest = slash < 0 ? '/' : url.slice(slash);
  if (policy.authCost === 'query') {
    throw invalidArgument('cost', `policy "${name}" takes its cost from the query (authCost: query), which ${AUTH_PATH}/${name}/... does not read (it is the original request's)`);
  }
  if (policy.descriptors.length === 0) {
    throw invalidArgument('key', `policy "${name}" has no descriptors, and ${AUTH_PATH}/${name}/... reads no key= (its query is the original request's): declare descriptors from headers or the path`);
  }
  const descriptors = Object.create(null) as Record<string, string>;
  for (const d of policy.descriptors) {
    if (d.from === 'header') descriptors[d.name] = headerValue(req, d);
    else if (d.from === 'path') {
      if (rest.includes('\uFFFD')) throw invalidArgument('path', 'is not well-formed UTF-8 (percent-encode bytes outside ASCII)');
      descriptors[d.name] = rest;
    } else {
      throw invalidArgument(d.name, `is read from the query, which ${AUTH_PATH}/${name}/... does not read (it is the original request's): declare a header or from: path, or use ${AUTH_PATH}?policy=${name}`);
    }
  }
  return { policy: name, descriptors, cost: policy.authCost };
}

function policyNamed(policies: ReadonlyMap<string, CompiledPolicy>, name: string): CompiledPolicy {
  const policy = policies.get(name);
  if (policy === undefined) throw unknownPolicy(name);
  return policy;
}

function sourceOf(d: CompiledDescriptor): string {
  return d.from === 'header' ? `header ${d.header}` : 'the path';
}

/**
 * A header descriptor's value; of `X-Forwarded-For`, the first hop. Empty counts as missing. A header sent on
 * more than one field line is refused, X-Forwarded-For excepted (a list, whose lines join in order: its first
 * hop is the first line's): uWS reads the first line, so a gateway that added its own line after the client's
 * would have let the client choose the key.
 */
function headerValue(req: HttpRequest, d: CompiledDescriptor): string {
  const name = d.header!;
  let v = req.getHeader(name);
  if (name === 'x-forwarded-for') v = v.split(',')[0].trim();
  else if (v !== '') {
    let lines = 0;
    req.forEach((k) => {
      if (k === name) lines++;
    });
    if (lines > 1) throw invalidArgument(name, `header is given ${lines} times (descriptor "${d.name}"): send it once`);
  }
  if (v === '') throw invalidArgument(name, `header is required (descriptor "${d.name}")`);
  return v;
}

/** Whether the query has a parameter named `name` (names decoded as checkFromQuery decodes them). */
function hasParam(query: string, name: string): boolean {
  if (!query.includes(name) && !query.includes('%')) return false;
  for (const pair of query.split('&')) {
    const eq = pair.indexOf('=');
    let n = eq < 0 ? pair : pair.slice(0, eq);
    if (n.includes('%') || n.includes('+')) {
      try {
        n = decodeURIComponent(n.replace(/\+/g, ' '));
      } catch {
        continue; // checkFromQuery has refused it already
      }
    }
    if (n === name) return true;
  }
  return false;
}
