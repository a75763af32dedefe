// test_manage.mjs: the console's management paths, in Chromium: create a subscription
// (the generated secret shown once, credentials masked afterwards), disable, edit as JSON,
// enable and delete it; the subscriptions in pages and the overview's failing first
// among 121; page through the DLQ by key (the cursor in the URL); a binary
// payload as hex and base64; cancel a paced replay job while it runs. No page error, no
// console error, no request to another host. Screenshots: $ARTIFACTS_DIR/manage-*.png.
import path from 'node:path';
import {
  ADMIN_TOKEN, ARTIFACTS, check, inBrowser, run, startOutboxd, startReceiver, step,
  waitFor,
} from './lib.mjs';

const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `manage-${name}.png`) });

async function main() {
  const rx = await startReceiver();
  await rx.script('/sink', 500, 'sink is broken');
  const ox = await startOutboxd();
  const sink = await ox.api('POST', '/v1/subscriptions', {
    name: 'broken-sink', event_types: ['blob.*'], endpoint: `${rx.url}/sink`,
    retry: { immediate: 1, permanent: [500] },
  });
  // Six dead deliveries, the first a binary payload.
  await ox.api('POST', '/v1/events', {
    events: [
      { event_type: 'blob.saved', payload_base64: 'AAECAwRobGxv', content_type: 'application/octet-stream' },
      ...Array.from({ length: 5 }, (_, i) => ({ event_type: 'blob.saved', payload: { i } })),
    ],
  });
  await waitFor('6 dead', async () => (await ox.api('GET', '/v1/dlq')).items.length === 6);

  await inBrowser(ox.url, (page) => shot(page, 'failure'), async ({ page }) => {
    const rows = page.locator('table.list tbody tr[data-id]');
    const ids = async () => rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.id));
    await step('sign in', async () => {
      await page.goto(`${ox.url}/console/#/dlq?limit=2`);
      await page.getByLabel('API token').fill(ADMIN_TOKEN);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Dead-letter queue', exact: true }).waitFor();
    });

    let firstPage;
    await step('keyset pages: the cursor is in the URL', async () => {
      await waitFor('2 rows', async () => (await rows.count()) === 2);
      firstPage = await ids();
      await page.getByRole('link', { name: 'Next page' }).click();
      await waitFor('another 2 rows', async () => {
        const now = await ids();
        return now.length === 2 && !now.some((id) => firstPage.includes(id));
      });
      check(new URL(page.url()).hash.includes('cursor='), 'cursor in the URL');
      await page.getByRole('link', { name: 'Next page' }).click();
      await waitFor('the last 2 rows', async () => (await rows.count()) === 2 && (await page.getByRole('link', { name: 'Next page' }).count()) === 0);
      await page.getByRole('link', { name: 'First page' }).click();
      await waitFor('the first page again', async () => (await ids()).join() === firstPage.join());
      // main's implicit-DLQ filters: every one of the six has one attempt
      await page.getByLabel('Attempts at least').fill('2');
      await page.getByRole('button', { name: 'Apply' }).click();
      await waitFor('none with 2 attempts', async () => (await page.getByTestId('empty').count()) === 1);
      check(new URL(page.url()).hash.includes('min_attempts=2'), 'min_attempts in the URL');
      await page.getByLabel('Attempts at least').fill('1');
      await page.getByLabel('Failing for at least').fill('0s');
      await page.getByRole('button', { name: 'Apply' }).click();
      await waitFor('two again (limit 2)', async () => (await rows.count()) === 2);
    });

    await step('a binary payload as hex and base64', async () => {
      await rows.first().locator('a').first().click();
      const payload = page.getByTestId('payload');
      await waitFor('hex dump', async () => (await payload.innerText()).includes('00 01 02 03 04 68 6c 6c 6f'));
      check((await payload.innerText()).includes('.....hllo'), 'printable column');
      await page.getByRole('tab', { name: 'Base64' }).click();
      await waitFor('base64', async () => (await payload.innerText()).trim() === 'AAECAwRobGxv');
      await shot(page, 'binary');
    });

    await step('cancel a paced replay job while it runs', async () => {
      await page.evaluate((id) => { location.hash = `/dlq?subscription_id=${id}`; }, sink.id);
      await waitFor('6 rows', async () => (await rows.count()) === 6);
      await page.getByRole('button', { name: 'Replay all matching…' }).click();
      await waitFor('dry run 6', async () => (await page.getByTestId('dry-run').innerText()).includes('Dry run: 6 dead deliveries match'));
      await page.getByLabel(/Pace/).fill('1');
      await page.getByRole('button', { name: 'Replay 6' }).click();
      await page.getByRole('button', { name: 'Cancel job' }).click();
      await waitFor('cancelled', async () => (await page.getByTestId('job-state').innerText()) === 'cancelled');
      const progress = await page.getByTestId('job-progress').innerText();
      const done = Number(progress.split(' ')[0]);
      check(done < 6 && progress.includes('of 6 replayed'), `stopped early: ${progress}`);
      await shot(page, 'cancelled');
      const audit = await ox.api('GET', '/v1/audit?limit=5');
      check(audit.items.some((a) => a.action === 'job.cancel'), 'the cancel is audited');
    });

    let created;
    await step('create a subscription: the secret shown once, credentials masked after', async () => {
      await page.getByRole('link', { name: 'Subscriptions' }).click();
      await page.getByRole('link', { name: 'New subscription' }).click();
      await page.getByLabel('Name', { exact: true }).fill('crm-sync');
      await page.getByLabel('Endpoint URL').fill(`${rx.url}/crm`);
      await page.getByLabel(/Event types/).fill('crm.*');
      await page.getByLabel(/More settings/).fill('{"auth":{"type":"basic","username":"u","password":"p4ss-w0rd"}}');
      await page.getByRole('button', { name: 'Create' }).click();
      const notice = page.locator('.notice');
      await notice.waitFor();
      check((await notice.innerText()).includes('whsec_'), 'the generated secret is shown');
      created = (await ox.api('GET', '/v1/subscriptions')).items.find((s) => s.name === 'crm-sync');
      check(created, 'created');
      await page.getByRole('link', { name: 'Open it' }).click();
      await page.getByRole('heading', { name: 'Configuration', exact: true }).waitFor();
      const html = await page.content();
      check(!html.includes('p4ss-w0rd') && html.includes('********'), 'the password is masked');
      // flow control: the endpoint's adaptive limit, once something was sent there
      await ox.api('POST', '/v1/events', { event_type: 'crm.created', payload: { id: 1 } });
      await waitFor('a delivery to crm-sync', async () =>
        (await ox.api('GET', `/v1/deliveries?subscription_id=${created.id}&status=PROCESSED`)).items.length > 0);
      await page.reload();
      await page.getByText(/adaptive: limit \d+/).waitFor();
      await shot(page, 'subscription');
    });

    await step('disable, edit as JSON, enable, delete', async () => {
      await page.getByRole('button', { name: 'Disable' }).click();
      await waitFor('disabled', async () => (await ox.api('GET', `/v1/subscriptions/${created.id}`)).enabled === false);
      await page.getByRole('heading', { name: /crm-sync/ }).getByText('disabled').waitFor();
      await page.getByRole('button', { name: 'Edit as JSON…' }).click();
      const box = page.getByLabel('Subscription JSON');
      const doc = JSON.parse(await box.inputValue());
      check(doc.auth.password === '********', 'the editor shows the password masked');
      doc.event_types = ['crm.*', 'lead.*'];
      doc.filter = { 'lead.score': { $gte: 50 } };
      await box.fill(JSON.stringify(doc, null, 2));
      await page.getByRole('button', { name: 'Save' }).click();
      await waitFor('saved', async () => (await page.locator('.notice').innerText()).includes('Saved'));
      const after = await ox.api('GET', `/v1/subscriptions/${created.id}`);
      check(after.event_types.join() === 'crm.*,lead.*', `event types changed: ${after.event_types}`);
      check(JSON.stringify(after.filter) === '{"lead.score":{"$gte":50}}', `payload filter saved: ${JSON.stringify(after.filter)}`);
      await waitFor('the filter shown', async () => (await page.getByTestId('filter').innerText()).includes('lead.score'));
      check(after.auth.type === 'basic', 'auth kept');
      await page.getByRole('button', { name: 'Enable' }).click();
      await waitFor('enabled', async () => (await ox.api('GET', `/v1/subscriptions/${created.id}`)).enabled === true);
      await page.getByRole('button', { name: 'Delete…' }).click();
      await page.getByRole('alertdialog', { name: 'Confirm delete' }).getByRole('button', { name: 'Delete' }).click();
      await page.getByRole('heading', { name: 'Subscriptions', exact: true }).waitFor();
      await waitFor('gone', async () => !(await ox.api('GET', '/v1/subscriptions')).items.some((s) => s.name === 'crm-sync'));
      const actions = (await ox.api('GET', '/v1/audit?limit=10')).items.map((a) => a.action);
      check(['subscription.create', 'subscription.update', 'subscription.delete'].every((a) => actions.includes(a)), `audited: ${actions}`);
    });

    await step('many subscriptions: the list in pages of 100, the overview the failing first', async () => {
      for (let i = 0; i < 120; i++) {
        await ox.api('POST', '/v1/subscriptions', {
          name: `tenant-${String(i).padStart(3, '0')}`, event_types: [`tenant${i}.*`], endpoint: `${rx.url}/t${i}`,
        });
      }
      const subRows = page.locator('table[data-testid="subscriptions"] tbody tr');
      await page.goto(`${ox.url}/console/#/subscriptions`);
      await waitFor('a page of 100', async () => (await subRows.count()) === 100);
      const first = await subRows.evaluateAll((trs) => trs.map((tr) => tr.dataset.sub));
      check(first[0] === 'broken-sink', `oldest first: ${first[0]}`);
      await page.getByTestId('next-page').click();
      await waitFor('the other 21', async () => (await subRows.count()) === 21);
      const second = await subRows.evaluateAll((trs) => trs.map((tr) => tr.dataset.sub));
      check(!second.some((n) => first.includes(n)), 'no subscription on both pages');
      check(second[20] === 'tenant-119', `newest last: ${second[20]}`);
      // the page's health figures came with it: broken-sink's circuit shows on page one
      await page.getByRole('link', { name: 'First page' }).click();
      await waitFor('page one again', async () => (await subRows.count()) === 100);
      const circuit = await page.locator('tr[data-sub="broken-sink"] .pill').innerText();
      check(circuit !== '—', `broken-sink's circuit shown: ${circuit}`);
      // the find box: the names that hold the text, letters' case ignored, then a glob
      await page.getByLabel('Name', { exact: true }).fill('TENANT-11');
      await page.getByRole('button', { name: 'Find' }).click();
      await waitFor('tenant-110 to tenant-119', async () => (await subRows.count()) === 10);
      const found = await subRows.evaluateAll((trs) => trs.map((tr) => tr.dataset.sub));
      check(found.every((n) => n.startsWith('tenant-11')), `only names holding it: ${found}`);
      check(new URL(page.url()).hash.includes('find=TENANT-11'), 'the search in the URL');
      await page.getByLabel('Name', { exact: true }).fill('tenant-00?');
      await page.getByRole('button', { name: 'Find' }).click();
      await waitFor('tenant-000 to tenant-009', async () => (await subRows.count()) === 10 &&
        (await subRows.first().getAttribute('data-sub')) === 'tenant-000');
      await page.getByLabel('Name', { exact: true }).fill('no-such-name');
      await page.getByRole('button', { name: 'Find' }).click();
      await page.getByTestId('no-match').waitFor();
      await page.getByRole('link', { name: 'Show all' }).click();
      await waitFor('the first page again', async () => (await subRows.count()) === 100);
      await page.goto(`${ox.url}/console/#/`);
      await page.getByTestId('more-subs').waitFor();
      const text = await page.getByTestId('more-subs').innerText();
      check(text.includes('50 of 121'), `the overview says what it leaves out: ${text}`);
      const top = await page.locator('table.health tbody tr[data-sub]').first().getAttribute('data-sub');
      check(top === 'broken-sink', `the failing subscription first: ${top}`);
    });

    await step('more than 200 subscriptions: names read by id, the filter by name', async () => {
      for (let i = 120; i < 200; i++) {
        await ox.api('POST', '/v1/subscriptions', {
          name: `tenant-${String(i).padStart(4, '0')}`, event_types: [`tenant${i}.*`], endpoint: `${rx.url}/t${i}`,
        });
      }
      // the 202nd: beyond the first 200 the console reads at once
      const late = await ox.api('POST', '/v1/subscriptions', {
        name: 'tenant-late', event_types: ['late.*'], endpoint: `${rx.url}/sink`,
        retry: { immediate: 1, permanent: [500] },
      });
      await ox.api('POST', '/v1/events', { event_type: 'late.x', payload: {} });
      await waitFor('its delivery dead', async () => (await ox.api('GET', `/v1/dlq?subscription_id=${late.id}`)).items.length === 1);
      await page.goto(`${ox.url}/console/#/dlq`);
      await waitFor('7 dead, tenant-late among them by name', async () =>
        (await rows.count()) === 7 && (await page.locator('table.list tbody').innerText()).includes('tenant-late'));
      // no list of 202 to choose from: a name box
      check(await page.locator('select#f-subscription_id').count() === 0, 'no select of every subscription');
      await page.getByLabel('Subscription', { exact: true }).fill('tenant-late');
      await page.getByRole('button', { name: 'Apply' }).click();
      await waitFor('its dead delivery alone', async () => (await rows.count()) === 1);
      check(new URL(page.url()).hash.includes(`subscription_id=${late.id}`), 'its id in the URL');
      // part of a name: the one subscription whose name holds it
      await page.getByRole('button', { name: 'Clear' }).click();
      await waitFor('all 7 again', async () => (await rows.count()) === 7);
      await page.getByLabel('Subscription', { exact: true }).fill('LATE');
      await page.getByRole('button', { name: 'Apply' }).click();
      await waitFor('tenant-late\'s alone again', async () => (await rows.count()) === 1);
      check(new URL(page.url()).hash.includes(`subscription_id=${late.id}`), 'found by part of its name');
      // several hold it: they are named, nothing applied
      await page.getByLabel('Subscription', { exact: true }).fill('tenant-01');
      await page.getByRole('button', { name: 'Apply' }).click();
      await page.getByText('more than 5 subscriptions match tenant-01: tenant-010, tenant-011').waitFor();
      await page.getByLabel('Subscription', { exact: true }).fill('no-such-tenant');
      await page.getByRole('button', { name: 'Apply' }).click();
      await page.getByText("no subscription's name matches no-such-tenant").waitFor();
    });
  });
}

run(main);
