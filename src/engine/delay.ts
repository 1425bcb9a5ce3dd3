/**
 * onLimit: delay's wait places: the per-instance bound on checks waiting (`maxDelayed`).
 *
 * A check on a policy with `onLimit: delay` is decided under its runtime's delayed twin (the kernel or the
 * script may admit it in debt, with a delay) only while a place is free; else it is decided as ever and a
 * check short of tokens is denied. The place is reserved when the check is queued (its decision is not
 * known yet: a batch in flight may hold several), kept when the decision says `delayMs` > 0, until the
 * limiter's clock reaches the time it is due, and given back at once otherwise. A transport that holds the
 * answer frees the place early when its connection closes ({@link DelayPlaces.release}); the tokens are not
 * given back: they were reserved at decision time, exactly as an admission spends them.
 */
import type { Decision } from '../types/decision.js';
import type { DelayStats } from '../types/stats.js';
import type { PolicyRuntime } from './runtime.js';

/** The script's per-leg group-length argument carries the leg's maxDelayMs above the group length (lua/check.lua). */
export const SCRIPT_DELAY_SHIFT = 65536;

/** Default bound on checks waiting at once per limiter (library option `maxDelayed`, file `engine.maxDelayed`). */
export const DEFAULT_MAX_DELAYED = 10_000;

interface Place {
  /** Unix ms (the limiter's clock) from which the place is free. */
  due: number;
  open: boolean;
}

type Resolve = (d: Decision) => void;
type Reject = (e: Error) => void;


export class DelayPlaces {
  private reserved = 0;
  private held = 0;
  /** Checks decided without delay because every place was taken. */
  private full = 0;
  /** Held places, a binary min-heap by due time. */
  private readonly heap: Place[] = [];
  private readonly placeOf = new WeakMap<Decision, Place>();

  constructor(readonly max: number, private readonly clock: () => number) {}

  /** The runtime a check on `rt` is decided under: its delayed twin with a place reserved, else `rt` itself. */
  reserve(rt: PolicyRuntime): PolicyRuntime {
    if (rt.delayed === null) return rt;
    this.sweep(this.now());
    if (this.held + this.reserved >= this.max) {
      this.full++;
      return rt;
    }
    this.reserved++;
    return rt.delayed;
  }

  /**
   * Wraps the last resolve and reject pushed (a check decided under a delayed twin), so that its outcome
   * settles its place: kept while its delay runs, else freed. Allocates two closures: delay policies only.
   */
  track(resolves: Resolve[], rejects: Reject[]): void {
    const i = resolves.length - 1;
    const resolve = resolves[i], reject = rejects[i];
    resolves[i] = (d: Decision): void => {
      this.settled(d);
      resolve(d);
    };
    rejects[i] = (e: Error): void => {
      this.reserved--;
      reject(e);
    };
  }

  private settled(d: Decision): void {
    this.reserved--;
    const delay = d.delayMs;
    if (delay === undefined || delay <= 0) return;
    const p: Place = { due: this.now() + delay, open: true };
    this.held++;
    this.push(p);
    this.placeOf.set(d, p);
  }

  /** Frees the place of delayed decision `d` before it is due (its caller went away). True if it was held. */
  release(d: Decision): boolean {
    const p = this.placeOf.get(d);
    if (p === undefined || !p.open) return false;
    p.open = false;
    this.held--;
    return true;
  }

  stats(): DelayStats {
    this.sweep(this.now());
    return { waiting: this.held, reserved: this.reserved, max: this.max, full: this.full };
  }

  private now(): number {
    try {
      const t = this.clock();
      return Number.isFinite(t) ? t : 0;
    } catch {
      return 0; // the batch's own clock read reports a broken clock; a place is then kept until swept later
    }
  }

  /** Frees every place due by `now`. */
  private sweep(now: number): void {
    const h = this.heap;
    while (h.length > 0 && h[0].due <= now) {
      const p = this.pop();
      if (p.open) {
        p.open = false;
        this.held--;
      }
    }
  }

  private push(p: Place): void {
    const h = this.heap;
    let i = h.length;
    h.push(p);
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (h[up].due <= p.due) break;
      h[i] = h[up];
      i = up;
    }
    h[i] = p;
  }

  private pop(): Place {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= h.length) break;
        const c = l + 1 < h.length && h[l + 1].due < h[l].due ? l + 1 : l;
        if (h[c].due >= last.due) break;
        h[i] = h[c];
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}

/**
 * Waits out decision `d`'s delay (real time, setTimeout), then frees its place; resolves at once for a
 * decision without one. An abort of `signal` frees the place and rejects with the signal's reason.
 */
export function waitDelay(places: DelayPlaces, d: Decision, signal?: AbortSignal): Promise<Decision> {
  const ms = d.delayMs;
  if (ms === undefined || ms <= 0) return Promise.resolve(d);
  return new Promise<Decision>((resolve, reject) => {
    if (signal?.aborted) {
      places.release(d);
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      places.release(d);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      places.release(d);
      resolve(d);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
