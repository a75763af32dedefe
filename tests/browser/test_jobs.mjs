// test_jobs.mjs: the jobs page (GET /v1/jobs): a finished and a running replay job,
// newest first, with progress, filter (the subscription by name) and who started them;
// the state filter in the URL; Cancel on the running one (state cancelled, fewer
// replayed than matched, audited); no Cancel for a read-only token; the page laid out at
// 1280 and 390 px without sideways scrolling or overlapping text.
import path from 'node:path';
import {
  ADMIN_TOKEN, ARTIFACTS, check, inBrowser, layoutProblems, run, startOutboxd, startReceiver, step,
  waitFor, watchedPage,
} from './lib.mjs';

const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

async function main() {
  const rx = await startReceiver();
  await rx.script('/slow-partner', 503, 'down');
  await rx.script('/quick-partner', 503, 'down');
  const ox = await startOutboxd();
  const slow = await ox.api('POST', '/v1/subscriptions', {
    name: 'slow-partner', event_types: ['slow.*'], endpoint: `${rx.url}/slow-partner`, retry: { immediate: 1, permanent: [503] },
  });
  const quick = await ox.api('POST', '/v1/subscriptions', {
    name: 'quick-partner', event_types: ['quick.*'], endpoint: `${rx.url}/quick-partner`, retry: { immediate: 1, permanent: [503] },
  });
  await ox.api('POST', '/v1/events', { events: [
    ...Array.from({ length: 60 }, (_, n) => ({ event_type: 'slow.thing', payload: { n } })),
    { event_type: 'quick.thing', payload: { n: 0 } },
  ] });
  await waitFor('61 dead', async () => (await ox.api('GET', '/v1/dlq?limit=1000')).items.length === 61);
  // The quick job ends at once; the slow one replays one a second (a minute for all 60):
  // still running when the test cancels it, however busy the machine.
  const done = await ox.api('POST', '/v1/dlq/replay', { filter: { subscription_id: quick.id } });
  await waitFor('the quick job done', async () => (await ox.api('GET', `/v1/jobs/${done.job_id}`)).state === 'done');
  const running = await ox.api('POST', '/v1/dlq/replay', { filter: { subscription_id: slow.id }, rate: 1 });

  await inBrowser(ox.url, (page) => shot(page, 'jobs-failure'), async ({ browser, page, problems }) => {
    await step('sign in', async () => {
      await page.goto(`${ox.url}/console/#/jobs`);
      await page.getByLabel('API token').fill(ADMIN_TOKEN);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Jobs', exact: true }).waitFor();
    });
    const rows = page.locator('table.list tbody tr[data-job]');
    await step('both jobs, newest first, with progress, filter by name and actor', async () => {
      await waitFor('2 jobs', async () => (await rows.count()) === 2);
      // the subscriptions' names come from a request of their own, maybe after the rows
      await waitFor('the subscriptions named', async () => {
        const text = (await rows.allInnerTexts()).join('\n');
        return text.includes('slow-partner') && text.includes('quick-partner');
      });
      check(await rows.nth(0).getAttribute('data-job') === running.job_id, 'the running job first');
      const r = await rows.nth(0).innerText();
      check(r.includes('running') && /of 60 replayed/.test(r) && r.includes('subscription slow-partner') && r.includes('admin') && r.includes('1/s'), `running row: ${r}`);
      const d = await rows.nth(1).innerText();
      check(d.includes('done') && d.includes('1 of 1 replayed') && d.includes('subscription quick-partner'), `done row: ${d}`);
      check(await rows.nth(1).getByRole('button', { name: 'Cancel job' }).count() === 0, 'no cancel on a done job');
      for (const [width, height] of [[1280, 800], [390, 844]]) {
        await page.setViewportSize({ width, height });
        const wrong = await layoutProblems(page);
        await shot(page, `layout-jobs-${width}`);
        check(wrong.length === 0, `jobs at ${width} px:\n${wrong.join('\n')}`);
      }
      await page.setViewportSize({ width: 1280, height: 800 });
    });
    await step('the state filter is in the URL', async () => {
      await page.getByLabel('State').selectOption('done');
      await waitFor('only the done job', async () => (await rows.count()) === 1 && (await rows.first().getAttribute('data-job')) === done.job_id);
      check(new URL(page.url()).hash === '#/jobs?state=done', `URL: ${page.url()}`);
      await page.getByLabel('State').selectOption('running');
      await waitFor('only the running job', async () => (await rows.count()) === 1 && (await rows.first().getAttribute('data-job')) === running.job_id);
    });
    await step('a read-only token sees no Cancel', async () => {
      const t = await ox.api('POST', '/v1/tokens', { name: 'viewer', scopes: ['read'] });
      const ro = await watchedPage(browser, ox.url);
      try {
        await ro.page.goto(`${ox.url}/console/#/jobs`);
        await ro.page.getByLabel('API token').fill(t.token);
        await ro.page.getByRole('button', { name: 'Sign in' }).click();
        await waitFor('2 jobs', async () => (await ro.page.locator('table.list tbody tr[data-job]').count()) === 2);
        check(await ro.page.getByRole('button', { name: 'Cancel job' }).count() === 0, 'no cancel button');
        problems.push(...ro.problems);
      } finally { await ro.context.close(); }
    });
    await step('cancel the running job', async () => {
      await rows.first().getByRole('button', { name: 'Cancel job' }).click();
      await waitFor('the notice', async () => (await page.getByRole('status').innerText()).includes('cancelled'));
      await waitFor('no running job left', async () => (await page.getByTestId('empty').count()) === 1);
      const j = await ox.api('GET', `/v1/jobs/${running.job_id}`);
      check(j.state === 'cancelled' && j.replayed < j.matched, `cancelled early: ${JSON.stringify(j)}`);
      const audit = await ox.api('GET', '/v1/audit?limit=5');
      check(audit.items.some((a) => a.action === 'job.cancel' && a.target === running.job_id), 'audited');
      await page.getByLabel('State').selectOption('');
      await waitFor('both again, the first cancelled', async () => (await rows.count()) === 2 &&
        (await rows.first().getByTestId('job-state').innerText()) === 'cancelled');
      check(await rows.first().getByRole('button', { name: 'Cancel job' }).count() === 0, 'no cancel on a cancelled job');
      await shot(page, 'jobs');
    });
  });
}

run(main);
