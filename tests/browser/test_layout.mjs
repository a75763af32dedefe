// test_layout.mjs: the console's pages laid out at a desktop width (1280 px) and a phone
// width (390 px): the overview, the dead-letter queue, the deliveries, the subscriptions,
// a subscription, a delivery and the audit log, each with long names, endpoints and
// errors. On every page: no sideways scrolling of the page, no overlapping text, no text
// outside the viewport or squeezed into a sliver of a column, and the boot text
// ("Loading the outboxd console…") replaced by the console (lib.mjs, layoutProblems).
// Full-page screenshots of each: $ARTIFACTS_DIR/layout-PAGE-WIDTH.png.
import path from 'node:path';
import {
  ADMIN_TOKEN, ARTIFACTS, check, inBrowser, layoutProblems, run, startOutboxd, startReceiver,
  step, waitFor,
} from './lib.mjs';

const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

async function main() {
  const rx = await startReceiver();
  await rx.script('/billing', 503, 'the billing service is down for scheduled maintenance until 04:00 UTC, try again later');
  await rx.script('/orders', 200, 'ok');
  const ox = await startOutboxd();

  const failing = await ox.api('POST', '/v1/subscriptions', {
    name: 'billing-invoices-to-the-accounting-warehouse', event_types: ['invoice.*', 'credit_note.*', 'payment.refunded'],
    endpoint: `${rx.url}/billing?tenant=acme-corporation-international&region=eu-central-1&verbose=true`,
    secret: 'generate', auth: { type: 'bearer', token: 'sup3r-s3cret' },
    retry: { immediate: 1, permanent: [503] },
  });
  await ox.api('POST', '/v1/subscriptions', { name: 'orders-ok', event_types: ['order.*'], endpoint: `${rx.url}/orders` });
  // Nothing listens on port 9 (discard): connection refused, a long transport error.
  await ox.api('POST', '/v1/subscriptions', {
    name: 'crm-contacts', event_types: ['contact.*'], endpoint: 'http://127.0.0.1:9/hooks/contacts',
    retry: { immediate: 1, permanent: [503] },
  });
  const ingest = async (events) => {
    const r = await ox.api('POST', '/v1/events', { events });
    check(r.ids.length === events.length, 'ingested');
  };
  await ingest([
    ...Array.from({ length: 3 }, (_, i) => ({ event_type: 'invoice.created.for-a-customer-with-a-long-type', source: 'billing-service', payload: { n: i, customer: 'ACME Corporation International' } })),
    ...Array.from({ length: 2 }, (_, i) => ({ event_type: 'order.placed', payload: { n: i } })),
    { event_type: 'contact.updated', payload: { id: 7 } },
  ]);
  await waitFor('4 dead deliveries', async () => (await ox.api('GET', '/v1/dlq')).items.length === 4);
  await waitFor('2 processed', async () => (await ox.api('GET', '/v1/deliveries?status=PROCESSED')).items.length === 2);
  const dead = (await ox.api('GET', `/v1/dlq?subscription_id=${failing.id}`)).items[0];

  await inBrowser(ox.url, (page) => shot(page, 'layout-failure'), async ({ page }) => {
    await step('sign in; the boot text is replaced', async () => {
      await page.goto(`${ox.url}/console/`);
      await page.getByLabel('API token').fill(ADMIN_TOKEN);
      const wrong = await layoutProblems(page);
      check(wrong.length === 0, `sign-in page:\n${wrong.join('\n')}`);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Overview', exact: true }).waitFor();
      check((await page.locator('#app .boot').count()) === 0, 'no boot paragraph left in #app');
    });

    const rowCount = (sel) => page.locator(sel).count();
    const pages = [
      ['overview', '#/overview', async () => (await rowCount('table.health tbody tr[data-sub]')) === 3 &&
        (await page.locator('[data-series="succeeded"]').count()) === 1],
      ['dlq', '#/dlq', async () => (await rowCount('table.list tbody tr[data-id]')) === 4],
      ['deliveries', '#/deliveries', async () => (await rowCount('table.list tbody tr[data-id]')) === 6 &&
        (await page.locator('table.list').innerText()).includes('billing-invoices-to-the-accounting-warehouse')],
      ['subscriptions', '#/subscriptions', async () => (await rowCount('table.list tbody tr[data-sub]')) === 3 &&
        (await page.locator('table.list .pill').first().innerText()) !== '—'],
      ['subscription', `#/subscriptions/${failing.id}`, async () => (await page.locator('pre.payload').count()) === 1],
      ['delivery', `#/deliveries/${dead.id}`, async () => (await page.getByTestId('headers').count()) === 1 &&
        (await page.getByTestId('attempts').locator('li').count()) === 1],
      ['audit', '#/audit', async () => (await rowCount('table.list tbody tr')) >= 3],
    ];
    for (const [width, height] of [[1280, 800], [390, 844]]) {
      await page.setViewportSize({ width, height });
      for (const [name, hash, ready] of pages) {
        await step(`${name} at ${width} px: no sideways scrolling, no overlapping or squeezed text`, async () => {
          await page.evaluate((h) => { location.hash = h; }, hash);
          await waitFor(`${name} shown`, ready);
          // the list cards: every field labelled on a phone, a header row on a desktop
          if (name === 'dlq' || name === 'overview') {
            const labels = await page.locator('tbody tr .lbl').first().isVisible();
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
