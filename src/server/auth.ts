import type { HttpRequest } from 'uWebSockets.js';
import type { CheckRequest } from '../types.js';
import type { CompiledPolicy } from '../config/policies.js';
import { checkFromQuery } from '../wire/codec.js';
import { SluiceError, invalidArgument, unknownPolicy } from '../util/errors.js';

/**
 * The check a forward-auth request stands for (nginx auth_request, Traefik ForwardAuth, Envoy ext_authz
 * HTTP). The policy and cost come from the auth URL's query (`/v1/auth?policy=free&cost=1`); the key from
 * `key=` in the query, else from the request headers the policy names per descriptor (e.g. a tenant header,
 * `x-forwarded-for`), with query values taking precedence. Of a multi-hop `X-Forwarded-For`, the first
 * (client) address is used. Reads everything synchronously: uWS's request object dies at the first await.
 * @throws SluiceError INVALID_ARGUMENT naming the parameter or header.
 */
export function authCheck(req: HttpRequest, policies: ReadonlyMap<string, CompiledPolicy>): CheckRequest {
  const check = checkFromQuery(req.getQuery() ?? '');
  if (check.key !== undefined) return check;
  const policy = policies.get(check.policy);
  if (policy === undefined) {
    throw unknownPolicy(check.policy);
  }
  if (policy.descriptors.length === 0) throw invalidArgument('key', 'is required (the policy has no descriptors)');
  const descriptors: Record<string, string> = Object.assign(Object.create(null) as Record<string, string>, check.descriptors);
  for (const d of policy.descriptors) {
    if (Object.hasOwn(descriptors, d.name)) continue;
    if (d.header === null) throw invalidArgument(d.name, 'is required (as a query parameter: the descriptor has no header)');
    let v = req.getHeader(d.header);
    if (d.header === 'x-forwarded-for') v = v.split(',')[0].trim();
    if (v === '') throw invalidArgument(d.header, `header is required (descriptor "${d.name}")`);
    descriptors[d.name] = v;
  }
  return { ...check, descriptors };
}
