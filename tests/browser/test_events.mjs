// test_events.mjs: the events page and a subscription's activity charts in Chromium, as an
// operator uses them: search events by type (exact and glob), by source and idempotency
// key, with the search in the URL (a reload keeps it); open an event and find its
// payload as sent and its deliveries, each linked to its page and its subscription;
// follow a delivery back to its event; move through the list with j / k; read a
// subscription's attempts per minute by outcome and its latency (p50, p99). The events
// page, an event and a subscription laid out at 1280 and 390 px with no sideways
// scrolling and no overlapping, squeezed or off-screen text (lib.mjs, layoutProblems). No page error, no console error, no request
// to another host. Full-page screenshots: $ARTIFACTS_DIR/layout-{events,event,
// subscription-activity}-WIDTH.png.
import path from 'node:path';
import {
  ADMIN_TOKEN, ARTIFACTS, check, inBrowser, layoutProblems, run, startOutboxd, startReceiver,
  step, waitFor,
} from './lib.mjs';

const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

async function main() {
  const rx = await startReceiver();
  // The ledger answers 200 after 40 ms (a latency the chart must show), the warehouse 503.
  const script = async (p, dflt) => {
    const r = await fetch(`${rx.url}/_control/script`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ path: p, default: dflt }),
    });
    check(r.ok, `receiver script ${p}: ${r.status}`);
  };
  await script('/ledger', { status: 200, delay_ms: 40, body: 'ok' });
  await script('/warehouse', { status: 503, body: 'the warehouse system is down for its nightly stock count' });
  const ox = await startOutboxd();

  const ledger = await ox.api('POST', '/v1/subscriptions', {
    name: 'partner-ledger-of-the-finance-department', event_types: ['order.*'], endpoint: `${rx.url}/ledger`,
  });
  const warehouse = await ox.api('POST', '/v1/subscriptions', {
    name: 'warehouse', event_types: ['order.paid'], endpoint: `${rx.url}/warehouse`,
    retry: { immediate: 1, permanent: [503] },
  });
  // As raw JSON text: the payload must show 0.10 as sent.
  const send = async (body) => {
    const r = await fetch(`${ox.url}/v1/events`, {
      method: 'POST', headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' }, body,
    });
    const text = await r.text();
    check(r.status === 202, `ingest: ${r.status} ${text}`);
    return JSON.parse(text).ids;
  };
  await send(JSON.stringify({ events: [
    { event_type: 'user.signed_up', source: 'crm', source_event_id: 'u-77', payload: { user: 77 } },
    { event_type: 'invoice.created.for-a-customer-with-a-long-type', source: 'billing-service-of-the-accounting-department', payload: { n: 1 } },
    ...Array.from({ length: 3 }, (_, i) => ({ event_type: 'order.created', source: 'shop', source_event_id: `c-${i}`, payload: { order: 1040 + i } })),
  ] }));
  const [paid] = await send('{"event_type":"order.paid","source":"shop","source_event_id":"o-1042","payload":{"order":1042,"total":0.10}}');
  await waitFor('the ledger got 4, the warehouse\'s one dead', async () =>
    (await ox.api('GET', `/v1/deliveries?subscription_id=${ledger.id}&status=PROCESSED`)).items.length === 4 &&
    (await ox.api('GET', `/v1/dlq?subscription_id=${warehouse.id}`)).items.length === 1);

  await inBrowser(ox.url, (page) => shot(page, 'events-failure'), async ({ page }) => {
    const rows = page.locator('table[data-testid="events"] tbody tr[data-id]');
    await step('sign in; the events page lists every event, newest first', async () => {
      await page.goto(`${ox.url}/console/#/events`);
      await page.getByLabel('API token').fill(ADMIN_TOKEN);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Events', exact: true }).waitFor();
      await waitFor('6 events', async () => (await rows.count()) === 6);
      check(await rows.first().getAttribute('data-id') === paid, 'the newest (order.paid) first');
      const none = await rows.filter({ hasText: 'user.signed_up' }).getByTestId('counts').innerText();
      check(none === 'none', `no delivery for user.signed_up: ${none}`);
    });

    await step('search by type: the event, with its deliveries counted; the search is in the URL', async () => {
      await page.getByLabel('Event type').fill('order.paid');
      await page.getByRole('button', { name: 'Search', exact: true }).click();
      await waitFor('one event', async () => (await rows.count()) === 1);
      check(new URL(page.url()).hash === '#/events?event_type=order.paid', `URL: ${page.url()}`);
      const counts = await rows.first().getByTestId('counts').innerText();
      check(/1 processed/.test(counts) && /1 dead/.test(counts), `counts: ${counts}`);
      await page.reload();
      await waitFor('one event after a reload', async () => (await rows.count()) === 1 &&
        (await rows.first().getAttribute('data-id')) === paid);
      check(await page.getByLabel('Event type').inputValue() === 'order.paid', 'the form keeps the search');
    });

    await step('a glob, a source and an idempotency key', async () => {
      await page.evaluate(() => { location.hash = '#/events?event_type=order.*'; });
      await waitFor('the four orders', async () => (await rows.count()) === 4);
      await page.getByRole('button', { name: 'Clear' }).click();
      await waitFor('all six', async () => (await rows.count()) === 6);
      await page.getByLabel('Source', { exact: true }).fill('shop');
      await page.getByLabel('Source event id').fill('o-1042');
      await page.getByRole('button', { name: 'Search', exact: true }).click();
      await waitFor('the one paid order', async () => (await rows.count()) === 1 &&
        (await rows.first().getAttribute('data-id')) === paid);
      await page.getByLabel('Source event id').fill('nobody');
      await page.getByRole('button', { name: 'Search', exact: true }).click();
      await waitFor('nothing', async () => (await page.getByTestId('empty').count()) === 1);
    });

    const deliveries = page.locator('table[data-testid="event-deliveries"] tbody tr[data-id]');
    await step('an event: its payload as sent and its deliveries, linked', async () => {
      await page.evaluate(() => { location.hash = '#/events?event_type=order.paid'; });
      await waitFor('one event', async () => (await rows.count()) === 1);
      await rows.first().getByRole('link').first().click();
      await page.getByRole('heading', { name: /^Event / }).waitFor();
      check(new URL(page.url()).hash === `#/events/${paid}`, `URL: ${page.url()}`);
      const kv = await page.getByTestId('event').innerText();
      check(kv.includes('order.paid') && kv.includes('shop') && kv.includes('o-1042'), `event: ${kv}`);
      await waitFor('two deliveries', async () => (await deliveries.count()) === 2);
      // the subscriptions' names come from a request of their own, maybe after the rows
      await waitFor('the subscriptions named', async () =>
        (await page.getByTestId('event-deliveries').innerText()).includes('warehouse'));
      const text = await page.getByTestId('event-deliveries').innerText();
      check(text.includes('partner-ledger-of-the-finance-department') && text.includes('PROCESSED'), `ledger's delivery: ${text}`);
      check(text.includes('warehouse') && text.includes('DEAD') && text.includes('503'), `warehouse's delivery: ${text}`);
      const payload = await page.getByTestId('payload').innerText();
      check(payload.includes('"total": 0.10') && payload.includes('1042'), `payload as sent: ${payload}`);
    });

    await step('a delivery of it, and back to the event', async () => {
      const dead = deliveries.filter({ hasText: 'DEAD' });
      const id = await dead.getAttribute('data-id');
      await dead.getByRole('link').first().click();
      await page.getByRole('heading', { name: /^Delivery / }).waitFor();
      check(new URL(page.url()).hash === `#/deliveries/${id}`, `URL: ${page.url()}`);
      await page.getByRole('link', { name: paid }).click();
      await page.getByRole('heading', { name: /^Event / }).waitFor();
      check(new URL(page.url()).hash === `#/events/${paid}`, `back on the event: ${page.url()}`);
    });

    await step('g e opens the events page; j j Enter opens the second event', async () => {
      await page.keyboard.press('g');
      await page.keyboard.press('e');
      await waitFor('the events page', async () => new URL(page.url()).hash === '#/events' && (await rows.count()) === 6);
      const second = await rows.nth(1).getAttribute('data-id');
      await page.keyboard.press('j');
      await page.keyboard.press('j');
      await page.keyboard.press('Enter');
      await waitFor('the second event', async () => new URL(page.url()).hash === `#/events/${second}`);
    });

    const activity = page.getByTestId('activity');
    await step('a subscription\'s attempts per minute and their latency', async () => {
      await page.evaluate((id) => { location.hash = `#/subscriptions/${id}`; }, ledger.id);
      await waitFor('its four attempts in the chart', async () =>
        (await activity.locator('[data-chart="attempts"] [data-series="succeeded"]').count()) === 1 &&
        (await activity.locator('[data-chart="attempts"] [data-series="succeeded"]').innerText()) === '4');
      check(await activity.locator('[data-series="server_error"]').innerText() === '0', 'no failure of the ledger');
      const p50 = await activity.locator('[data-series="latency_p50_ms"]').innerText();
      const p99 = await activity.locator('[data-series="latency_p99_ms"]').innerText();
      const ms = (t) => Number(t.replace(' ms', ''));
      check(/^\d+ ms$/.test(p50) && /^\d+ ms$/.test(p99) && ms(p50) >= 40 && ms(p99) >= ms(p50), `latency: p50 ${p50}, p99 ${p99}`);
      check(await activity.locator('[data-chart="latency"] polyline, [data-chart="latency"] circle').count() >= 2, 'a p50 and a p99 mark');
      // the warehouse's chart: its one failure, none of the ledger's successes
      await page.evaluate((id) => { location.hash = `#/subscriptions/${id}`; }, warehouse.id);
      await waitFor('the warehouse\'s failure', async () =>
        (await activity.locator('[data-series="server_error"]').count()) === 1 &&
        (await activity.locator('[data-series="server_error"]').innerText()) === '1' &&
        (await activity.locator('[data-series="succeeded"]').innerText()) === '0');
    });

    await step('a payload search: the events whose payload matches, and how many were read', async () => {
      await page.evaluate(() => { location.hash = '#/events'; });
      await waitFor('every event', async () => (await rows.count()) === 6);
      await page.getByLabel(/Payload matches/).fill('{"order": 1042, "total": 0.1}');
      await page.getByRole('button', { name: 'Search', exact: true }).click();
      await waitFor('order 1042 paid alone (0.10 equals 0.1)', async () => (await rows.count()) === 1 &&
        (await rows.first().getAttribute('data-id')) === paid);
      check((await page.getByTestId('shown').innerText()).includes('1 found among 6 events read'), await page.getByTestId('shown').innerText());
      await page.getByRole('button', { name: 'Clear' }).click();
      await waitFor('every event again', async () => (await rows.count()) === 6);
    });

    await step('event types: each with how many subscriptions take it, none for a type nobody takes', async () => {
      await page.evaluate(() => { location.hash = '#/events'; });
      await page.getByRole('link', { name: 'Event types' }).click();
      const types = page.locator('table[data-testid="event-types"] tbody tr[data-type]');
      await waitFor('four types', async () => (await types.count()) === 4);
      const shown = await types.evaluateAll((trs) => trs.map((tr) => [tr.dataset.type, tr.querySelector('td:last-child').innerText.trim()]));
      check(JSON.stringify(shown) === JSON.stringify([
        ['invoice.created.for-a-customer-with-a-long-type', 'none'], ['order.created', '1'],
        ['order.paid', '2'], ['user.signed_up', 'none']]), `the types: ${JSON.stringify(shown)}`);
      await page.getByRole('link', { name: 'order.paid', exact: true }).click();
      await waitFor('its one event', async () => (await rows.count()) === 1);
      check(new URL(page.url()).hash.includes('event_type=order.paid'), 'the events of that type');
    });

    const pages = [
      ['events', '#/events', async () => (await rows.count()) === 6],
      ['event-types', '#/event-types', async () => (await page.locator('table[data-testid="event-types"] tbody tr[data-type]').count()) === 4],
      ['event', `#/events/${paid}`, async () => (await deliveries.count()) === 2 && (await page.getByTestId('payload').count()) === 1],
      ['subscription-activity', `#/subscriptions/${ledger.id}`, async () =>
        (await activity.locator('[data-series="succeeded"]').count()) === 1 &&
        (await activity.locator('[data-series="succeeded"]').innerText()) === '4'],
    ];
    for (const [width, height] of [[1280, 800], [390, 844]]) {
      await page.setViewportSize({ width, height });
      for (const [name, hash, ready] of pages) {
        await step(`${name} at ${width} px: no sideways scrolling, no overlapping or squeezed text`, async () => {
          await page.evaluate((h) => { location.hash = h; }, hash);
          await waitFor(`${name} shown`, ready);
          if (name === 'events') {
            const labels = await rows.first().locator('.lbl').first().isVisible();
            check(labels === (width < 640), `field labels ${labels ? 'shown' : 'hidden'} at ${width} px`);
          }
          const wrong = await layoutProblems(page);
          await shot(page, `layout-${name}-${width}`);
          check(wrong.length === 0, `${name} at ${width} px:\n${wrong.join('\n')}`);
        });
      }
    }
  });
}

run(main);
