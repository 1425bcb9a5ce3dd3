import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';
import { invalidArgument } from '../util/errors.js';
import { problemOf } from './problem.js';
import { replaceRoute } from './uws.js';

/**
 * Refuses requests whose body length is ambiguous before any route sees them (request smuggling, RFC 9112
 * §6.3 and §11.2): more than one Content-Length header, equal or not. uWS 20.30 frames a request by its
 * first Content-Length, so `Content-Length: 0` then a second one would make the body parse as a request of
 * its own, decided on behalf of whoever wrote it.
 *
 * Such a request is never routed. Its answer is left pending for one turn of the event loop: uWS closes a
 * connection on which another request arrives while an answer is pending, so bytes after the head (the
 * smuggled request) close the connection unparsed, unanswered; otherwise the request gets a 400 naming
 * `content-length` and the connection is closed. (Answering at once would not do: uWS goes on parsing what
 * it already read as the next request before the close takes effect.) A list of lengths in one header, and
 * Content-Length beside Transfer-Encoding, uWS itself refuses by closing the connection.
 *
 * Every route of `app` registered after this is guarded; the check walks the headers once, with no
 * allocation (the callback and its counter are module-level).
 */
export function refuseAmbiguousFraming(app: TemplatedApp): TemplatedApp {
  for (const m of ['get', 'post', 'put', 'del', 'patch', 'options', 'head', 'any'] as const) {
    const register = app[m].bind(app) as (pattern: string, handler: (res: HttpResponse, req: HttpRequest) => void) => TemplatedApp;
    replaceRoute(app, m, (pattern: string, handler: (res: HttpResponse, req: HttpRequest) => void): TemplatedApp =>
      register(pattern, (res, req) => (ambiguous(req) ? refuse(res) : handler(res, req))));
  }
  return app;
}

let lengths = 0;
const countLength = (key: string): void => {
  if (key === 'content-length') lengths++;
};

/** True when the request carries more than one Content-Length header. */
function ambiguous(req: HttpRequest): boolean {
  lengths = 0;
  req.forEach(countLength);
  return lengths > 1;
}

const REFUSAL = JSON.stringify(problemOf(invalidArgument('content-length', 'more than one Content-Length header: the body\'s length is ambiguous')));

/** Answers 400 and closes, one turn later (see above), unless uWS closed the connection meanwhile. */
function refuse(res: HttpResponse): void {
  let aborted = false;
  res.onAborted(() => (aborted = true));
  setImmediate(() => {
    if (!aborted) res.cork(() => res.writeStatus('400 Bad Request').writeHeader('Content-Type', 'application/problem+json').end(REFUSAL, true));
  });
}
