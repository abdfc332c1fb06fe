-- troupe: the Neovim front of Troupe. Commands run daemon operations through the `troupe` LSP
-- client (workspace/executeCommand `troupe.<operation>`); approvals arrive as diagnostics with
-- code actions (use vim.lsp.buf.code_action()), predicted conflicts as warnings. A member's
-- branch is reviewed in a diff split of two scratch buffers (the file where it forked, and at
-- the branch's tip) that nothing writes back. The inbox (everything waiting for you in the
-- project) is pushed by the server (`troupe/inbox`): `M.inbox` holds it, and `User TroupeInbox`
-- fires at each push for statuslines; `:Troupe inbox` answers its items. `:Troupe log <run_id>`
-- shows a run's output in a buffer that grows as the server pushes the rest (`troupe/runLog`).
local M = {}

--- The inbox items the server last pushed (`troupe/inbox`), oldest first.
M.inbox = {}

--- The `troupe/inbox` notification: keeps `M.inbox` and fires `User TroupeInbox`.
function M.on_inbox(_, params)
  M.inbox = (params or {}).items or {}
  vim.api.nvim_exec_autocmds('User', { pattern = 'TroupeInbox', modeline = false, data = { count = #M.inbox } })
end

--- Buffers showing a run's output (`:Troupe log <run_id>`), by run id.
M.logs = {}

--- Appends `text` to the log buffer of `run_id` (made if needed), as lines.
local function log_append(run_id, text, ended)
  local buf = M.logs[run_id]
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return
  end
  local last = vim.api.nvim_buf_line_count(buf)
  local tail = vim.api.nvim_buf_get_lines(buf, last - 1, last, false)[1] or ''
  local lines = vim.split(tail .. (text or ''), '\n', { plain = true })
  if ended then
    if lines[#lines] == '' then
      lines[#lines] = '-- ended --'
    else
      table.insert(lines, '-- ended --')
    end
  end
  vim.api.nvim_buf_set_lines(buf, last - 1, last, false, lines)
end

--- The `troupe/runLog` notification: the rest of a run's output, as it is written.
function M.on_run_log(_, params)
  params = params or {}
  log_append(params.run_id, params.text, params.ended)
end

--- The attached troupe client, if any.
function M.client()
  return vim.lsp.get_clients({ name = 'troupe' })[1]
end

--- Runs a daemon operation; calls `on_result(result)` or reports the error.
function M.call(operation, params, on_result)
  local client = M.client()
  if not client then
    vim.notify('troupe: the LSP client is not running (:checkhealth troupe)', vim.log.levels.ERROR)
    return
  end
  client:request('workspace/executeCommand', {
    command = 'troupe.' .. operation,
    -- Neovim encodes an empty Lua table as [], so always send an object.
    arguments = { vim.tbl_isempty(params or {}) and vim.empty_dict() or params },
  }, function(err, result)
    if err then
      vim.notify('troupe: ' .. operation .. ': ' .. err.message, vim.log.levels.ERROR)
    elseif on_result then
      on_result(result)
    end
  end)
end

--- Shows a value in a scratch buffer.
local function show(title, value)
  local lines = vim.split(vim.inspect(value), '\n')
  table.insert(lines, 1, '# ' .. title)
  vim.cmd('botright new')
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
end

--- The lines of a run tree (`get_run_tree`): one run a line, indented under the run that started
--- it, with why it was started, its status and the start of its output.
function M.tree_lines(run_id, tree)
  local total = tree.total or {}
  local head = string.format('# run %s', run_id)
  if tree.chain and #tree.chain > 0 then
    head = head .. '  chain ' .. table.concat(tree.chain, ' > ')
  end
  head = head .. string.format('  (%d tokens in, %d out, $%.4f)', total.input_tokens or 0,
    total.output_tokens or 0, total.cost_usd or 0)
  local lines = { head }
  for _, r in ipairs(tree.runs or {}) do
    local said = r.error ~= vim.NIL and r.error or r.output
    said = (said ~= vim.NIL and said or ''):gsub('\n', ' ')
    if #said > 80 then
      said = said:sub(1, 77) .. '...'
    end
    table.insert(lines, string.format('%s%s [%s] %s  %s  %s', string.rep('  ', r.depth or 0), r.agent,
      r.trigger ~= vim.NIL and r.trigger or 'member', r.status, r.run_id:sub(-8), said))
  end
  return lines
end

local function show_lines(lines)
  vim.cmd('botright new')
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  return buf
end

--- Shows a run's tree in a scratch buffer; `on_shown(buf, lines)` once it is there.
function M.show_tree(run_id, on_shown)
  M.call('get_run_tree', { run_id = run_id }, function(tree)
    local lines = M.tree_lines(run_id, tree)
    local buf = show_lines(lines)
    if on_shown then
      on_shown(buf, lines)
    end
  end)
end

local function text(v)
  return (v ~= nil and v ~= vim.NIL) and tostring(v) or ''
end

--- The lines of a party's plan (`get_plan`): where the collaboration is, then one line a step
--- (state, id, owner, title) with its acceptance text, then the draft under review.
function M.plan_lines(party_id, view)
  local committed = view.committed ~= vim.NIL and view.committed or nil
  local head = string.format('# plan of party %s: %s', party_id, text(view.collab_state))
  if committed then
    head = head .. string.format(' (version %d, committed by %s)', committed.version, text(committed.committed_by))
  end
  local lines = { head }
  for _, s in ipairs(view.steps or {}) do
    local spec = s.spec or {}
    table.insert(lines, string.format('%-11s %s [%s] %s', s.state, s.step_id, s.owner_role, text(spec.title)))
    if text(spec.acceptance) ~= '' then
      table.insert(lines, '            accept: ' .. text(spec.acceptance))
    end
    if text(s.reason) ~= '' then
      table.insert(lines, '            last: ' .. text(s.reason):gsub('\n', ' '))
    end
  end
  local draft = view.draft ~= vim.NIL and view.draft or nil
  if draft then
    table.insert(lines, string.format('## draft version %d by %s: %d steps, %d reviews', draft.version,
      text(draft.proposed_by), #(draft.steps or {}), #(draft.reviews or {})))
    for _, r in ipairs(draft.reviews or {}) do
      table.insert(lines, string.format('   %s: %s %s', r.reviewer, r.verdict, text(r.comments)))
    end
  end
  return lines
end

--- Whether a timeline event concerns `member` (a role or a session id).
local function concerns(e, member)
  local d = e.data or {}
  for _, v in ipairs({ e.session_id, d.role, d.by, d.owner_role, d.voter, d.to_role, d.from_role, d.reviewer }) do
    if v == member then
      return true
    end
  end
  return false
end

--- The lines of a party's timeline (`list_events`), optionally only what concerns one member.
function M.timeline_lines(party_id, events, member)
  local lines = { '# timeline of party ' .. party_id .. (member and (' for ' .. member) or '') }
  for _, e in ipairs(events or {}) do
    if not member or concerns(e, member) then
      local data = vim.json.encode(e.data or vim.empty_dict())
      if #data > 100 then
        data = data:sub(1, 97) .. '...'
      end
      table.insert(lines, string.format('%s %s %s', text(e.created_at):sub(12, 19), e.kind, data))
    end
  end
  return lines
end

--- Calls `fn(party_id)` with the party named, or the one picked among those running (among all
--- with `any`).
local function with_party(party_id, fn, any)
  if party_id then
    return fn(party_id)
  end
  M.call('list_parties', any and {} or { status = 'running' }, function(r)
    local parties = r.parties or {}
    if #parties == 1 then
      return fn(parties[1].party_id)
    end
    vim.ui.select(parties, {
      prompt = 'Troupe: which party?',
      format_item = function(p)
        return string.format('%s (%s)', p.name, p.party_id:sub(-8))
      end,
    }, function(p)
      if p then
        fn(p.party_id)
      end
    end)
  end)
end

--- The member last opened for review ({ party_id, role, index, workdir }), the default of the
--- review commands outside a review buffer.
M.reviewing = nil

--- A member's checkout in a list: `role#i status, N ahead, M files`.
local function worktree_label(w)
  return string.format('%s#%d %s, %d ahead, %d files', w.role, w.index, w.status, w.ahead, #(w.changed_files or {}))
end

--- Calls `fn(member)` with the member named by `args` (party, role, index), else the one picked
--- among the party's checkouts (`list_worktrees`).
local function with_member(args, fn)
  with_party(args[1], function(party_id)
    if args[2] then
      return fn({ party_id = party_id, role = args[2], index = tonumber(args[3]) or 0 })
    end
    M.call('list_worktrees', { party_id = party_id }, function(r)
      local all = r.worktrees or {}
      if #all == 0 then
        vim.notify('troupe: this party has no member checkouts')
        return
      end
      vim.ui.select(all, {
        prompt = 'Troupe: review which member?',
        format_item = worktree_label,
      }, function(w)
        if w then
          fn({ party_id = party_id, role = w.role, index = w.index, workdir = w.workdir })
        end
      end)
    end)
  end, true)
end

--- A read-only scratch buffer named `name` holding `text`, with `path`'s filetype.
local function scratch(name, text, path, review)
  for _, old in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(old) == name then
      vim.api.nvim_buf_delete(old, { force = true })
    end
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  local lines = vim.split(text, '\n', { plain = true })
  if lines[#lines] == '' then
    table.remove(lines)
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = vim.filetype.match({ filename = path }) or ''
  vim.b[buf].troupe_review = review
  return buf
end

--- Opens `path` of `member`'s branch in a new tab: left the file where the branch forked, right
--- the file at its tip, both in diff mode; `on_open(base_buf, head_buf)` once it is there.
function M.open_review(member, path, on_open)
  local params = { party_id = member.party_id, role = member.role, index = member.index, path = path }
  M.call('get_member_diff', params, function(r)
    local file = (r.files or {})[1] or {}
    local who = string.format('%s#%d', member.role, member.index)
    local review = { party_id = member.party_id, role = member.role, index = member.index, path = path }
    local head = scratch(string.format('troupe://%s/%s/head/%s', member.party_id, who, path),
      text(file.head_text), path, review)
    local base = scratch(string.format('troupe://%s/%s/base/%s', member.party_id, who, path),
      text(file.base_text), path, review)
    vim.cmd('tab sbuffer ' .. head)
    local head_win = vim.api.nvim_get_current_win()
    vim.cmd('leftabove vertical sbuffer ' .. base)
    vim.cmd('diffthis')
    vim.api.nvim_set_current_win(head_win)
    vim.cmd('diffthis')
    if on_open then
      on_open(base, head)
    end
  end)
end

--- The member a review command is about: `args` (party, role, index), else the review buffer's,
--- else the last one opened; with the path and line under the cursor when it knows them.
local function review_target(args)
  if args[1] and args[2] then
    return { party_id = args[1], role = args[2], index = tonumber(args[3]) or 0 }
  end
  local here = vim.b.troupe_review
  if here then
    return here, here.path, vim.api.nvim_win_get_cursor(0)[1]
  end
  local m = M.reviewing
  if not m then
    vim.notify('troupe: open a member with :Troupe review first', vim.log.levels.ERROR)
    return nil
  end
  -- A file of the member's worktree: its path there.
  local file = vim.api.nvim_buf_get_name(0)
  if m.workdir and file:sub(1, #m.workdir + 1) == m.workdir .. '/' then
    return m, file:sub(#m.workdir + 2), vim.api.nvim_win_get_cursor(0)[1]
  end
  return m
end

local REVIEWED = { approve = 'approved', request_changes = 'asked for changes from', comment = 'commented on' }

--- Sends a review of `member` (`review_member`) and says what became of it. A member that has
--- finished can be started again with a review that asks for something.
local function send_review(member, verdict, comments, summary)
  local function send(restart)
    local params = { party_id = member.party_id, role = member.role, index = member.index, verdict = verdict,
      comments = #comments > 0 and comments or nil, summary = summary, restart = restart }
    M.call('review_member', params, function(r)
      local sent = r.restarted_run_id and ' (started again with it)'
        or ((r.delivered or verdict == 'approve') and '' or ' (not running: the review is on the timeline)')
      vim.notify(string.format('troupe: %s %s#%d%s', REVIEWED[verdict], r.role, r.index, sent))
    end)
  end
  if verdict == 'approve' or member.status == nil or member.status == 'running' then
    return send(false)
  end
  vim.ui.select({ 'Start it again with this review', 'Only record the review' }, {
    prompt = string.format('Troupe: %s#%d is %s', member.role, member.index, member.status),
    format_item = function(s)
      return s
    end,
  }, function(choice)
    if choice then
      send(choice == 'Start it again with this review')
    end
  end)
end

local function set(v)
  return v ~= nil and v ~= vim.NIL
end

--- Answers an inbox item: runs its `answer.op` with its params, plus the choice picked with
--- vim.ui.select in its `choice_field` when it has choices, or the words typed with vim.ui.input
--- when it has a `choice_field` and no choices (an agent's free-text question); one with neither,
--- such as an escalation, is answered at once: dismissed. `on_done()` once the daemon took it.
function M.answer(item, on_done)
  local a = item.answer or {}
  local function send(choice)
    local params = vim.deepcopy(set(a.params) and a.params or {})
    local said = a.op == 'dismiss_inbox_item' and 'dismissed' or 'answered'
    if choice ~= nil then
      params[a.choice_field] = choice
      said = 'answered ' .. tostring(choice) .. ':'
    end
    M.call(a.op, params, function()
      vim.notify(string.format('troupe: %s %s', said, item.title))
      if on_done then
        on_done()
      end
    end)
  end
  local choices = set(a.choices) and a.choices or {}
  if not set(a.choice_field) then
    return send(nil)
  end
  if #choices == 0 then
    return vim.ui.input({ prompt = item.title .. ' ' }, function(typed)
      if typed ~= nil and typed ~= '' then
        send(typed)
      end
    end)
  end
  vim.ui.select(choices, { prompt = item.title, format_item = tostring }, function(choice)
    if choice ~= nil then
      send(choice)
    end
  end)
end

M.subcommands = {
  -- Everything waiting for you in the project: `:Troupe inbox`; pick an item, then its answer.
  inbox = function()
    M.call('list_inbox', {}, function(r)
      local items = r.items or {}
      if #items == 0 then
        vim.notify('troupe: nothing waits for you')
        return
      end
      vim.ui.select(items, {
        prompt = string.format('Troupe: %d waiting for you', #items),
        format_item = function(i)
          return string.format('%s: %s', i.kind, i.title)
        end,
      }, function(item)
        if item then
          M.answer(item)
        end
      end)
    end)
  end,
  -- A member's branch: `:Troupe review [party_id] [role] [index]`; pick a changed file, see it
  -- in a diff split.
  review = function(args)
    with_member(args, function(member)
      M.call('get_member_diff', { party_id = member.party_id, role = member.role, index = member.index }, function(r)
        member.workdir = member.workdir or (r.worktree or {}).workdir
        member.status = (r.worktree or {}).status
        M.reviewing = member
        local files = r.files or {}
        if #files == 0 then
          vim.notify(string.format('troupe: %s#%d has changed nothing yet', member.role, member.index))
          return
        end
        vim.ui.select(files, {
          prompt = string.format('Troupe: %s#%d changed %d files (+%d -%d)', member.role, member.index, #files,
            r.additions, r.deletions),
          format_item = function(f)
            return string.format('%s %s +%d -%d%s', f.path, f.status, f.additions, f.deletions,
              f.binary and ' (binary)' or '')
          end,
        }, function(f)
          if f then
            M.open_review(member, f.path)
          end
        end)
      end)
    end)
  end,
  -- A comment on the line under the cursor: `:Troupe comment {text}`.
  comment = function(args)
    local member, path, line = review_target({})
    local said = table.concat(args, ' ')
    if member and said ~= '' then
      send_review(member, 'comment', { { path = path, line = path and line or nil, text = said } })
    end
  end,
  -- Best of N: `:Troupe pick [party_id] [role]` picks the attempt of a role that lands.
  pick = function(args)
    with_party(args[1], function(party_id)
      M.call('list_worktrees', { party_id = party_id }, function(r)
        local by_role, roles = {}, {}
        for _, w in ipairs(r.worktrees or {}) do
          if not by_role[w.role] then
            by_role[w.role] = {}
            table.insert(roles, w.role)
          end
          table.insert(by_role[w.role], w)
        end
        local function choose(role)
          vim.ui.select(by_role[role] or {}, {
            prompt = string.format('Troupe: which attempt of %s lands?', role),
            format_item = worktree_label,
          }, function(w)
            if w then
              M.call('pick_member', { party_id = party_id, role = w.role, index = w.index,
                reason = 'picked in Neovim' }, function()
                vim.notify(string.format('troupe: picked %s#%d to land', w.role, w.index))
              end)
            end
          end)
        end
        if args[2] then
          return choose(args[2])
        end
        -- The roles with attempts to choose from.
        local many = vim.tbl_filter(function(role)
          return #by_role[role] > 1
        end, roles)
        if #many == 1 then
          return choose(many[1])
        end
        vim.ui.select(many, { prompt = 'Troupe: pick for which role?', format_item = tostring }, function(role)
          if role then
            choose(role)
          end
        end)
      end)
    end, true)
  end,
  ['approve-member'] = function(args)
    local member = review_target(args)
    if member then
      send_review(member, 'approve', {})
    end
  end,
  -- `:Troupe request-changes {summary}`.
  ['request-changes'] = function(args)
    local member = review_target({})
    local summary = table.concat(args, ' ')
    if member and summary ~= '' then
      send_review(member, 'request_changes', {}, summary)
    end
  end,

  -- A party's plan: `:Troupe plan [party_id]`.
  plan = function(args)
    with_party(args[1], function(party_id)
      M.call('get_plan', { party_id = party_id }, function(view)
        show_lines(M.plan_lines(party_id, view))
      end)
    end)
  end,
  -- Vote (as the person) on an open decision, or choose for a tied one: `:Troupe decide [party_id]`.
  decide = function(args)
    with_party(args[1], function(party_id)
      M.call('list_decisions', { party_id = party_id }, function(r)
        local open = vim.tbl_filter(function(d)
          return d.status ~= 'committed'
        end, r.decisions or {})
        if #open == 0 then
          vim.notify('troupe: no open decision')
          return
        end
        vim.ui.select(open, {
          prompt = 'Troupe: which decision?',
          format_item = function(d)
            return string.format('%s [%s, %d votes]', d.topic, d.status, #(d.votes or {}))
          end,
        }, function(d)
          if not d then
            return
          end
          vim.ui.select(d.options, { prompt = d.topic }, function(option)
            if not option then
              return
            end
            local op = d.status == 'tied' and 'commit_decision' or 'vote'
            M.call(op, { decision_id = d.decision_id, option = option }, function(res)
              local out = res.decision
              vim.notify(string.format('troupe: %s is %s%s', out.topic, out.status,
                out.chosen ~= vim.NIL and (': ' .. out.chosen) or ''))
            end)
          end)
        end)
      end)
    end)
  end,
  -- What happened in a party, oldest first: `:Troupe timeline [party_id] [member]`.
  timeline = function(args)
    with_party(args[1], function(party_id)
      M.call('list_events', { party_id = party_id, limit = 1000 }, function(r)
        show_lines(M.timeline_lines(party_id, r.events, args[2]))
      end)
    end)
  end,
  -- A run and every run it started (pattern steps, subagents): `:Troupe runs [run_id]`;
  -- without one, pick among the runs.
  runs = function(args)
    if args[1] then
      return M.show_tree(args[1])
    end
    M.call('list_agents', {}, function(r)
      local roots = vim.tbl_filter(function(run)
        return run.flow_root == nil or run.flow_root == vim.NIL
      end, r.runs or {})
      if #roots == 0 then
        vim.notify('troupe: no agent runs')
        return
      end
      vim.ui.select(roots, {
        prompt = 'Troupe: runs',
        format_item = function(run)
          return string.format('%s %s (%s)', run.agent_name, run.status, run.run_id:sub(-8))
        end,
      }, function(run)
        if run then
          M.show_tree(run.run_id)
        end
      end)
    end)
  end,
  launch = function(args)
    M.call('launch_party', { name = args[1] or 'feature-development' }, function(r)
      vim.notify('troupe: launched party ' .. r.party_id)
    end)
  end,
  -- `:Troupe issue <party> <issue>`: the party takes the issue (OWNER/REPO#N, #N for the
  -- project's own repository, or its URL) as its task and delivers a pull request.
  issue = function(args)
    local name, issue = args[1], args[2]
    if not name or not issue then
      vim.notify('troupe: issue needs a party and an issue (:Troupe issue {party} {OWNER/REPO#N|#N|url})',
        vim.log.levels.ERROR)
      return
    end
    M.call('launch_party', { name = name, issue = issue }, function(r)
      vim.notify('troupe: launched party ' .. r.party_id .. ' on ' .. issue)
    end)
  end,
  status = function(args)
    if args[1] then
      M.call('get_party_status', { party_id = args[1] }, function(r) show('party ' .. args[1], r) end)
    else
      M.call('list_parties', {}, function(r) show('parties', r.parties) end)
    end
  end,
  agents = function()
    M.call('list_agents', {}, function(r) show('agent runs', r.runs) end)
  end,
  -- A run's output, live: `:Troupe log <run_id>` opens it in a buffer that grows as it writes.
  log = function(args)
    local run_id = args[1]
    if not run_id then
      vim.notify('troupe: log needs a run id (:Troupe agents lists them)', vim.log.levels.ERROR)
      return
    end
    M.call('get_run_log', { run_id = run_id }, function(r)
      vim.cmd('botright new')
      local buf = vim.api.nvim_get_current_buf()
      vim.bo[buf].buftype = 'nofile'
      vim.bo[buf].bufhidden = 'wipe'
      vim.api.nvim_buf_set_name(buf, 'troupe://log/' .. run_id)
      M.logs[run_id] = buf
      log_append(run_id, r.text, r.ended)
    end)
  end,
  send = function(args)
    local from, to = args[1], args[2]
    local content = table.concat(vim.list_slice(args, 3), ' ')
    M.call('send_message', { from_session_id = from, to_session_id = to, content = content }, function(r)
      vim.notify('troupe: sent ' .. r.message_id)
    end)
  end,
  cancel = function(args)
    M.call('cancel_party', { party_id = args[1] }, function(r)
      vim.notify('troupe: party ' .. r.party.party_id .. ' ' .. r.party.status)
    end)
  end,
  -- Pending requests, including those that touch no file: pick one, then a decision.
  approvals = function()
    M.call('list_approvals', { status = 'pending' }, function(r)
      if #r.approvals == 0 then
        vim.notify('troupe: no pending requests')
        return
      end
      vim.ui.select(r.approvals, {
        prompt = 'Troupe: pending requests',
        format_item = function(a)
          local warning = a.is_dangerous and ('[DANGEROUS: ' .. (a.danger_reason or '') .. '] ') or ''
          return string.format('%s%s %s (%s)', warning, a.tool_name, a.subject, a.role_name or a.session_id)
        end,
      }, function(a)
        if not a then
          return
        end
        -- No rule may answer a request outside the member's worktree: no approve_pattern for it.
        local decisions = a.outside_worktree and { 'approve', 'deny', 'abort' }
          or { 'approve', 'deny', 'approve_pattern', 'abort' }
        vim.ui.select(decisions, { prompt = a.tool_name .. ' ' .. a.subject }, function(d)
          if d then
            M.call('decide_approval', { approval_id = a.approval_id, decision = d }, function(res)
              vim.notify('troupe: ' .. res.approval.status)
            end)
          end
        end)
      end)
    end)
  end,
  start = function(args)
    local agent, parent = args[1], args[2]
    local prompt = table.concat(vim.list_slice(args, 3), ' ')
    M.call('start_agent', { agent = agent, parent_session_id = parent, prompt = prompt }, function(r)
      vim.notify('troupe: started run ' .. r.run_id)
    end)
  end,
}

function M.command(opts)
  local args = vim.split(opts.args, '%s+', { trimempty = true })
  local sub = table.remove(args, 1)
  local fn = M.subcommands[sub or '']
  if not fn then
    vim.notify('troupe: :Troupe inbox|launch|issue|status|agents|runs|plan|decide|timeline|review|comment|approve-member|'
      .. 'request-changes|pick|send|cancel|approvals|start', vim.log.levels.ERROR)
    return
  end
  fn(args)
end

return M
