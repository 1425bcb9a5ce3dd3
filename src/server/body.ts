import type { HttpResponse } from 'uWebSockets.js';

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
