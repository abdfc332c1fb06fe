// End-to-end test in a real VS Code: code-server 4.100.3 in headless Chromium, driven by
// playwright-core. Installs the packaged troupe.vsix, runs "Troupe: List Agents" from the
// palette, approves a worker's pending request from the quick-fix menu on the file it wants to
// edit, checks that the party view fits its panel at three window sizes (a screenshot of each), opens a pattern run's tree, then a party's plan,
// votes on its decision from the quick picks and opens its timeline filtered by member, then
// reviews a member's branch: "Troupe: Review Member" opens a changed file in the diff editor and
// "Troupe: Approve Member" approves it, and last the inbox: two escalated tasks in the "Troupe
// Inbox" view with its badge, one dismissed from "Troupe: Inbox", the other from the view's
// inline "Answer…" action. Set up and checked by tests/it/editors.rs; prints one JSON line of
// findings.
'use strict';
const cp = require('child_process');
const fs = require('fs');
const path = require('path');
const { chromium } = require(path.join(process.env.CODE_SERVER_DIR, 'node_modules/playwright-core'));

const dir = process.env.E2E_DIR;
const root = process.env.TEST_ROOT;
const port = process.env.E2E_PORT;
const entry = path.join(process.env.CODE_SERVER_DIR, 'node_modules/code-server/out/node/entry.js');
const userData = path.join(dir, 'user');
const extensions = path.join(dir, 'extensions');
const findings = { steps: [] };
const step = (s) => findings.steps.push(s);

function codeServer(args, opts = {}) {
  return cp.spawn(process.execPath, [entry, '--user-data-dir', userData, '--extensions-dir', extensions, ...args], {
    env: { ...process.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...opts,
  });
}

function run(args) {
  return new Promise((resolve, reject) => {
    const p = codeServer(args);
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`code-server ${args.join(' ')}: ${code}\n${out}`))));
  });
}

async function retry(what, fn, ms = 60000) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      return await fn();
    } catch (e) {
      last = e;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  throw new Error(`${what}: ${last}`);
}

async function palette(page, command) {
  await retry(`palette ${command}`, async () => {
    await page.keyboard.press('Escape');
    await page.keyboard.press('F1');
    const input = page.locator('.quick-input-widget input');
    await input.waitFor({ timeout: 3000 });
    await input.fill('>' + command);
    await page.locator('.quick-input-list .monaco-list-row', { hasText: command }).first().waitFor({ timeout: 3000 });
    await page.keyboard.press('Enter');
  });
}

// Picks `text` in the quick pick that is open (its row first shown, then taken).
async function choose(page, text) {
  await page.locator('.quick-input-widget input').fill(text, { timeout: 3000 });
  await page.locator('.quick-input-list .monaco-list-row', { hasText: text }).first().waitFor({ timeout: 3000 });
  await page.keyboard.press('Enter');
}

// Runs a palette command and picks `text` in the first quick pick it opens; the command is run
// again while that pick does not show (under load the palette can swallow it).
async function paletteThenPick(page, command, what, text) {
  await retry(`${command}: ${what}`, async () => {
    await palette(page, command);
    await retry(what, () => choose(page, text), 10000);
  }, 120000);
}

// Runs a palette command and answers the quick picks it opens in turn (`picks`: [what, text]
// pairs). Under load the palette can swallow the command, and a quick pick can close before it
// is answered (it loses focus to a toast): then the whole chain runs again, unless `done()` says
// its effect is already there.
async function paletteThenPicks(page, command, picks, done = async () => false) {
  await retry(`${command}: ${picks.map(([what]) => what).join(', ')}`, async () => {
    if (await done()) {
      return;
    }
    await palette(page, command);
    for (const [what, text] of picks) {
      await retry(what, () => choose(page, text), 10000);
    }
  }, 180000);
}

const WINDOW = { width: 1400, height: 900 };

// `promise`, or an error after 10s.
function bounded(promise) {
  let timer;
  const late = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('no answer in 10s')), 10000)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// Where the party view's role boxes are once the window is `viewport`: each box (every `rect` of
// the picture, named by the label drawn after it) and the area of the panel that can be seen (the
// webview's viewport, cut by whatever clips the picture inside it, by the frames it is nested in,
// and by the window), in the window's coordinates. First waits for the panel to take its new
// size (the same over two looks, and another than before if the window changed), then up to 15s
// for every box to be inside; the caller asserts.
async function partyAt(page, frame, viewport) {
  // (Plain reads, each bounded: a webview without scripts never runs an animation frame.)
  const size = () => bounded(frame.evaluate(() => `${innerWidth}x${innerHeight}`));
  const before = await retry('the party view', size);
  const resized = JSON.stringify(page.viewportSize()) !== JSON.stringify(viewport);
  await page.setViewportSize(viewport);
  let last = '';
  await retry('the party view to take its new size', async () => {
    const now = await size();
    const settled = now === last && (!resized || now !== before);
    last = now;
    if (!settled) {
      throw new Error(`the view is ${now} (was ${before})`);
    }
  }, 30000);
  const measure = async () => {
    const seen = await bounded(frame.evaluate(() => {
      const box = (r) => ({ left: r.left, top: r.top, right: r.right, bottom: r.bottom });
      const svg = document.getElementById('party-dag');
      const clips = [{ left: 0, top: 0, right: innerWidth, bottom: innerHeight }];
      for (let e = svg.parentElement; e && e !== document.documentElement; e = e.parentElement) {
        if (getComputedStyle(e).overflow !== 'visible') {
          const r = e.getBoundingClientRect();
          const left = r.left + e.clientLeft;
          const top = r.top + e.clientTop;
          clips.push({ left, top, right: left + e.clientWidth, bottom: top + e.clientHeight });
        }
      }
      const nodes = [...svg.querySelectorAll('rect')].map((r) => ({
        label: r.nextElementSibling ? r.nextElementSibling.textContent : '',
        ...box(r.getBoundingClientRect()),
      }));
      return { clips, nodes, orientation: svg.dataset.orientation ?? null, scale: svg.dataset.scale ?? null };
    }));
    // The frames' boxes, innermost first: the innermost is the view's own viewport.
    const clips = [{ left: 0, top: 0, right: viewport.width, bottom: viewport.height }];
    let origin;
    for (let f = frame; f.parentFrame(); f = f.parentFrame()) {
      const el = await f.frameElement();
      const b = await el.boundingBox();
      const [bl, bt] = await el.evaluate((e) => [e.clientLeft, e.clientTop]);
      origin ??= { x: b.x + bl, y: b.y + bt };
      clips.push({ left: b.x, top: b.y, right: b.x + b.width, bottom: b.y + b.height });
    }
    const at = (r) => ({ left: r.left + origin.x, top: r.top + origin.y, right: r.right + origin.x, bottom: r.bottom + origin.y });
    const all = [...clips, ...seen.clips.map(at)];
    const panel = {
      left: Math.max(...all.map((c) => c.left)),
      top: Math.max(...all.map((c) => c.top)),
      right: Math.min(...all.map((c) => c.right)),
      bottom: Math.min(...all.map((c) => c.bottom)),
    };
    const nodes = seen.nodes.map((n) => ({ ...n, ...at(n) }));
    return { panel, nodes, orientation: seen.orientation, scale: seen.scale };
  };
  const inside = (p, n) => n.left >= p.left - 0.5 && n.top >= p.top - 0.5 && n.right <= p.right + 0.5 && n.bottom <= p.bottom + 0.5;
  let seen;
  try {
    await retry('every role inside the party view', async () => {
      seen = await measure();
      if (!seen.nodes.length || !seen.nodes.every((n) => inside(seen.panel, n))) {
        throw new Error(JSON.stringify(seen));
      }
    }, 15000);
  } catch (e) {
    // Not inside: the caller's assertions say where each box is.
  }
  return seen ?? await measure();
}

(async () => {
  fs.mkdirSync(path.join(userData, 'User'), { recursive: true });
  fs.writeFileSync(path.join(userData, 'User/settings.json'), JSON.stringify({
    'security.workspace.trust.enabled': false,
    'workbench.startupEditor': 'none',
    'telemetry.telemetryLevel': 'off',
    'extensions.autoCheckUpdates': false,
    'update.mode': 'none',
    // Side by side even in a narrow editor group (the views opened beside make it narrow).
    'diffEditor.useInlineViewWhenSpaceIsLimited': false,
  }));
  await run(['--install-extension', process.env.VSIX]);
  step('installed');
  const cfg = path.join(dir, 'config.yaml');
  fs.writeFileSync(cfg, `bind-addr: 127.0.0.1:${port}\nauth: none\ncert: false\n`);
  const server = codeServer(['--config', cfg, '--disable-telemetry', '--disable-update-check', root]);
  let log = '';
  server.stdout.on('data', (d) => (log += d));
  server.stderr.on('data', (d) => (log += d));
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  try {
    const page = await browser.newPage({ viewport: WINDOW });
    await retry('code-server page', () => page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(root)}`, { timeout: 5000 }));
    await page.locator('.monaco-workbench').waitFor({ timeout: 60000 });
    step('workbench');

    // 1. "Troupe: List Agents" from the palette shows the worker's run.
    await palette(page, 'Troupe: List Agents');
    await page.locator('.quick-input-widget', { hasText: 'agent runs' }).waitFor({ timeout: 30000 });
    findings.agents = await page.locator('.quick-input-list .monaco-list-row').allInnerTexts();
    await page.keyboard.press('Escape');
    step('list agents');

    // 2. The pending request is a diagnostic on notes.txt; approve it from the quick-fix menu.
    await retry('open notes.txt', async () => {
      await page.keyboard.press('Escape');
      await page.keyboard.press('Control+P');
      const input = page.locator('.quick-input-widget input');
      await input.waitFor({ timeout: 3000 });
      await input.fill('notes.txt');
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'notes.txt' }).first().waitFor({ timeout: 3000 });
      await page.keyboard.press('Enter');
      await page.locator('.monaco-editor .view-lines', { hasText: 'three' }).waitFor({ timeout: 3000 });
    });
    await page.locator('.monaco-editor .squiggly-warning, .monaco-editor .squiggly-error').first().waitFor({ timeout: 60000 });
    step('diagnostic');
    await page.locator('.monaco-editor .view-line', { hasText: 'two' }).first().click();
    await retry('quick fix menu', async () => {
      await page.keyboard.press('Control+.');
      await page.locator('.action-widget', { hasText: 'Troupe: Approve' }).first().waitFor({ timeout: 3000 });
    });
    findings.quick_fixes = await page.locator('.action-widget .monaco-list-row').allInnerTexts();
    await page.keyboard.press('Enter');
    await page.locator('.monaco-editor .squiggly-warning').first().waitFor({ state: 'detached', timeout: 30000 });
    step('approved');

    // 3. The party view: a picture of the DAG.
    await paletteThenPick(page, 'Troupe: Party Status', 'choose the party', 'feature-development');
    const frame = await retry('party view', async () => {
      for (const f of page.frames()) {
        if (await f.locator('#party-dag').count()) {
          return f;
        }
      }
      throw new Error('no party view yet');
    });
    findings.party_title = await frame.locator('#party-title').innerText();
    findings.dag_roles = await frame.locator('#party-dag rect').count();
    // At the window's size (the panel half the editor area), then in a narrower and a wider
    // window: where each role's box is, against the area of the panel it can be seen in.
    findings.party_sizes = [];
    for (const [name, viewport, shot] of [
      ['half', WINDOW, process.env.SCREENSHOT],
      ['narrow', { width: 1000, height: 900 }, process.env.SCREENSHOT.replace(/\.png$/, '-narrow.png')],
      ['wide', { width: 2400, height: 1000 }, process.env.SCREENSHOT.replace(/\.png$/, '-wide.png')],
    ]) {
      findings.party_sizes.push({ name, viewport, ...await partyAt(page, frame, viewport) });
      await page.screenshot({ path: shot });
    }
    await partyAt(page, frame, WINDOW);
    step('screenshot');

    // 4. A pattern run drawn as its tree ("Troupe: Run Tree", then the chain's root run).
    // Filter the pick to the chain's root run, then take it.
    await paletteThenPick(page, 'Troupe: Run Tree', 'choose the run', process.env.RUN_AGENT);
    const runFrame = await retry('run view', async () => {
      for (const f of page.frames()) {
        if (await f.locator('#run-tree').count()) {
          return f;
        }
      }
      throw new Error('no run view yet');
    });
    findings.run_title = await runFrame.locator('#run-title').innerText();
    findings.run_rows = await runFrame.locator('#run-tree li.run').allInnerTexts();
    step('run tree');

    // 5-7. The collaboration views of party $PARTY_NAME: its plan, a vote, its timeline.
    const frameWith = (what, selector) => retry(what, async () => {
      for (const f of page.frames()) {
        if (await f.locator(selector).count()) {
          return f;
        }
      }
      throw new Error(`no ${what} yet`);
    });
    await paletteThenPick(page, 'Troupe: Plan', 'choose the party', process.env.PARTY_NAME);
    const planFrame = await frameWith('plan view', '#plan-steps tr.step');
    findings.plan_title = await planFrame.locator('#plan-title').innerText();
    findings.plan_rows = await planFrame.locator('#plan-steps tr.step').allInnerTexts();
    step('plan');
    const committed = page.locator('.notifications-toasts', { hasText: 'is committed' }).first();
    await paletteThenPicks(page, 'Troupe: Decide', [
      ['choose the party', process.env.PARTY_NAME],
      ['choose the decision', process.env.DECISION_TOPIC],
      ['choose the option', process.env.DECISION_OPTION],
    ], async () => (await committed.count()) > 0);
    await committed.waitFor({ timeout: 30000 });
    step('decided');
    await paletteThenPicks(page, 'Troupe: Timeline', [
      ['choose the party', process.env.PARTY_NAME],
      ['choose the member', process.env.TIMELINE_MEMBER],
    ]);
    const timelineFrame = await frameWith('timeline view', '#timeline li.event');
    findings.timeline_title = await timelineFrame.locator('#timeline-title').innerText();
    findings.timeline = await timelineFrame.locator('#timeline li.event').allInnerTexts();
    step('timeline');

    // 8. Review member $REVIEW_MEMBER of party $REVIEW_PARTY: its change to $REVIEW_FILE in the
    // diff editor (the file where the branch forked, and at its tip), then approve it.
    await paletteThenPicks(page, 'Troupe: Review Member', [
      ['choose the party', process.env.REVIEW_PARTY],
      ['choose the member', process.env.REVIEW_MEMBER],
      ['choose the file', process.env.REVIEW_FILE],
    ]);
    // (Not the `.line-delete` zones an inline diff draws removed lines in.)
    const diff = page.locator('.monaco-diff-editor');
    const side = (which) => diff.locator(`.editor.${which} .view-lines:not(.line-delete)`).first();
    await diff.locator('.editor.modified .view-lines:not(.line-delete)', { hasText: new RegExp(process.env.REVIEW_HEAD_LINE) })
      .first().waitFor({ timeout: 30000 });
    findings.review_tab = await page.locator('.editor-group-container.active .tab.active').first().innerText();
    findings.review_base = await side('original').innerText();
    findings.review_head = await side('modified').innerText();
    step('review diff');
    await palette(page, 'Troupe: Approve Member');
    await page.locator('.notifications-toasts', { hasText: 'approved' }).first().waitFor({ timeout: 30000 });
    step('member approved');

    // 9. The inbox: its $INBOX_COUNT items, among them the escalated tasks $INBOX_FIRST and
    // $INBOX_SECOND, are nodes of the "Troupe Inbox" view in the explorer, its badge (on the
    // explorer's icon) their count. The first is answered (dismissed) from "Troupe: Inbox", the
    // second from its node's "Answer…" action.
    await palette(page, 'Focus on Troupe Inbox View');
    const inboxPane = page.locator('.pane', { has: page.locator('.pane-header', { hasText: 'Troupe Inbox' }) });
    const inboxRows = inboxPane.locator('.monaco-list-row');
    const badge = page.locator('.activitybar .action-item', { has: page.locator('.codicon-explorer-view-icon') })
      .locator('.badge-content');
    const inboxState = async () => ({ rows: await inboxRows.allInnerTexts(), badge: (await badge.count()) ? await badge.innerText() : '' });
    const inboxUntil = (what, done) => retry(what, async () => {
      const seen = await inboxState();
      if (!done(seen)) {
        throw new Error(JSON.stringify(seen));
      }
      return seen;
    }, 30000);
    const first = process.env.INBOX_FIRST;
    const second = process.env.INBOX_SECOND;
    const count = Number(process.env.INBOX_COUNT);
    const showing = (n) => (s) => s.rows.length === n && s.badge === (n ? String(n) : '');
    findings.inbox = await inboxUntil('the items in the inbox view', showing(count));
    step('inbox view');
    await paletteThenPick(page, 'Troupe: Inbox', 'choose the item', first);
    await page.locator('.notifications-toasts', { hasText: 'dismissed' }).first().waitFor({ timeout: 30000 });
    findings.inbox_after_palette = await inboxUntil('one item fewer', showing(count - 1));
    step('inbox answered from the palette');
    const row = inboxRows.filter({ hasText: second }).first();
    await row.hover();
    await row.locator('.action-label[aria-label="Answer…"]').click();
    findings.inbox_after_view = await inboxUntil('two items fewer', showing(count - 2));
    step('inbox answered from the view');
  } finally {
    await browser.close();
    server.kill();
  }
  console.log(JSON.stringify(findings));
  process.exit(0);
})().catch((e) => {
  console.log(JSON.stringify({ error: String(e), ...findings }));
  process.exit(1);
});
