// Troupe for VS Code: starts `troupe lsp` with vscode-languageclient, adds the "Troupe:" commands,
// a status-bar count of pending permission requests, a live picture of a party's DAG, a
// live tree of a run and the runs it started (pattern steps, subagents), a party's plan,
// decisions (a vote quick pick) and timeline (filterable by member), and the review of a
// member's branch in VS Code's diff editor (read-only `troupe-base:`/`troupe-head:` documents)
// with comment, approve and request-changes commands, and the inbox: a tree view of everything
// waiting for the person (fed by the server's `troupe/inbox` pushes, its count as the view's
// badge), each item answered from the view or from "Troupe: Inbox".
// Approvals and predicted conflicts arrive as diagnostics from the language server.
import { execFile } from 'child_process';
import { randomBytes } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { ExecuteCommandRequest, LanguageClient, LanguageClientOptions, ServerOptions } from 'vscode-languageclient/node';

let client: LanguageClient | undefined;

/** The troupe binary: setting, then $TROUPE_BIN, then the bundled one, then PATH. */
function findBinary(context: vscode.ExtensionContext): string {
  const setting = vscode.workspace.getConfiguration('troupe').get<string>('path');
  if (setting) {
    return setting;
  }
  if (process.env.TROUPE_BIN) {
    return process.env.TROUPE_BIN;
  }
  const bundled = path.join(context.extensionPath, 'bin', 'troupe');
  return fs.existsSync(bundled) ? bundled : 'troupe';
}

/** `troupe --version`, or an error naming what went wrong. */
function version(bin: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(bin, ['--version'], (err, stdout) => {
      if (err) {
        reject(new Error(`cannot run ${bin}: ${err.message}`));
      } else {
        resolve(stdout.trim());
      }
    });
  });
}

/** Runs a daemon operation through the language server. */
async function call<T = any>(operation: string, params: object = {}): Promise<T> {
  if (!client) {
    throw new Error('the Troupe language server is not running');
  }
  return client.sendRequest(ExecuteCommandRequest.type, { command: `troupe.${operation}`, arguments: [params] });
}

function report(err: unknown) {
  vscode.window.showErrorMessage(`Troupe: ${err instanceof Error ? err.message : String(err)}`);
}

/** A party definition's name, picked from those the daemon knows. */
async function pickDefinition(title: string): Promise<string | undefined> {
  const { definitions } = await call('list_party_definitions');
  return vscode.window.showQuickPick(definitions.map((d: any) => d.name as string), { title });
}

async function pickParty(): Promise<string | undefined> {
  const { parties } = await call('list_parties');
  const picked = await vscode.window.showQuickPick(
    parties.map((p: any) => ({ label: p.name, description: p.status, detail: p.party_id, id: p.party_id })),
    { title: 'Troupe: choose a party' },
  );
  return (picked as any)?.id;
}

/** A party member whose branch is under review. */
interface Member {
  party_id: string;
  role: string;
  index: number;
}

/** The schemes of a reviewed file's two sides: at the fork point, and at the branch's tip. */
const BASE_SCHEME = 'troupe-base';
const HEAD_SCHEME = 'troupe-head';

/** A reviewed file's side as a URI: the file's path, the member in the query. */
function sideUri(scheme: string, m: Member, file: string): vscode.Uri {
  const query = new URLSearchParams({ party_id: m.party_id, role: m.role, index: String(m.index) }).toString();
  return vscode.Uri.from({ scheme, path: '/' + file, query });
}

/** The member and file of a review document, if `uri` is one. */
function reviewed(uri: vscode.Uri): { member: Member; path: string } | undefined {
  if (uri.scheme !== BASE_SCHEME && uri.scheme !== HEAD_SCHEME) {
    return undefined;
  }
  const q = new URLSearchParams(uri.query);
  return {
    member: { party_id: q.get('party_id') ?? '', role: q.get('role') ?? '', index: Number(q.get('index') ?? 0) },
    path: uri.path.replace(/^\//, ''),
  };
}

/** Both sides of a reviewed file, from `get_member_diff` with `path` (empty where absent). */
class ReviewContent implements vscode.TextDocumentContentProvider {
  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const r = reviewed(uri);
    if (!r) {
      return '';
    }
    const diff = await call('get_member_diff', { ...r.member, path: r.path });
    const file = diff.files[0] ?? {};
    return (uri.scheme === BASE_SCHEME ? file.base_text : file.head_text) ?? '';
  }
}

/** The member last opened for review (the comment and verdict commands default to it). */
let underReview: { member: Member; workdir?: string } | undefined;

/** Picks a party, then one of its members' checkouts. */
async function pickMember(): Promise<{ member: Member; workdir?: string } | undefined> {
  const party = await pickParty();
  if (!party) {
    return undefined;
  }
  const { worktrees } = await call('list_worktrees', { party_id: party });
  if (!worktrees.length) {
    vscode.window.showInformationMessage('Troupe: this party has no member checkouts');
    return undefined;
  }
  const picked: any = await vscode.window.showQuickPick(
    worktrees.map((w: any) => ({
      label: `${w.role}#${w.index}`,
      description: `${w.status} · ${w.ahead} ahead · ${w.changed_files.length} files${w.dirty ? ' · uncommitted changes' : ''}`,
      detail: w.error ?? w.branch,
      w,
    })),
    { title: 'Troupe: review which member?' },
  );
  return picked && { member: { party_id: party, role: picked.w.role, index: picked.w.index }, workdir: picked.w.workdir };
}

/** The member and the place (a path and 1-based line) the cursor is on, for a review command. */
async function reviewTarget(): Promise<{ member: Member; path?: string; line?: number } | undefined> {
  const editor = vscode.window.activeTextEditor;
  const here = editor && reviewed(editor.document.uri);
  if (here && editor) {
    return { member: here.member, path: here.path, line: editor.selection.active.line + 1 };
  }
  const target = underReview ?? (await pickMember());
  if (!target) {
    return undefined;
  }
  underReview = target;
  // A file of the member's worktree: its path there.
  const file = editor?.document.uri.scheme === 'file' ? editor.document.uri.fsPath : undefined;
  if (file && target.workdir && file.startsWith(target.workdir + path.sep)) {
    return { member: target.member, path: path.relative(target.workdir, file), line: editor!.selection.active.line + 1 };
  }
  return { member: target.member };
}

/** Sends a review of a member: `review_member`, then says what became of it. A member that has
 * finished can be started again with a review that asks for something (its checkout as it is). */
async function sendReview(member: Member, verdict: string, comments: object[], summary?: string) {
  let restart = false;
  if (verdict !== 'approve') {
    const { worktrees } = await call('list_worktrees', { party_id: member.party_id });
    const w = worktrees.find((x: any) => x.role === member.role && x.index === member.index);
    if (w && w.status !== 'running') {
      const how = await vscode.window.showQuickPick(['Start it again with this review', 'Only record the review'], {
        title: `Troupe: ${member.role}#${member.index} is ${w.status}`,
      });
      if (!how) {
        return;
      }
      restart = how.startsWith('Start');
    }
  }
  const r = await call('review_member', { ...member, verdict, comments, summary, restart });
  const words: Record<string, string> = { approve: 'approved', request_changes: 'asked for changes from', comment: 'commented on' };
  const then = r.restarted_run_id ? ' — started again with it' : r.delivered || verdict === 'approve' ? '' : ' (it is not running: the review is on the timeline)';
  vscode.window.showInformationMessage(`Troupe: ${words[verdict] ?? verdict} ${r.role}#${r.index}${then}`);
}

/** One thing waiting for the person (`InboxItem` of the daemon's wire types). */
interface InboxItem {
  item_id: string;
  kind: string;
  project_id?: string;
  party_id?: string;
  title: string;
  detail?: string;
  since: string;
  /** `op` with `params`, plus `{[choice_field]: one of choices}` when there are choices. */
  answer: { op: string; params: Record<string, unknown>; choice_field?: string; choices?: unknown[] };
}

const INBOX_ICONS: Record<string, string> = {
  approval: 'shield', paused_role: 'debug-pause', escalation: 'report', decision: 'law', pick: 'list-selection',
  merge_conflict: 'git-merge',
};

/** The inbox view: one node per item, as the language server last pushed them. */
class InboxTree implements vscode.TreeDataProvider<InboxItem> {
  private items: InboxItem[] = [];
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;

  set(items: InboxItem[]) {
    this.items = items;
    this.changed.fire();
  }

  getTreeItem(i: InboxItem): vscode.TreeItem {
    const node = new vscode.TreeItem(i.title);
    node.id = i.item_id;
    node.description = i.kind;
    node.tooltip = i.detail ?? i.title;
    node.contextValue = 'troupeInboxItem';
    node.iconPath = new vscode.ThemeIcon(INBOX_ICONS[i.kind] ?? 'bell');
    return node;
  }

  getChildren(parent?: InboxItem): InboxItem[] {
    return parent ? [] : this.items;
  }
}

/** Answers an inbox item: its `answer.op` with its params, plus the choice picked when it has
 * choices, or the words typed when it has a `choice_field` and no choices (an agent's free-text
 * question); one with neither, such as an escalation, is answered at once: dismissed. */
async function answerInbox(item: InboxItem) {
  const { op, params, choice_field: field, choices = [] } = item.answer;
  let args: Record<string, unknown> = { ...params };
  let said = op === 'dismiss_inbox_item' ? 'dismissed' : 'answered';
  if (field && !choices.length) {
    const typed = await vscode.window.showInputBox({ title: `Troupe: ${item.title}`, prompt: 'Your answer' });
    if (!typed) {
      return;
    }
    args = { ...args, [field]: typed };
    said = 'answered:';
  } else if (field && choices.length) {
    const picked: any = await vscode.window.showQuickPick(
      choices.map((c) => ({ label: String(c), c })),
      { title: `Troupe: ${item.title}` },
    );
    if (!picked) {
      return;
    }
    args = { ...args, [field]: picked.c };
    said = `answered ${picked.label}:`;
  }
  await call(op, args);
  vscode.window.showInformationMessage(`Troupe: ${said} ${item.title}`);
}

export async function activate(context: vscode.ExtensionContext) {
  const bin = findBinary(context);
  const output = vscode.window.createOutputChannel('Troupe');
  try {
    const v = await version(bin);
    output.appendLine(`using ${bin}: ${v}`);
    if (!/^troupe \d+\.\d+\.\d+/.test(v)) {
      throw new Error(`${bin} --version said "${v}", which is not troupe`);
    }
  } catch (err) {
    report(err);
    return;
  }
  const serverOptions: ServerOptions = { command: bin, args: ['lsp'] };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }],
    outputChannel: output,
  };
  client = new LanguageClient('troupe', 'Troupe', serverOptions, clientOptions);

  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 100);
  status.command = 'troupe.pendingApprovals';
  status.text = '$(shield) Troupe';
  status.show();
  context.subscriptions.push(status);

  const commands: Record<string, () => Promise<void>> = {
    'troupe.launchParty': async () => {
      const picked = await pickDefinition('Troupe: launch which party?');
      if (picked) {
        const r = await call('launch_party', { name: picked });
        showParty(context, r.party_id);
      }
    },
    'troupe.launchPartyOnIssue': async () => {
      const name = await pickDefinition('Troupe: launch which party on an issue?');
      if (!name) {
        return;
      }
      const issue = await vscode.window.showInputBox({
        title: `Troupe: the issue ${name} takes as its task (its work comes back as a pull request)`,
        prompt: "OWNER/REPO#N, #N (the project's own repository) or the issue's URL",
        placeHolder: 'owner/repo#12',
        ignoreFocusOut: true,
        validateInput: (v) => (v.trim() ? undefined : 'name an issue'),
      });
      if (issue?.trim()) {
        const r = await call('launch_party', { name, issue: issue.trim() });
        showParty(context, r.party_id);
      }
    },
    'troupe.partyStatus': async () => {
      const id = await pickParty();
      if (id) {
        showParty(context, id);
      }
    },
    'troupe.listAgents': async () => {
      const { runs } = await call('list_agents');
      output.appendLine(`${runs.length} agent runs`);
      await vscode.window.showQuickPick(
        runs.length
          ? runs.map((r: any) => ({ label: `${r.agent_name} — ${r.status}`, description: r.role_name ?? '', detail: r.run_id }))
          : [{ label: 'No agent runs yet' }],
        { title: 'Troupe: agent runs' },
      );
    },
    'troupe.memberOutput': async () => {
      const { runs } = await call('list_agents');
      const picked: any = await vscode.window.showQuickPick(
        runs.map((r: any) => ({
          label: `${r.role_name ? `${r.role_name}#${r.instance_index ?? 0}` : r.agent_name} — ${r.status}`,
          description: r.agent_name,
          detail: r.run_id,
          id: r.run_id,
        })),
        { title: "Troupe: whose output?" },
      );
      if (!picked) {
        return;
      }
      // What it wrote so far; the server then pushes the rest (`troupe/runLog`) until it ends.
      const log = await call('get_run_log', { run_id: picked.id });
      const channel = runLogChannel(picked.id, picked.label);
      channel.append(log.text);
      if (log.ended) {
        channel.appendLine('— ended —');
      }
      channel.show(true);
    },
    'troupe.runTree': async () => {
      const { runs } = await call('list_agents');
      // Runs that are not a pattern's steps: each is the root of its tree.
      const roots = runs.filter((r: any) => !r.flow_root);
      const picked: any = await vscode.window.showQuickPick(
        roots.map((r: any) => ({ label: `${r.agent_name} — ${r.status}`, description: r.trigger ?? r.role_name ?? '', detail: r.run_id, id: r.run_id })),
        { title: 'Troupe: the tree of which run?' },
      );
      if (picked) {
        showRun(context, picked.id);
      }
    },
    'troupe.plan': async () => {
      const id = await pickParty();
      if (id) {
        showPlan(context, id);
      }
    },
    'troupe.decide': async () => {
      const id = await pickParty();
      if (!id) {
        return;
      }
      const { decisions } = await call('list_decisions', { party_id: id });
      const open = decisions.filter((d: any) => d.status !== 'committed');
      if (!open.length) {
        vscode.window.showInformationMessage('Troupe: no open decision in this party');
        return;
      }
      const picked: any = await vscode.window.showQuickPick(
        open.map((d: any) => ({ label: d.topic, description: `${d.status} · ${d.votes.length} votes`, detail: d.decision_id, d })),
        { title: 'Troupe: which decision?' },
      );
      if (!picked) {
        return;
      }
      const option = await vscode.window.showQuickPick(picked.d.options as string[], { title: `Troupe: ${picked.d.topic}` });
      if (!option) {
        return;
      }
      // A tie waits for the person (or the leader) to choose; otherwise the person votes.
      const op = picked.d.status === 'tied' ? 'commit_decision' : 'vote';
      const { decision } = await call(op, { decision_id: picked.d.decision_id, option });
      vscode.window.showInformationMessage(`Troupe: ${decision.topic} is ${decision.status}${decision.chosen ? `: ${decision.chosen}` : ''}`);
    },
    'troupe.timeline': async () => {
      const id = await pickParty();
      if (!id) {
        return;
      }
      const status = await call('get_party_status', { party_id: id });
      const who: any = await vscode.window.showQuickPick(
        [{ label: 'All members', member: undefined }, ...status.roles.map((r: any) => ({ label: r.role, member: r.role }))],
        { title: 'Troupe: whose timeline?' },
      );
      if (who) {
        showTimeline(context, id, who.member);
      }
    },
    'troupe.sendMessage': async () => {
      const from = await vscode.window.showInputBox({ prompt: 'From session id' });
      const to = from && (await vscode.window.showInputBox({ prompt: 'To session id' }));
      const content = to && (await vscode.window.showInputBox({ prompt: 'Message' }));
      if (content) {
        const r = await call('send_message', { from_session_id: from, to_session_id: to, content });
        vscode.window.showInformationMessage(`Troupe: sent ${r.message_id}`);
      }
    },
    'troupe.cancelParty': async () => {
      const id = await pickParty();
      if (id) {
        const r = await call('cancel_party', { party_id: id });
        vscode.window.showInformationMessage(`Troupe: party ${r.party.name} ${r.party.status}`);
      }
    },
    'troupe.pendingApprovals': async () => {
      const { approvals } = await call('list_approvals', { status: 'pending' });
      const picked: any = await vscode.window.showQuickPick(
        approvals.map((a: any) => ({
          label: `${a.is_dangerous ? '$(warning) ' : ''}${a.tool_name} ${a.subject}`,
          description: a.role_name ?? '',
          detail: a.is_dangerous ? `dangerous: ${a.danger_reason ?? ''} (${a.approval_id})` : a.approval_id,
          a,
        })),
        { title: `Troupe: ${approvals.length} pending requests` },
      );
      if (!picked) {
        return;
      }
      // No rule may answer a request outside the member's worktree: no approve_pattern for it.
      const decisions = picked.a.outside_worktree ? ['approve', 'deny', 'abort'] : ['approve', 'deny', 'approve_pattern', 'abort'];
      const decision = await vscode.window.showQuickPick(decisions, { title: picked.label });
      if (decision) {
        await call('decide_approval', { approval_id: picked.a.approval_id, decision });
      }
    },
    'troupe.reviewMember': async () => {
      const target = await pickMember();
      if (!target) {
        return;
      }
      underReview = target;
      const m = target.member;
      const diff = await call('get_member_diff', m);
      if (!diff.files.length) {
        vscode.window.showInformationMessage(`Troupe: ${m.role}#${m.index} has changed nothing yet`);
        return;
      }
      const file: any = await vscode.window.showQuickPick(
        diff.files.map((f: any) => ({
          label: f.path,
          description: `${f.status} +${f.additions} −${f.deletions}${f.binary ? ' (binary)' : ''}`,
          detail: f.old_path ? `from ${f.old_path}` : undefined,
          f,
        })),
        { title: `Troupe: ${m.role}#${m.index} changed ${diff.files.length} files (+${diff.additions} −${diff.deletions})` },
      );
      if (file) {
        await vscode.commands.executeCommand(
          'vscode.diff',
          sideUri(BASE_SCHEME, m, file.f.path),
          sideUri(HEAD_SCHEME, m, file.f.path),
          `${file.f.path} (${m.role}#${m.index})`,
          { preview: false },
        );
      }
    },
    'troupe.commentMember': async () => {
      const target = await reviewTarget();
      if (!target) {
        return;
      }
      const where = target.path ? ` on ${target.path}${target.line ? `:${target.line}` : ''}` : '';
      const text = await vscode.window.showInputBox({ prompt: `Comment for ${target.member.role}#${target.member.index}${where}` });
      if (text) {
        await sendReview(target.member, 'comment', [{ path: target.path, line: target.line, text }]);
      }
    },
    'troupe.approveMember': async () => {
      const target = await reviewTarget();
      if (target) {
        await sendReview(target.member, 'approve', []);
      }
    },
    'troupe.requestChanges': async () => {
      const target = await reviewTarget();
      const summary = target && (await vscode.window.showInputBox({ prompt: `What should ${target.member.role}#${target.member.index} change?` }));
      if (target && summary) {
        await sendReview(target.member, 'request_changes', [], summary);
      }
    },
    'troupe.pickAttempt': async () => {
      const party = await pickParty();
      if (!party) {
        return;
      }
      const { worktrees } = await call('list_worktrees', { party_id: party });
      const roles: string[] = [...new Set<string>(worktrees.map((w: any) => w.role as string))].filter(
        (role) => worktrees.filter((w: any) => w.role === role).length > 1,
      );
      const role: string | undefined =
        roles.length === 1 ? roles[0] : await vscode.window.showQuickPick(roles as string[], { title: 'Troupe: pick for which role?' });
      if (!role) {
        return;
      }
      const picked: any = await vscode.window.showQuickPick(
        worktrees
          .filter((w: any) => w.role === role)
          .map((w: any) => ({ label: `${w.role}#${w.index}`, description: `${w.status} · ${w.ahead} ahead · ${w.changed_files.length} files`, w })),
        { title: `Troupe: which attempt of ${role} lands?` },
      );
      if (picked) {
        await call('pick_member', { party_id: party, role, index: picked.w.index, reason: 'picked in VS Code' });
        vscode.window.showInformationMessage(`Troupe: picked ${role}#${picked.w.index} to land`);
      }
    },
    'troupe.inbox': async () => {
      const { items } = await call<{ items: InboxItem[] }>('list_inbox');
      if (!items.length) {
        vscode.window.showInformationMessage('Troupe: nothing waits for you');
        return;
      }
      const picked: any = await vscode.window.showQuickPick(
        items.map((i) => ({ label: i.title, description: i.kind, detail: i.detail, i })),
        { title: `Troupe: ${items.length} waiting for you` },
      );
      if (picked) {
        await answerInbox(picked.i);
      }
    },
    'troupe.startAgent': async () => {
      const { definitions } = await call('list_agent_definitions');
      const agent = await vscode.window.showQuickPick(definitions.map((d: any) => d.name), { title: 'Troupe: start which agent?' });
      const parent = agent && (await vscode.window.showInputBox({ prompt: 'Parent session id' }));
      const prompt = parent && (await vscode.window.showInputBox({ prompt: 'Prompt' }));
      if (prompt) {
        const r = await call('start_agent', { agent, parent_session_id: parent, prompt });
        vscode.window.showInformationMessage(`Troupe: started run ${r.run_id}`);
      }
    },
  };
  const content = new ReviewContent();
  context.subscriptions.push(
    vscode.workspace.registerTextDocumentContentProvider(BASE_SCHEME, content),
    vscode.workspace.registerTextDocumentContentProvider(HEAD_SCHEME, content),
  );
  for (const [name, fn] of Object.entries(commands)) {
    context.subscriptions.push(vscode.commands.registerCommand(name, () => fn().catch(report)));
  }

  // The inbox, as the server pushes it (before start: the first push comes right after it).
  const inbox = new InboxTree();
  const inboxView = vscode.window.createTreeView('troupeInbox', { treeDataProvider: inbox });
  context.subscriptions.push(
    inboxView,
    vscode.commands.registerCommand('troupe.answerInboxItem', (item?: InboxItem) =>
      (item ? answerInbox(item) : commands['troupe.inbox']()).catch(report),
    ),
  );
  client.onNotification('troupe/inbox', (p: { items: InboxItem[] }) => {
    const items = p.items ?? [];
    inbox.set(items);
    inboxView.badge = items.length
      ? { value: items.length, tooltip: `${items.length} waiting for you in Troupe` }
      : undefined;
  });

  // A member's output the person asked for, as it is written.
  client.onNotification('troupe/runLog', (p: { run_id: string; text: string; ended: boolean }) => {
    const channel = runLogChannel(p.run_id);
    channel.append(p.text);
    if (p.ended) {
      channel.appendLine('— ended —');
    }
  });

  await client.start();
  client.onNotification('troupe/approvals', (p: { pending: number }) => {
    status.text = p.pending ? `$(shield) Troupe: ${p.pending} pending` : '$(shield) Troupe';
  });
  context.subscriptions.push({ dispose: () => client?.stop() });
}

/** One output channel per run whose output the person follows. */
const runLogs = new Map<string, vscode.OutputChannel>();

function runLogChannel(runId: string, label?: string): vscode.OutputChannel {
  let channel = runLogs.get(runId);
  if (!channel) {
    channel = vscode.window.createOutputChannel(`Troupe: ${label ?? runId}`);
    runLogs.set(runId, channel);
  }
  return channel;
}

export function deactivate(): Thenable<void> | undefined {
  return client?.stop();
}

/**
 * A webview panel redrawn from `draw` every `everyMs` until it is closed, or until `draw` says
 * nothing more will change. The party, run, plan and timeline views are all one of these.
 */
function liveView(
  context: vscode.ExtensionContext,
  kind: string,
  title: string,
  draw: () => Promise<{ html: string; more?: boolean }>,
  everyMs = 500,
  options: vscode.WebviewPanelOptions & vscode.WebviewOptions = {},
) {
  const panel = vscode.window.createWebviewPanel(kind, title, vscode.ViewColumn.Beside, options);
  let stopped = false;
  panel.onDidDispose(() => (stopped = true), null, context.subscriptions);
  const tick = async () => {
    if (stopped) {
      return;
    }
    let more = true;
    try {
      const drawn = await draw();
      panel.webview.html = drawn.html;
      more = drawn.more ?? true;
    } catch (err) {
      panel.webview.html = `<p>${escape(String(err))}</p>`;
    }
    if (more) {
      setTimeout(tick, everyMs);
    }
  };
  tick();
}

/**
 * A live picture of a party: roles laid out by dependency depth, members coloured by state. Its
 * script fits the picture to the panel (see `render`); the nonce that lets it run is the panel's,
 * so an unchanged party is an unchanged page (VS Code does not reload it).
 */
function showParty(context: vscode.ExtensionContext, partyId: string) {
  const nonce = randomBytes(16).toString('base64');
  liveView(context, 'troupeParty', 'Troupe party', async () => ({
    html: render(await call('get_party_status', { party_id: partyId }), nonce),
  }), 500, { enableScripts: true });
}

/** A party's plan, live: the collaboration state and each step's state, owner and acceptance. */
function showPlan(context: vscode.ExtensionContext, partyId: string) {
  liveView(context, 'troupePlan', 'Troupe plan', async () => ({
    html: renderPlan(await call('get_plan', { party_id: partyId })),
  }), 1000);
}

/** A party's timeline, live, optionally only what concerns one member (a role). */
function showTimeline(context: vscode.ExtensionContext, partyId: string, member?: string) {
  liveView(context, 'troupeTimeline', `Troupe timeline${member ? ` — ${member}` : ''}`, async () => {
    const { events } = await call('list_events', { party_id: partyId, limit: 1000 });
    return { html: renderTimeline(events, member) };
  }, 1000);
}

/** A run and every run it started (pattern steps, subagents), live until the root has ended. */
function showRun(context: vscode.ExtensionContext, runId: string) {
  liveView(context, 'troupeRun', 'Troupe run', async () => {
    const tree = await call('get_run_tree', { run_id: runId });
    return {
      html: renderRunTree(tree),
      more: tree.runs.some((r: any) => r.status === 'running' || r.status === 'pending'),
    };
  });
}

const STEP_COLOURS: Record<string, string> = {
  pending: '#9e9e9e', in_progress: '#2196f3', in_review: '#ff9800', done: '#4caf50', reopened: '#e91e63', blocked: '#f44336',
};

/** A plan as a table: one row a step. */
export function renderPlan(view: any): string {
  const c = view.committed;
  const rows = (view.steps ?? [])
    .map((s: any) => `<tr class="step"><td><span class="dot" style="background:${STEP_COLOURS[s.state] ?? '#9e9e9e'}"></span>${escape(s.state)}</td>`
      + `<td>${escape(s.step_id)}</td><td>${escape(s.owner_role)}</td><td>${escape(s.spec?.title ?? '')}</td>`
      + `<td>${escape(s.spec?.acceptance ?? '')}</td><td>${escape(s.reason ?? '')}</td></tr>`)
    .join('');
  const draft = view.draft
    ? `<p id="plan-draft">Draft version ${view.draft.version} by ${escape(view.draft.proposed_by ?? '')}: ${view.draft.reviews.length} reviews</p>`
    : '';
  return `<!DOCTYPE html><html><head><style>
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); }
td, th { padding: 2px 8px; text-align: left; }
.dot { display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 6px; }
</style></head><body>
<h3 id="plan-title">${escape(view.collab_state)}${c ? ` — version ${c.version}, committed by ${escape(c.committed_by ?? '')}` : ''}</h3>
<table id="plan-steps"><tr><th>state</th><th>step</th><th>owner</th><th>title</th><th>acceptance</th><th>last</th></tr>${rows}</table>
${draft}</body></html>`;
}

/** Whether a timeline event concerns `member` (a role or a session id). */
function concerns(e: any, member: string): boolean {
  const d = e.data ?? {};
  return [e.session_id, d.role, d.by, d.owner_role, d.voter, d.to_role, d.from_role, d.reviewer].includes(member);
}

export function renderTimeline(events: any[], member?: string): string {
  const rows = events
    .filter((e) => !member || concerns(e, member))
    .map((e) => {
      const data = JSON.stringify(e.data ?? {});
      return `<li class="event"><code>${escape(String(e.created_at ?? '').slice(11, 19))}</code> <b>${escape(e.kind)}</b> `
        + `<span class="data">${escape(data.length > 120 ? data.slice(0, 117) + '...' : data)}</span></li>`;
    })
    .join('');
  return `<!DOCTYPE html><html><head><style>
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); }
ul { list-style: none; padding: 0; } .data { opacity: 0.75; }
</style></head><body><h3 id="timeline-title">${member ? `Timeline of ${escape(member)}` : 'Timeline'}</h3>
<ul id="timeline">${rows}</ul></body></html>`;
}

const RUN_COLOURS: Record<string, string> = {
  pending: '#9e9e9e', running: '#2196f3', success: '#4caf50', partial: '#8bc34a', blocked: '#ff9800',
  crashed: '#f44336', timeout: '#ff5722', cancelled: '#757575',
};

/** A run tree as nested rows: agent, why it was started, status, and the start of its answer. */
export function renderRunTree(tree: any): string {
  const root = tree.runs[0] ?? {};
  const chain = tree.chain?.length ? ` — chain ${tree.chain.map(escape).join(' &gt; ')}` : '';
  const t = tree.total ?? {};
  const rows = tree.runs
    .map((r: any) => {
      const said = String(r.error ?? r.output ?? '');
      const short = said.length > 100 ? said.slice(0, 97) + '...' : said;
      return `<li class="run" style="margin-left:${(r.depth ?? 0) * 18}px">`
        + `<span class="dot" style="background:${RUN_COLOURS[r.status] ?? '#9e9e9e'}"></span>`
        + `<b>${escape(r.agent)}</b> <i>${escape(r.trigger ?? 'member')}</i> ${escape(r.status)}`
        + `<span class="said">${escape(short)}</span></li>`;
    })
    .join('');
  return `<!DOCTYPE html><html><head><style>
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); }
ul { list-style: none; padding: 0; } li.run { margin: 4px 0; }
.dot { display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 6px; }
.said { margin-left: 8px; opacity: 0.75; }
</style></head><body>
<h3 id="run-title">${escape(root.agent ?? '')} — ${escape(root.status ?? '')}${chain}</h3>
<p>${t.input_tokens ?? 0} tokens in, ${t.output_tokens ?? 0} out, $${Number(t.cost_usd ?? 0).toFixed(4)}</p>
<ul id="run-tree">${rows}</ul></body></html>`;
}

const COLOURS: Record<string, string> = {
  pending: '#9e9e9e', running: '#2196f3', completed: '#4caf50', crashed: '#ff9800',
  failed: '#f44336', cancelled: '#757575', skipped: '#cddc39', paused: '#9c27b0',
};

function escape(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c] as string));
}

/** A role's box in the party picture, and the room around and between boxes. */
const NODE_W = 180;
const NODE_H = 80;
/** Between one layer (a dependency depth) and the next: room for the arrows. */
const LAYER_GAP = 48;
/** Between two roles of the same layer. */
const SIBLING_GAP = 24;
const MARGIN = 20;
/** The party picture is never drawn smaller than this (its labels stay readable); below it, it scrolls. */
export const MIN_SCALE = 0.7;
/** Member dots a role's box has room for; more are summed up as "+N". */
const MAX_DOTS = 7;

export type Orientation = 'left-to-right' | 'top-down';

/** Where a party's roles go for one orientation, in the picture's own units. */
export interface DagLayout {
  orientation: Orientation;
  width: number;
  height: number;
  /** Each role's box, top-left corner. */
  nodes: Record<string, { x: number; y: number }>;
  /** Each dependency's arrow as an SVG path, in the order of `dagEdges`. */
  edges: string[];
}

/**
 * The roles in layers by dependency depth: a role goes one layer after its deepest dependency
 * (a cycle is cut where it closes). Within a layer, roles are in definition order, then sorted
 * by where their dependencies sit in the layers before (the mean of their slots), which keeps
 * arrows short and uncrossed for the usual fan-out/fan-in shapes.
 */
export function dagLayers(roles: { role: string; depends_on?: string[] }[]): string[][] {
  const known = new Set(roles.map((r) => r.role));
  const depsOf = (name: string) => (roles.find((r) => r.role === name)?.depends_on ?? []).filter((d) => known.has(d));
  const depth: Record<string, number> = {};
  const depthOf = (name: string, seen: Set<string> = new Set()): number => {
    if (depth[name] !== undefined) {
      return depth[name];
    }
    const deps = depsOf(name).filter((d) => !seen.has(d) && d !== name);
    const d = deps.length ? 1 + Math.max(...deps.map((x) => depthOf(x, new Set([...seen, name])))) : 0;
    depth[name] = d;
    return d;
  };
  roles.forEach((r) => depthOf(r.role));
  const layers: string[][] = [];
  roles.forEach((r) => (layers[depth[r.role]] ??= []).push(r.role));
  const slot: Record<string, number> = {};
  return layers
    .filter((l) => l)
    .map((layer) => {
      const key = (name: string) => {
        const placed = depsOf(name).filter((d) => slot[d] !== undefined);
        return placed.length ? placed.reduce((sum, d) => sum + slot[d], 0) / placed.length : 0;
      };
      const sorted = [...layer].sort((a, b) => key(a) - key(b));
      sorted.forEach((name, i) => (slot[name] = i - (sorted.length - 1) / 2));
      return sorted;
    });
}

/** Every dependency arrow of the party, as [from, to]. */
export function dagEdges(roles: { role: string; depends_on?: string[] }[]): [string, string][] {
  const known = new Set(roles.map((r) => r.role));
  return roles.flatMap((r) => (r.depends_on ?? []).filter((d) => known.has(d) && d !== r.role).map((d) => [d, r.role] as [string, string]));
}

/**
 * The layers drawn left to right (layer after layer in columns) or top down (in rows), each
 * layer centred across, the arrows curving from one box's far side to the next one's near side.
 */
export function layoutDag(layers: string[][], edges: [string, string][], orientation: Orientation): DagLayout {
  const across = Math.max(0, ...layers.map((l) => l.length));
  const along = (n: number, size: number) => (n ? n * size + (n - 1) * LAYER_GAP : 0);
  const side = (n: number, size: number) => (n ? n * size + (n - 1) * SIBLING_GAP : 0);
  const lr = orientation === 'left-to-right';
  const width = 2 * MARGIN + (lr ? along(layers.length, NODE_W) : side(across, NODE_W));
  const height = 2 * MARGIN + (lr ? side(across, NODE_H) : along(layers.length, NODE_H));
  const nodes: Record<string, { x: number; y: number }> = {};
  layers.forEach((layer, l) =>
    layer.forEach((name, i) => {
      const a = l * ((lr ? NODE_W : NODE_H) + LAYER_GAP);
      const step = (lr ? NODE_H : NODE_W) + SIBLING_GAP;
      const c = ((across - layer.length) * step) / 2 + i * step;
      nodes[name] = lr ? { x: MARGIN + a, y: MARGIN + c } : { x: MARGIN + c, y: MARGIN + a };
    }),
  );
  const paths = edges.map(([from, to]) => {
    const a = nodes[from];
    const b = nodes[to];
    if (lr) {
      const [x1, y1, x2, y2] = [a.x + NODE_W, a.y + NODE_H / 2, b.x, b.y + NODE_H / 2];
      const m = (x1 + x2) / 2;
      return `M${x1},${y1} C${m},${y1} ${m},${y2} ${x2},${y2}`;
    }
    const [x1, y1, x2, y2] = [a.x + NODE_W / 2, a.y + NODE_H, b.x + NODE_W / 2, b.y];
    const m = (y1 + y2) / 2;
    return `M${x1},${y1} C${x1},${m} ${x2},${m} ${x2},${y2}`;
  });
  return { orientation, width, height, nodes, edges: paths };
}

/**
 * The party view: its DAG as an SVG, and a script that fits it to the panel whenever the panel
 * changes size. Of the two layouts, left to right and top down, it takes the one that can be
 * drawn larger in the panel (zoomed to fit, at most 1:1; left to right on a tie), so a narrow
 * panel gets the party top down. Never below `MIN_SCALE`: a party too big even then scrolls
 * (the picture's area has `overflow: auto`) rather than losing roles off the edge. Without the
 * script (or before it runs) it is the left-to-right layout at 1:1.
 */
export function render(status: any, nonce: string): string {
  const roles: any[] = status.roles;
  const layers = dagLayers(roles);
  const edges = dagEdges(roles);
  const layouts = (['left-to-right', 'top-down'] as Orientation[]).map((o) => layoutDag(layers, edges, o));
  const first = layouts[0];
  const boxes = roles.map((r) => {
    const { x, y } = first.nodes[r.role];
    const members = status.members.filter((m: any) => m.role === r.role);
    const shown = members.length > MAX_DOTS ? members.slice(0, MAX_DOTS - 1) : members;
    const dots = shown
      .map((m: any, i: number) => `<circle cx="${20 + i * 22}" cy="62" r="8" fill="${COLOURS[m.status] ?? '#000'}"><title>${escape(`${m.role}#${m.index}: ${m.status}`)}</title></circle>`)
      .join('');
    const more = members.length > shown.length
      ? `<text x="${20 + shown.length * 22 - 6}" y="67" fill="#bbb" font-size="13">+${members.length - shown.length}</text>`
      : '';
    const name = String(r.role);
    const label = name.length > 19 ? `${name.slice(0, 18)}…` : name;
    return `<g class="role" data-role="${escape(name)}" transform="translate(${x},${y})"><title>${escape(name)}</title>`
      + `<rect width="${NODE_W}" height="${NODE_H}" rx="8" fill="#1e1e1e" stroke="${COLOURS[r.status] ?? '#9e9e9e'}" stroke-width="3"/>`
      + `<text x="10" y="22" fill="#fff" font-size="14">${escape(label)}${r.is_leader ? ' ★' : ''}</text>`
      + `<text x="10" y="41" fill="#bbb" font-size="12">${escape(r.status)} · ${r.completed}/${r.count}</text>`
      + `${dots}${more}</g>`;
  });
  const arrows = first.edges.map((d, i) => `<path class="edge" data-edge="${i}" d="${d}" fill="none" stroke="#888" stroke-width="2" marker-end="url(#arrow)"/>`);
  // A data block, not a script: `<` escaped so that no role name can end it.
  const data = JSON.stringify(layouts).replace(/</g, '\\u003c');
  return `<!DOCTYPE html><html><head>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-${nonce}';">
<style>
html, body { height: 100%; }
body { margin: 0; padding: 0; display: flex; flex-direction: column; overflow: hidden; background: #111; color: #eee; font-family: sans-serif; }
#party-title { margin: 12px 20px 4px; flex: none; }
#party-view { flex: 1; min-height: 0; overflow: auto; }
#party-dag { display: block; margin: 0 auto; }
</style></head><body>
<h3 id="party-title">${escape(status.party.name)} — ${escape(status.party.status)}</h3>
<div id="party-view">
<svg id="party-dag" width="${first.width}" height="${first.height}" viewBox="0 0 ${first.width} ${first.height}" data-orientation="${first.orientation}" data-scale="1" xmlns="http://www.w3.org/2000/svg">
<defs><marker id="arrow" markerWidth="10" markerHeight="10" refX="9" refY="3" orient="auto"><path d="M0,0 L0,6 L9,3 z" fill="#888"/></marker></defs>
${arrows.join('')}${boxes.join('')}</svg></div>
<script type="application/json" id="party-layouts">${data}</script>
<script nonce="${nonce}">
(() => {
  const MIN_SCALE = ${MIN_SCALE};
  const layouts = JSON.parse(document.getElementById('party-layouts').textContent);
  const view = document.getElementById('party-view');
  const svg = document.getElementById('party-dag');
  const nodes = [...svg.querySelectorAll('g.role')];
  const edges = [...svg.querySelectorAll('path.edge')];
  // The whole area, scroll bars or not (so that they cannot make the choice flip back and forth).
  const fit = () => {
    const box = view.getBoundingClientRect();
    const w = Math.floor(box.width);
    const h = Math.floor(box.height);
    if (w <= 0 || h <= 0) {
      return;
    }
    let best = layouts[0];
    let scale = 0;
    for (const l of layouts) {
      const s = Math.min(1, w / l.width, h / l.height);
      if (s > scale + 1e-6) {
        best = l;
        scale = s;
      }
    }
    scale = Math.max(scale, MIN_SCALE);
    nodes.forEach((g) => {
      const p = best.nodes[g.dataset.role];
      g.setAttribute('transform', 'translate(' + p.x + ',' + p.y + ')');
    });
    edges.forEach((e) => e.setAttribute('d', best.edges[Number(e.dataset.edge)]));
    svg.setAttribute('viewBox', '0 0 ' + best.width + ' ' + best.height);
    svg.setAttribute('width', String(Math.floor(best.width * scale)));
    svg.setAttribute('height', String(Math.floor(best.height * scale)));
    svg.dataset.orientation = best.orientation;
    svg.dataset.scale = scale.toFixed(3);
    svg.dataset.fitted = w + 'x' + h;
  };
  new ResizeObserver(fit).observe(view);
  window.addEventListener('resize', fit);
  fit();
})();
</script></body></html>`;
}
