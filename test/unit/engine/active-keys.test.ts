/**
 * The watched-key set of a region (src/engine/regions/usage.ts): keys another region runs short of are watched
 * only while the set is under half full, so they cannot crowd out the keys this region's own checks touch.
 */
import { describe, expect, it } from 'vitest';
import { ActiveKeys } from '../../../src/engine/regions/usage.js';

describe('ActiveKeys', () => {
  it('watches keys marked short elsewhere only in the first half; touched keys fill the rest', () => {
    const a = new ActiveKeys(4);
    a.touched('api', 'mine', 's:mine:0:lease');
    a.watch('api', 'far-1', 's:far-1:0:lease', 0);
    a.watch('api', 'far-2', 's:far-2:0:lease', 0); // 2 of 4 held: refused (not counted: offered every round)
    a.watch('api', 'far-1', 's:far-1:0:lease', 0); // held already: nothing changes
    expect([[...a.keys.keys()], a.overflow]).toStrictEqual([['s:mine:0:lease', 's:far-1:0:lease'], 0]);
    a.touched('api', 'mine-2', 's:mine-2:0:lease');
    a.touched('api', 'mine-3', 's:mine-3:0:lease');
    a.touched('api', 'mine-4', 's:mine-4:0:lease'); // full
    expect([a.keys.size, a.overflow]).toStrictEqual([4, 1]);
    expect([...a.keys.values()].map((e) => [e.key, e.touched, e.limitIndex])).toStrictEqual([
      ['mine', true, 0], ['far-1', false, 0], ['mine-2', true, 0], ['mine-3', true, 0],
    ]);
  });
});
