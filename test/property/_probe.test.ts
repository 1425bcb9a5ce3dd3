import { it } from 'vitest';
import { createLimiter } from '../../src/index.js';
it('probe', async () => {
  for (const [shards, maxKeys] of [[0, undefined], [0, 64], [2, 64], [2, undefined]] as const) {
    const t0 = performance.now();
    for (let i = 0; i < 5; i++) {
      const l = await createLimiter({ policies: { p: { algorithm: 'gcra', limit: 0, period: 1000, burst: 5 } }, shards, maxKeys, clock: () => 1000 });
      const d = await l.check({ policy: 'p', key: 'k', cost: 1 });
      const p = await l.check({ policy: 'p', key: 'k', cost: 0 });
      if (i === 0) console.log(JSON.stringify(d), JSON.stringify(p));
      const t1 = performance.now();
      for (let j = 0; j < 200; j++) await l.check({ policy: 'p', key: 'k', cost: 1 });
      if (i === 0) console.log('200 awaited checks', performance.now() - t1);
      await l.close();
    }
    console.log(shards, maxKeys, (performance.now() - t0) / 5);
  }
});
