/**
 * Giving a piscina pool up for good: its workers stopped and none started after. piscina replaces a worker it
 * loses; a pool the shard layer discards (a start that failed, a shard taken down, a restart attempt that
 * failed, a close) must not get one.
 */
import type { Worker } from 'node:worker_threads';
import type { Piscina } from 'piscina';

/** Longest {@link discard} waits for a discarded pool's workers to report their exit, in ms. */
const DISCARD_EXIT_WAIT_MS = 5000;

/** Each pool's workers' exits, recorded as they appear (see {@link discard}). */
const exits = new WeakMap<Piscina, Promise<unknown>[]>();

/** Records the exit of every worker `p` starts or marks ready, from its first one on. */
export function watchExits(p: Piscina): void {
  const seen = new Set<Worker>();
  const list: Promise<unknown>[] = [];
  const add = (w: Worker): void => {
    if (seen.has(w)) return;
    seen.add(w);
    // not events.once: it settles on the worker's 'error' (its load failure), which comes before its exit
    list.push(new Promise((r) => w.once('exit', r)));
  };
  exits.set(p, list);
  const scan = (): void => { for (const w of p.threads) add(w); };
  scan();
  // the event carries piscina's view of the worker, not the Worker: read the pool's threads again
  p.on('workerCreate', scan);
}

/**
 * Stops `p`'s workers now (held and queued tasks reject) so that none is left, ever. destroy() alone can leave
 * one: a worker that failed while loading is removed from the pool before destroy() runs, but its exit can
 * arrive after destroy() has finished, and piscina answers the exit of a worker it had marked ready (every
 * first worker is) by starting a replacement into the pool it just emptied. So: destroy, wait for the exit of
 * every worker the pool ever had (bounded), and destroy again if such a replacement appeared; a replacement
 * that never became ready is not replaced in turn.
 */
export async function discard(p: Piscina): Promise<void> {
  await p.destroy();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all(exits.get(p) ?? []),
    new Promise((r) => { timer = setTimeout(r, DISCARD_EXIT_WAIT_MS); }),
  ]);
  clearTimeout(timer);
  if (p.threads.length > 0) await p.destroy();
}
