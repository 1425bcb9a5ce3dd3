/**
 * Reading a `Retry-After` field (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date.
 *
 * @param value the field's value, or null when absent.
 * @param nowMs Unix ms, for an HTTP-date. Default Date.now().
 * @returns the wait in ms (never negative), or null when the field is absent or malformed.
 */
export function retryAfterMs(value: string | null, nowMs: number = Date.now()): number | null {
  if (value === null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isFinite(at) && /GMT$/.test(v) ? Math.max(0, at - nowMs) : null;
}
