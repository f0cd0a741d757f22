// The operator console in a real browser: run by TestBatchd_ConsoleInBrowser
// (examples/batchd/console_test.go), which starts batchd and a page server
// and passes everything in the environment. It drives Debian's chromium
// through npm's playwright-core (found through NODE_PATH).
//
// It loads /console, submits a job after the page loaded, and sees the job
// appear, run and end done without a reload (the page's own polling); it
// follows the job's link to its targets' statuses and outcomes; it checks
// that no page and no response under /console carries the marker of the
// target and webhook URLs, nor the page server's host, nor the restricted
// caller's name; and it saves a screenshot.
'use strict';

const { chromium } = require('playwright-core');

function env(name) {
	const v = process.env[name];
	if (!v) {
		throw new Error('missing $' + name);
	}
	return v;
}

const server = env('CONSOLE_SERVER');
const marker = env('CONSOLE_MARKER');
const pagesHost = env('CONSOLE_PAGES');
const restrictedName = 'partnertenant';
const forbidden = [marker, pagesHost, restrictedName];

// The whole run has a deadline, so that a stuck browser fails the test.
const watchdog = setTimeout(() => {
	console.error('console browser test: timed out');
	process.exit(2);
}, 120000);

function check(ok, msg) {
	if (!ok) {
		throw new Error(msg);
	}
}

function checkClean(what, text) {
	for (const bad of forbidden) {
		check(!text.includes(bad), what + ' carries ' + JSON.stringify(bad));
	}
}

async function submit(key, urls, webhook) {
	const body = { targets: urls.map((url) => ({ url })) };
	if (webhook) {
		body.webhook = { url: webhook };
	}
	const r = await fetch(server + '/v1/batch', {
		method: 'POST',
		headers: { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' },
		body: JSON.stringify(body),
	});
	const answer = await r.json();
	check(r.status === 202, 'submit: HTTP ' + r.status + ' ' + JSON.stringify(answer));
	return answer.job_id;
}

async function statusOf(page, id) {
	return (await page.locator('#recent tr[data-job="' + id + '"] td.status').textContent()).trim();
}

async function main() {
	const browser = await chromium.launch({
		executablePath: env('CONSOLE_CHROMIUM'),
		headless: true,
		args: ['--no-sandbox', '--disable-dev-shm-usage'],
	});
	try {
		const context = await browser.newContext({
			httpCredentials: { username: 'operator', password: env('CONSOLE_ADMIN_KEY') },
			viewport: { width: 1200, height: 1000 },
			colorScheme: 'light',
		});
		const page = await context.newPage();
		page.setDefaultTimeout(30000);

		// Every answer under /console is checked, the live fragments too.
		const checks = [];
		let fragments = 0;
		page.on('response', (resp) => {
			const u = new URL(resp.url());
			if (!u.pathname.startsWith('/console')) {
				return;
			}
			if (u.searchParams.get('fragment') === 'live') {
				fragments++;
			}
			checkClean('the headers of ' + u.pathname + u.search, JSON.stringify(resp.headers()));
			checks.push(resp.text().then((t) => checkClean('GET ' + u.pathname + u.search, t), () => {}));
		});
		const errors = [];
		page.on('pageerror', (e) => errors.push(String(e)));
		page.on('console', (m) => {
			if (m.type() === 'error') {
				errors.push(m.text());
			}
		});
		let navigations = 0;
		page.on('framenavigated', (f) => {
			if (f === page.mainFrame()) {
				navigations++;
			}
		});

		const first = await page.goto(server + '/console');
		check(first.status() === 200, 'GET /console: HTTP ' + first.status());
		await page.getByRole('heading', { level: 1, name: 'Batch console' }).waitFor();
		await page.getByRole('button', { name: 'Pause live updates' }).waitFor();

		// Submitted after the page loaded: the gate holds its first target
		// until the page has shown it running.
		const id = await submit(env('CONSOLE_CALLER_KEY'), [env('CONSOLE_TARGET_GATE'), env('CONSOLE_TARGET_PAGE')],
			env('CONSOLE_TARGET_PAGE').replace('/page/2', '/hook'));
		const other = await submit(env('CONSOLE_RESTRICTED_KEY'), [env('CONSOLE_TARGET_PAGE'), env('CONSOLE_TARGET_MISSING')]);
		console.log('submitted', id, 'and', other);
		const row = page.locator('#recent tr[data-job="' + id + '"]');
		await row.waitFor();
		await page.waitForFunction((jobID) => {
			const cell = document.querySelector('#recent tr[data-job="' + jobID + '"] td.status');
			return cell && cell.textContent.trim() === 'running';
		}, id);
		console.log('job', id, 'shows running');
		const released = await fetch(env('CONSOLE_RELEASE'));
		check(released.ok, 'release: HTTP ' + released.status);
		await page.waitForFunction((jobID) => {
			const cell = document.querySelector('#recent tr[data-job="' + jobID + '"] td.status');
			return cell && cell.textContent.trim() === 'done';
		}, id);
		console.log('job', id, 'shows done');
		await page.waitForFunction((jobID) => {
			const cell = document.querySelector('#recent tr[data-job="' + jobID + '"] td.status');
			return cell && cell.textContent.trim() === 'partial';
		}, other);
		check(navigations === 1, 'the page was loaded ' + navigations + ' times; want once (live updates, no reload)');
		check(fragments > 0, 'no live fragment was fetched');
		check((await row.locator('.progress').textContent()).trim() === '2 / 2', 'the row does not show 2 / 2 targets done');
		const otherRow = page.locator('#recent tr[data-job="' + other + '"]');
		check((await otherRow.textContent()).includes('restricted'), 'the restricted caller\'s job is not marked restricted');

		// The keyboard reaches the job's link, and the page's live update
		// keeps it usable.
		const link = row.locator('a[href="/console/jobs/' + id + '"]');
		await link.focus();
		check(await link.evaluate((el) => el === document.activeElement), 'the job link takes no focus');

		checkClean('the overview', await page.content());
		await page.screenshot({ path: env('CONSOLE_SCREENSHOT') });
		console.log('screenshot', env('CONSOLE_SCREENSHOT'));

		await Promise.all([page.waitForURL('**/console/jobs/' + id), link.press('Enter')]);
		await page.getByRole('heading', { level: 1 }).filter({ hasText: id }).waitFor();
		for (const idx of [0, 1]) {
			const cells = page.locator('#targets tr[data-idx="' + idx + '"] td');
			check((await cells.nth(0).textContent()).trim() === 'done', 'target ' + idx + ' is not done');
			check((await cells.nth(1).textContent()).trim() === '1', 'target ' + idx + ' was not attempted once');
			check((await cells.nth(2).textContent()).trim() === 'ok', 'target ' + idx + ' has no outcome ok');
		}
		check((await page.locator('#job-status').textContent()).trim() === 'done', 'the job page does not say done');
		checkClean('the job page', await page.content());

		// The restricted caller's job page shows its targets' statuses but
		// withholds their outcomes (as that caller's log lines do), and not
		// its caller's name.
		const otherPage = await page.goto(server + '/console/jobs/' + other);
		check(otherPage.status() === 200, 'GET the restricted job: HTTP ' + otherPage.status());
		const failedRow = await page.locator('#targets tr[data-idx="1"]').textContent();
		check(failedRow.includes('failed') && failedRow.includes('withheld') && !failedRow.includes('upstream_4xx'),
			'the restricted job\'s failed target does not show failed with its outcome withheld: ' + failedRow);
		checkClean('the restricted job page', await page.content());

		await Promise.all(checks);
		check(errors.length === 0, 'the page logged errors: ' + errors.join('; '));
		await context.close();
	} finally {
		await browser.close();
	}
	console.log('console browser test: ok');
}

main().then(
	() => {
		clearTimeout(watchdog);
	},
	(err) => {
		console.error('console browser test: ' + (err && err.stack ? err.stack : err));
		process.exit(1);
	},
);
