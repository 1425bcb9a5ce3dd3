/**
 * Calling into the application's own code (callbacks, observers) from inside sluice's handling, where a throw
 * must not take sluice's answer with it.
 */

/** What was thrown, as an Error: a non-Error thrown (a string, an object) is wrapped, its text the message. */
export function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

/**
 * Runs the application's callback `f`. A throw there would otherwise escape where nothing catches it (an
 * uncaught exception or an unhandled rejection) or undo the answer being given: it becomes a process warning
 * (`SluiceWarning`, `<what> threw: <message>`) instead.
 */
export function callSafely(what: string, f: () => void): void {
  try {
    f();
  } catch (thrown) {
    process.emitWarning(`${what} threw: ${asError(thrown).message}`, 'SluiceWarning');
  }
}
