import { isSluiceError } from '../util/errors.js';

/**
 * Problem details (RFC 9457, `application/problem+json`). Every error answer names the field at fault
 * when there is one, in `field` and in `detail`.
 */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  field?: string;
  code?: string;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export function problem(status: number, detail: string, field?: string, code?: string): Problem {
  const p: Problem = { type: 'about:blank', title: TITLES[status] ?? 'Error', status, detail };
  if (field !== undefined) p.field = field;
  if (code !== undefined) p.code = code;
  return p;
}

/** Maps any error to a problem: SluiceErrors carry their status and field; anything else is a 500. */
export function problemOf(e: unknown): Problem {
  if (isSluiceError(e)) return problem(e.status, e.message, e.field, e.code);
  return problem(500, 'internal error');
}

/** The error item of a batch result: the same facts without the HTTP envelope. */
export function errorItem(e: unknown): { error: { code: string; detail: string; field?: string; status: number } } {
  const p = problemOf(e);
  const error: { code: string; detail: string; field?: string; status: number } = {
    code: p.code ?? 'INTERNAL', detail: p.detail, status: p.status,
  };
  if (p.field !== undefined) error.field = p.field;
  return { error };
}
