-- Headless Neovim test driver for `:Troupe inbox` in a project where a pending approval, an
-- escalated task and an agent's free-text question wait: all are pushed by the server
-- (`troupe/inbox`, kept in require('troupe').inbox) and offered; the approval is answered with
-- $TEST_DECISION (a second pick among its choices), the escalation is dismissed (nothing to
-- choose), and the question answered with words typed (vim.ui.input), each leaving the pushed
-- inbox. Writes "N passed, N failed" (and failures) to $TEST_RESULT. Run by
-- tests/it/editors.rs, which checks the daemon's inbox is empty and the approval's status.
local harness = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/harness.lua')
local check, finish = harness.check, harness.finish
harness.setup()
vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('TEST_ROOT') .. '/notes.txt'))
local decision = os.getenv('TEST_DECISION')

local attached = vim.wait(30000, function()
  return require('troupe').client() ~= nil
end, 20)
check(attached, 'the troupe client is attached')
if not attached then
  return finish()
end
local troupe = require('troupe')
local pushes = 0
vim.api.nvim_create_autocmd('User', {
  pattern = 'TroupeInbox',
  callback = function()
    pushes = pushes + 1
  end,
})

--- The pushed inbox's kinds, for messages.
local function kinds()
  return table.concat(vim.tbl_map(function(i)
    return i.kind
  end, troupe.inbox), ' ')
end

local all = vim.wait(30000, function()
  return #troupe.inbox == 3
end, 20)
check(all, 'the server pushed the three items: ' .. kinds())
local typed_for
vim.ui.input = function(opts, on_confirm)
  typed_for = opts.prompt
  on_confirm('Aurora')
end

-- The inbox picker takes the item of kind `wanted`; the choice picker takes $TEST_DECISION.
local wanted, offered, choices
vim.ui.select = function(items, opts, on_choice)
  if type(items[1]) == 'table' then
    offered = {}
    local found
    for i, item in ipairs(items) do
      table.insert(offered, opts.format_item(item))
      if item.kind == wanted and not found then
        found = i
      end
    end
    return on_choice(found and items[found], found)
  end
  choices = vim.tbl_map(opts.format_item, items)
  for i, c in ipairs(items) do
    if c == decision then
      return on_choice(c, i)
    end
  end
  on_choice(nil)
end
local said = {}
vim.notify = function(msg)
  table.insert(said, msg)
end

--- Runs `:Troupe inbox` taking the item of kind `kind`; waits for the notice starting `notice`.
local function answer(kind, notice)
  wanted, offered, choices = kind, nil, nil
  local before = #said
  vim.cmd('Troupe inbox')
  local ok = vim.wait(30000, function()
    for i = before + 1, #said do
      if said[i]:find(notice, 1, true) == 1 then
        return true
      end
    end
    return false
  end, 20)
  check(ok, 'the ' .. kind .. ' is answered: ' .. table.concat(said, ' | '))
end

answer('approval', 'troupe: answered ' .. decision .. ': session ')
offered = offered or {}
check(#offered == 3, 'the three items are offered: ' .. table.concat(offered, ' | '))
check(vim.tbl_contains(offered, 'escalation: task "Review the parser" needs you'),
  'the escalation is shown with its kind and title: ' .. table.concat(offered, ' | '))
check(offered[1] and offered[1]:find('approval: session .* asks to use shell: make') == 1,
  'the approval is shown with its kind and title: ' .. table.concat(offered, ' | '))
check(choices and choices[1] == 'approve' and choices[2] == 'deny' and choices[#choices] == 'abort',
  'the approval\'s decisions are offered: ' .. table.concat(choices or {}, ' | '))
local two = vim.wait(30000, function()
  return #troupe.inbox == 2
end, 20)
check(two, 'the answered approval leaves the pushed inbox: ' .. kinds())

answer('escalation', 'troupe: dismissed task "Review the parser" needs you')
check(offered and #offered == 2, 'the escalation and the question are left to offer')
check(choices == nil, 'an escalation has nothing to choose')
local one = vim.wait(30000, function()
  return #troupe.inbox == 1 and troupe.inbox[1].kind == 'question'
end, 20)
check(one, 'the dismissed escalation leaves the pushed inbox: ' .. kinds())

answer('question', 'troupe: answered Aurora: session ')
check(choices == nil, 'a free-text question has nothing to choose')
check(typed_for and typed_for:find('Name the release?', 1, true) ~= nil,
  'the words are asked for with the question: ' .. tostring(typed_for))
local empty = vim.wait(30000, function()
  return #troupe.inbox == 0
end, 20)
check(empty, 'the pushed inbox is empty: ' .. kinds())
check(pushes >= 2, 'User TroupeInbox fired at each push: ' .. pushes)
finish()
