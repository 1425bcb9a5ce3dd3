import type { HttpRequest, HttpResponse } from 'uWebSockets.js';
import { bodyText } from '../wire/codec.js';
import { invalidArgument, tooLarge, unsupportedMediaType } from '../util/errors.js';

/**
 * Reads a request's whole body, copying each chunk (uWS reuses them), then calls `done` once with it; with
 * `null` as soon as it passes `max` bytes (the rest is ignored: the caller answers 413 and closes).
 */
export function readBody(res: HttpResponse, max: number, done: (body: Buffer | null) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let over = false;
  res.onData((chunk, isLast) => {
    if (over) return;
    size += chunk.byteLength;
    if (size > max) {
      over = true;
      return done(null);
    }
    chunks.push(Buffer.from(chunk.slice(0)));
    if (isLast) done(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
  });
}

/**
 * Reads a JSON request's body: one whose `Content-Type` is not application/json is refused through `fail`
 * (UNSUPPORTED_MEDIA_TYPE, 415), and so is one past `max` bytes (TOO_LARGE naming `body`, 413, with `close`: the
 * rest is not read); else `done` gets the whole body. Called in the route's handler (uWS's `req` is valid only
 * there).
 */
export function readJsonRequest(res: HttpResponse, req: HttpRequest, max: number,
  fail: (e: unknown, o?: { close: boolean }) => void, done: (body: Buffer) => void): void {
  const type = req.getHeader('content-type');
  if (!/^application\/json\s*(;|$)/i.test(type)) return fail(unsupportedMediaType(type, 'application/json'));
  readBody(res, max, (body) => (body === null ? fail(tooLarge('body', `larger than ${max} bytes`), { close: true }) : done(body)));
}

/**
 * A request body parsed as JSON.
 * @throws SluiceError INVALID_ARGUMENT naming `body` when it is not well-formed UTF-8 or not valid JSON.
 */
export function jsonBody(body: Uint8Array): unknown {
  try {
    return JSON.parse(bodyText(body));
  } catch (e) {
    throw e instanceof SyntaxError ? invalidArgument('body', `is not valid JSON (${e.message})`) : e;
  }
}
