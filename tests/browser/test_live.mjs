// test_live.mjs: what keeps the console's pages current and readable: lists reload by
// themselves every 5 s (the test moves the page's clock on instead of waiting) until the
// header's Pause refresh stops that (r still reloads); subscriptions appear by name in
// lists, in the replay panel's filter and in the audit log; a delivery waiting on a
// disabled subscription reads "waiting: subscription disabled", not plain FAILED.
import path from 'node:path';
import {
  ADMIN_TOKEN, ARTIFACTS, check, inBrowser, run, startOutboxd, startReceiver, step, waitFor,
} from './lib.mjs';

const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

async function main() {
  const rx = await startReceiver();
  await rx.script('/flaky', 503, 'flaky is down');
  await rx.script('/paused', 503, 'paused is down');
  const ox = await startOutboxd();
  const flaky = await ox.api('POST', '/v1/subscriptions', {
    name: 'flaky-partner', event_types: ['flaky.*'], endpoint: `${rx.url}/flaky`,
    retry: { immediate: 1, permanent: [503] },
  });
  // Fails once, then waits an hour for its scheduled retry: pending, not dead.
  const paused = await ox.api('POST', '/v1/subscriptions', {
    name: 'paused-partner', event_types: ['paused.*'], endpoint: `${rx.url}/paused`,
    retry: { immediate: 1, policy: 'fixed', interval: '1h' },
  });
  const deadFlaky = async () => (await ox.api('GET', `/v1/dlq?subscription_id=${flaky.id}`)).items.length;
  const flakyEvent = async (n) => {
    await ox.api('POST', '/v1/events', { event_type: 'flaky.happened', payload: { n } });
    await waitFor(`${n} dead for flaky-partner`, async () => (await deadFlaky()) === n);
  };
  await ox.api('POST', '/v1/events', { event_type: 'paused.happened', payload: { n: 1 } });
  await flakyEvent(1);
  const waiting = await waitFor('the paused-partner delivery failed once', async () => {
    const d = (await ox.api('GET', `/v1/deliveries?subscription_id=${paused.id}`)).items[0];
    return d && d.status === 'FAILED' && !d.dead && d.next_attempt_at ? d : null;
  });
  await ox.api('PATCH', `/v1/subscriptions/${paused.id}`, { enabled: false });

  await inBrowser(ox.url, (page) => shot(page, 'live-failure'), async ({ page, requests }) => {
    await page.clock.install();
    await step('sign in', async () => {
      await page.goto(`${ox.url}/console/#/overview`);
      await page.getByLabel('API token').fill(ADMIN_TOKEN);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Overview', exact: true }).waitFor();
    });

    await step('a delivery of a disabled subscription reads "waiting: subscription disabled"', async () => {
      await page.evaluate((id) => { location.hash = `/deliveries?subscription_id=${id}`; }, paused.id);
      const row = page.locator(`table.list tbody tr[data-id="${waiting.id}"]`);
      await waitFor('the waiting status', async () => (await row.getByTestId('status').innerText()) === 'waiting: subscription disabled');
      check((await row.innerText()).includes('paused-partner'), 'the subscription by name');
      await row.locator('a').first().click();
      await page.getByRole('heading', { name: /^Delivery / }).waitFor();
      await waitFor('the waiting status on the delivery', async () => (await page.getByTestId('status').innerText()) === 'waiting: subscription disabled');
      const text = await page.locator('table.kv').first().innerText();
      check(text.includes('paused-partner is disabled') && text.includes('sent again once it is enabled'), `why it waits: ${text}`);
      await shot(page, 'live-waiting');
    });

    const rows = page.locator('table.list tbody tr[data-id]');
    await step('the DLQ reloads by itself', async () => {
      await page.evaluate((id) => { location.hash = `/dlq?subscription_id=${id}`; }, flaky.id);
      // the page before (a delivery of paused-partner) may still be on screen for a moment:
      // wait for the list of this subscription's dead deliveries
      await waitFor('1 row', async () => (await rows.count()) === 1 &&
        (await page.locator('h1').first().innerText()) === 'Dead-letter queue' &&
        !(await rows.first().innerText()).includes('paused-partner'));
      // named once the subscriptions' list has come (its own request, answered apart)
      await waitFor('named in the list', async () => (await rows.first().innerText()).includes('flaky-partner'), 10000);
      await flakyEvent(2);
      await page.clock.fastForward(6000);
      await waitFor('2 rows without a reload', async () => (await rows.count()) === 2);
    });

    await step('Pause refresh stops it; r reloads; Resume starts it again', async () => {
      await page.getByRole('button', { name: 'Pause refresh' }).click();
      check(await page.getByRole('button', { name: 'Resume refresh' }).getAttribute('aria-pressed') === 'false', 'the toggle shows paused');
      const before = requests.length;
      await flakyEvent(3);
      await page.clock.fastForward(12000);
      await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
      const reloads = requests.slice(before).filter((u) => u.includes('/v1/dlq'));
      check(reloads.length === 0 && (await rows.count()) === 2, `paused: no reload (${reloads.join(', ')}), still 2 rows`);
      check(await page.evaluate(() => localStorage.getItem('outboxd.refresh')) === 'paused', 'kept in local storage');
      await page.locator('h1').click();
      await page.keyboard.press('r');
      await waitFor('3 rows after r', async () => (await rows.count()) === 3);
      await page.getByRole('button', { name: 'Resume refresh' }).click();
      await flakyEvent(4);
      await page.clock.fastForward(6000);
      await waitFor('4 rows after resuming', async () => (await rows.count()) === 4);
    });

    await step('the replay panel names the subscription', async () => {
      await page.getByRole('button', { name: 'Replay all matching…' }).click();
      await waitFor('the dry run', async () => (await page.getByTestId('dry-run').innerText()).includes('Dry run: 4'));
      let f = '';
      await waitFor('the filter in words', async () => {
        f = await page.getByTestId('bulk-filter').innerText();
        return f === 'Filter: subscription flaky-partner';
      }, 10000).catch(() => check(false, `filter in words: ${f}`));
      await shot(page, 'live-replay-panel');
      await page.getByRole('button', { name: 'Cancel', exact: true }).click();
    });

    await step('another filter shows none of the rows before it while its answer loads', async () => {
      // the answer for the new filter is held until the check below is done: the four
      // rows of flaky-partner must not stay on screen (to be ticked and replayed) under it
      let release;
      const held = new Promise((r) => { release = r; });
      const newFilter = (u) => u.pathname === '/v1/dlq' && u.searchParams.get('subscription_id') === paused.id;
      await page.route(newFilter, async (route) => { await held; await route.continue(); });
      await page.evaluate((id) => { location.hash = `/dlq?subscription_id=${id}`; }, paused.id);
      const shown = page.locator('.toolbar .muted');
      await waitFor('the new filter loading', async () => (await shown.innerText()) === 'Loading…');
      check((await rows.count()) === 0, `no row of the filter before: ${await rows.count()} shown`);
      release();
      await page.getByTestId('empty').waitFor();
      check((await shown.innerText()) === '0 shown', `its own answer: ${await shown.innerText()}`);
      await page.unroute(newFilter);
    });

    await step('the audit log names the subscription it changed', async () => {
      await page.getByRole('link', { name: 'Audit log' }).click();
      await waitFor('the update, by name', async () => {
        const row = page.locator('table.list tbody tr', { hasText: 'subscription.update' });
        return (await row.count()) === 1 && (await row.innerText()).includes('paused-partner');
      });
    });
  });
}

run(main);
