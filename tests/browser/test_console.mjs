// test_console.mjs: the operator console in Chromium, as an operator uses it in an
// incident: sign in; the overview shows the failing subscription first; filter
// the dead-letter queue by subscription and date (the filter is in the URL, and survives
// a reload); open a delivery and see its attempts, payload and request headers; replay by
// filter after the dry-run count, watch the job's progress complete, see the items leave
// the DLQ; a read-only token gets a read-only console. No page error, no console error
// (CSP violations included), no request to another host, at any point.
// Screenshots: $ARTIFACTS_DIR/*.png.
import path from 'node:path';
import {
  ADMIN_TOKEN, ARTIFACTS, check, inBrowser, run, startOutboxd, startReceiver, step,
  waitFor, watchedPage,
} from './lib.mjs';

const shot = (page, name, fullPage = false) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage });
const utcSeconds = (ms) => new Date(ms).toISOString().slice(0, 19);

async function main() {
  const rx = await startReceiver();
  await rx.script('/billing', 503, 'billing is down for maintenance');
  await rx.script('/orders', 200, 'ok');
  const ox = await startOutboxd();

  // Two subscriptions: one healthy, one whose endpoint answers 503 (permanent, so each
  // delivery is dead after its first try: no waiting for retries).
  const failing = await ox.api('POST', '/v1/subscriptions', {
    name: 'billing-failing', event_types: ['invoice.*'], endpoint: `${rx.url}/billing`,
    secret: 'generate', auth: { type: 'bearer', token: 'sup3r-s3cret' },
    retry: { immediate: 1, permanent: [503] },
  });
  await ox.api('POST', '/v1/subscriptions', {
    name: 'orders-ok', event_types: ['order.*'], endpoint: `${rx.url}/orders`,
  });
  // A third whose circuit breaker opens after its first failures and stays open for the
  // test's length: the overview must show the state. A delivery that meets the open
  // breaker takes one short delay action and is dead-lettered (circuit_open), so both
  // are dead within moments whichever delivery the breaker opens on.
  const breaker = await ox.api('POST', '/v1/subscriptions', {
    name: 'inventory-breaker', event_types: ['stock.*'], endpoint: `${rx.url}/inventory`,
    retry: { immediate: 1, permanent: [500], min_delay: '50ms', max_delay: '100ms' },
    circuit_breaker: { max_errors: 1, failure_window: '10m', max_delay_actions: 1 },
  });
  await rx.script('/inventory', 500, 'inventory exploded');
  // Payloads as raw JSON text: numbers a double would change (0.10, 2^64 - 1) must show
  // as sent.
  const ingest = async (type, n, tag) => {
    const events = Array.from({ length: n }, (_, i) =>
      `{"event_type":"${type}","payload":{"tag":"${tag}","n":${i},"total":0.10,"ref":18446744073709551615}}`);
    const r = await fetch(`${ox.url}/v1/events`, {
      method: 'POST', headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
      body: `{"events":[${events.join(',')}]}`,
    });
    check(r.status === 202, `ingest: ${r.status} ${await r.text()}`);
  };
  const deadCount = async () => (await ox.api('GET', `/v1/dlq?subscription_id=${failing.id}&limit=1000`)).items.length;

  // Batch A (2 dead) before `cut`, batch B (3 dead) from `cut` on: the date filter must
  // tell them apart. cut is a whole second (the console's date inputs have seconds).
  const breakerDead = async () => (await ox.api('GET', `/v1/dlq?subscription_id=${breaker.id}`)).items.length;
  await ingest('stock.changed', 1, 'S');
  await waitFor('first breaker failure', async () => (await breakerDead()) === 1);
  await ingest('stock.changed', 1, 'S');
  await waitFor('second breaker failure', async () => (await breakerDead()) === 2);
  await ingest('invoice.created', 2, 'A');
  await waitFor('batch A dead', async () => (await deadCount()) === 2);
  const cut = Math.ceil((Date.now() + 1) / 1000) * 1000;
  await waitFor('the clock to pass the cut', () => Date.now() >= cut + 5);
  await ingest('invoice.created', 3, 'B');
  await ingest('order.placed', 4, 'ok');
  await waitFor('batch B dead', async () => (await deadCount()) === 5);
  await waitFor('orders processed', async () => (await ox.api('GET', '/v1/deliveries?status=PROCESSED')).items.length === 4);

  await inBrowser(ox.url, (page) => shot(page, 'failure'), async ({ browser, page, problems }) => {
    await step('sign in with the admin token', async () => {
      await page.goto(`${ox.url}/console/`);
      await page.getByLabel('API token').fill(ADMIN_TOKEN);
      await shot(page, 'signin');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Overview', exact: true }).waitFor();
      check(await page.evaluate(() => sessionStorage.getItem('outboxd.token')) === ADMIN_TOKEN, 'token in session storage');
      check(await page.evaluate(() => localStorage.getItem('outboxd.token')) === null, 'token not in local storage');
    });

    await step('the overview shows the failing subscriptions first, with circuit state, error and the DLQ depth', async () => {
      const rows = page.locator('table.health tbody tr');
      await waitFor('health rows in order', async () =>
        (await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.sub)).catch(() => [])).join() ===
        'inventory-breaker,billing-failing,orders-ok');
      check((await rows.nth(0).locator('.pill').innerText()) === 'open', 'the open circuit is shown');
      const open = await rows.nth(0).innerText();
      check(open.includes('0%') && /\b50[03]\b/.test(open), `the breaker's row shows its failures: ${open}`);
      const failingRow = await rows.nth(1).innerText();
      check(failingRow.includes('503') && failingRow.includes('0%') && failingRow.includes('closed'), `failing row shows 503 and 0%: ${failingRow}`);
      check((await rows.nth(1).getAttribute('class')).includes('failing'), 'the failing row is marked');
      const ok = await rows.nth(2).innerText();
      check(ok.includes('100%') && ok.includes('closed'), `healthy row: ${ok}`);
      check(!(await rows.nth(2).getAttribute('class')).includes('failing'), 'the healthy row is not marked');
      await waitFor('DLQ depth 7', async () => (await page.getByTestId('dlq-depth').innerText()) === '7');
      // The chart shows the API's counts: 4 successes; 5 failures of billing-failing and
      // those of the breaker's (a delivery dead-lettered by the open breaker may or may
      // not have sent a request).
      const series = await ox.api('GET', '/v1/stats/series?minutes=60');
      const sum = (k) => series.points.reduce((a, p) => a + p[k], 0);
      check(sum('succeeded') === 4 && sum('server_error') >= 6 && sum('client_error') === 0, `series: ${JSON.stringify(series.points.filter((p) => p.succeeded + p.server_error))}`);
      await waitFor('the chart counts the attempts', async () =>
        (await page.locator('[data-series="succeeded"]').innerText()) === '4' &&
        (await page.locator('[data-series="server_error"]').innerText()) === String(sum('server_error')));
      await shot(page, 'overview');
    });

    await step('filter the DLQ by subscription and date; the filter is in the URL', async () => {
      await page.getByRole('link', { name: 'Dead letters' }).first().click();
      await page.getByRole('heading', { name: 'Dead-letter queue', exact: true }).waitFor();
      await waitFor('7 dead rows', async () => (await page.locator('table.list tbody tr[data-id]').count()) === 7);
      await page.getByLabel('Subscription').selectOption({ label: 'billing-failing' });
      await page.getByLabel('Created from (UTC)').fill(utcSeconds(cut));
      await page.getByRole('button', { name: 'Apply' }).click();
      await waitFor('3 rows from batch B', async () => (await page.locator('table.list tbody tr[data-id]').count()) === 3);
      const hash = new URL(page.url()).hash;
      check(hash.includes(`subscription_id=${failing.id}`) && hash.includes('from='), `filter in the URL: ${hash}`);
      // Reload with the subscriptions (the menu's options) held back until the rows are
      // shown: the menu must still show the URL's subscription once they arrive.
      await page.route('**/v1/subscriptions', async (route) => {
        await waitFor('rows before the menu', async () => (await page.locator('table.list tbody tr[data-id]').count()) === 3);
        await route.continue();
      });
      await page.reload();
      await waitFor('the same 3 rows after a reload', async () => (await page.locator('table.list tbody tr[data-id]').count()) === 3);
      // the menu's options arrive after the URL's value: it must still show it
      await waitFor('the subscription filter restored', async () => (await page.getByLabel('Subscription').inputValue()) === failing.id);
      await page.unroute('**/v1/subscriptions');
      await shot(page, 'dlq-filtered');
    });

    await step('open a delivery: its attempts, payload and masked request headers', async () => {
      await page.locator('table.list tbody tr[data-id] a').first().click();
      await page.getByRole('heading', { name: /^Delivery [0-9a-f-]{36}$/, level: 1 }).waitFor();
      const attempts = page.getByTestId('attempts');
      await attempts.locator('li').first().waitFor();
      const text = await attempts.innerText();
      check(text.includes('503') && text.includes('immediate') && text.includes('billing is down for maintenance'), `attempt timeline: ${text}`);
      check((await page.getByTestId('status').innerText()).startsWith('DEAD'), 'shown as dead');
      const payload = await page.getByTestId('payload').innerText();
      check(payload.includes('"tag": "B"'), `payload pretty-printed: ${payload}`);
      check(payload.includes('"total": 0.10') && payload.includes('"ref": 18446744073709551615'), `numbers as sent: ${payload}`);
      const headers = page.getByTestId('headers');
      await headers.waitFor();
      const h = await headers.innerText();
      check(h.includes('webhook-id') && h.includes('Bearer ********') && h.includes('v1,********'), `headers: ${h}`);
      check(!(await page.content()).includes('sup3r-s3cret'), 'the bearer token is never shown');
      await shot(page, 'delivery', true);
      await page.goBack();
      await waitFor('back at the filtered DLQ', async () => (await page.locator('table.list tbody tr[data-id]').count()) === 3);
    });

    await step('replay by filter: dry-run count, progress to done, the items leave the DLQ', async () => {
      await rx.script('/billing', 200, 'recovered');
      await page.getByRole('button', { name: 'Replay all matching…' }).click();
      await waitFor('dry-run count', async () => (await page.getByTestId('dry-run').innerText()).includes('Dry run: 3 dead deliveries match'));
      await page.getByLabel(/Pace/).fill('20');
      await shot(page, 'replay-dry-run');
      await page.getByRole('button', { name: 'Replay 3' }).click();
      await page.getByTestId('job').waitFor();
      await waitFor('the job is done', async () => (await page.getByTestId('job-state').innerText()) === 'done', 30000);
      check((await page.getByTestId('job-progress').innerText()).startsWith('3 of 3 replayed'), 'progress 3 of 3');
      await waitFor('the filtered DLQ is empty', async () => (await page.getByTestId('empty').count()) === 1);
      check(new URL(page.url()).hash.includes('job='), 'the job is in the URL');
      await page.reload();
      await waitFor('the job followed after a reload', async () => (await page.getByTestId('job-state').innerText()) === 'done');
      await shot(page, 'replay-done');
      await waitFor('replayed deliveries processed', async () => (await ox.api('GET', `/v1/deliveries?subscription_id=${failing.id}&status=PROCESSED`)).items.length === 3);
      await page.getByRole('link', { name: 'Overview' }).click();
      await waitFor('DLQ depth 4 (batch A and the breaker\'s stay)', async () => (await page.getByTestId('dlq-depth').innerText()) === '4');
    });

    await step('phone width and dark theme', async () => {
      await page.getByLabel('Theme').selectOption('dark');
      await page.getByRole('link', { name: 'Overview' }).click();
      await page.getByTestId('dlq-depth').waitFor();
      await shot(page, 'overview-dark');
      await page.setViewportSize({ width: 390, height: 844 });
      await page.getByRole('link', { name: 'Dead letters' }).first().click();
      await waitFor('4 rows', async () => (await page.locator('table.list tbody tr[data-id]').count()) === 4);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      check(overflow <= 0, `no sideways scrolling of the page at phone width (${overflow}px)`);
      await shot(page, 'dlq-phone');
    });

    await step('keyboard: g s opens subscriptions', async () => {
      await page.setViewportSize({ width: 1280, height: 800 });
      await page.locator('body').click({ position: { x: 5, y: 300 } });
      await page.keyboard.press('g');
      await page.keyboard.press('s');
      await page.getByRole('heading', { name: 'Subscriptions', exact: true, level: 1 }).waitFor();
      check(new URL(page.url()).hash === '#/subscriptions', `g s went to #/subscriptions: ${page.url()}`);
    });

    await step('a read-scoped token gets a read-only console', async () => {
      const t = await ox.api('POST', '/v1/tokens', { name: 'dashboards', scopes: ['read'] });
      const ro = await watchedPage(browser, ox.url);
      try {
        await ro.page.goto(`${ox.url}/console/#/dlq`);
        await ro.page.getByLabel('API token').fill(t.token);
        await ro.page.getByRole('button', { name: 'Sign in' }).click();
        await ro.page.getByText('read-only').waitFor();
        await ro.page.getByRole('heading', { name: 'Dead-letter queue', exact: true }).waitFor();
        await waitFor('rows', async () => (await ro.page.locator('table.list tbody tr[data-id]').count()) === 4);
        check(await ro.page.getByRole('button', { name: /Replay/ }).count() === 0, 'no replay button');
        check(await ro.page.getByRole('button', { name: /Purge/ }).count() === 0, 'no purge button');
        problems.push(...ro.problems);
      } finally { await ro.context.close(); }
    });

    await step('purge one by selection after confirming; replay the other by selection', async () => {
      await page.evaluate((id) => { location.hash = `/dlq?subscription_id=${id}`; }, failing.id);
      await waitFor('2 rows', async () => (await page.locator('table.list tbody tr[data-id]').count()) === 2);
      const rows = page.locator('table.list tbody tr[data-id]');
      const purged = await rows.nth(0).getAttribute('data-id');
      const replayed = await rows.nth(1).getAttribute('data-id');
      // keyboard: j to the first row, x ticks it
      await page.locator('h1').click();
      await page.keyboard.press('j');
      await page.keyboard.press('x');
      check(await page.getByLabel(`Select ${purged}`).isChecked(), 'j then x ticks the first row');
      await page.getByRole('button', { name: 'Purge selected' }).click();
      const confirm = page.getByRole('alertdialog', { name: 'Confirm purge' });
      check((await confirm.innerText()).includes('Delete 1 dead delivery'), 'the purge asks first');
      await confirm.getByRole('button', { name: 'Purge 1' }).click();
      await waitFor('1 row left', async () => (await rows.count()) === 1 && (await rows.first().getAttribute('data-id')) === replayed);
      await page.getByLabel(`Select ${replayed}`).check();
      await page.getByRole('button', { name: 'Replay selected (1)' }).click();
      await waitFor('replayed notice', async () => (await page.getByRole('status').innerText()).includes('Replayed 1 of 1'));
      await waitFor('the DLQ is empty', async () => (await page.getByTestId('empty').count()) === 1);
      await waitFor('the replayed delivery processed', async () => (await ox.api('GET', `/v1/deliveries/${replayed}`)).status === 'PROCESSED');
      let gone = false;
      try { await ox.api('GET', `/v1/deliveries/${purged}`); } catch (e) { gone = e.message.includes(' 404 '); }
      check(gone, 'the purged delivery is gone');
    });

    await step('the audit log records the replay job, the purge and the replay', async () => {
      await page.getByRole('link', { name: 'Audit log' }).click();
      await waitFor('audit rows', async () => {
        const t = await page.locator('table.list').innerText();
        return t.includes('dlq.replay_job') && t.includes('dlq.purge') && t.includes('dlq.replay\t');
      });
      await shot(page, 'audit');
    });
  });
}

run(main);
