-- troupe: the Neovim front of Troupe. Commands run daemon operations through the `troupe` LSP
-- client (workspace/executeCommand `troupe.<operation>`); approvals arrive as diagnostics with
-- code actions (use vim.lsp.buf.code_action()).
local M = {}

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

M.subcommands = {
  launch = function(args)
    M.call('launch_party', { name = args[1] or 'feature-development' }, function(r)
      vim.notify('troupe: launched party ' .. r.party_id)
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
    vim.notify('troupe: :Troupe launch|status|agents|send|cancel|approvals|start', vim.log.levels.ERROR)
    return
  end
  fn(args)
end

return M
