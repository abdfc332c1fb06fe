-- Headless Neovim test driver for `:Troupe plan`, `:Troupe timeline` and `:Troupe decide` on party
-- $TEST_PARTY (a committed plan, an open decision the person votes on): checks the buffers the
-- commands show, votes $TEST_OPTION through the pickers, and writes "N passed, N failed" (and
-- failures) to $TEST_RESULT. Run by tests/it/editors.rs with a real daemon.
local harness = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/harness.lua')
local check, finish = harness.check, harness.finish
harness.setup()
vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('TEST_ROOT') .. '/notes.txt'))
local party = os.getenv('TEST_PARTY')

local attached = vim.wait(30000, function()
  return require('troupe').client() ~= nil
end, 20)
check(attached, 'the troupe client is attached')
if not attached then
  return finish()
end

--- Runs a command and waits for the scratch buffer whose first line starts with `head`.
local function shown_by(command, head)
  local before = vim.api.nvim_get_current_buf()
  vim.cmd(command)
  local lines
  local ok = vim.wait(30000, function()
    local buf = vim.api.nvim_get_current_buf()
    local l = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    if buf ~= before and l[1] and l[1]:find(head, 1, true) == 1 then
      lines = l
      return true
    end
    return false
  end, 20)
  check(ok, command .. ' shows its buffer')
  return lines or {}
end

local plan = shown_by('Troupe plan ' .. party, '# plan of party ' .. party)
check((plan[1] or ''):find('executing (version 1, committed by person)', 1, true) ~= nil, 'the header: ' .. (plan[1] or ''))
check((plan[2] or ''):find('^in_progress design %[dev%] the design step') ~= nil, 'the first step: ' .. (plan[2] or ''))
check((plan[3] or ''):find('accept: design works', 1, true) ~= nil, 'its acceptance: ' .. (plan[3] or ''))
local pending = vim.tbl_filter(function(l) return l:find('^pending     build %[dev%]') ~= nil end, plan)
check(#pending == 1, 'the second step is pending: ' .. table.concat(plan, ' | '))

local all = shown_by('Troupe timeline ' .. party, '# timeline of party ' .. party)
local kinds = table.concat(all, '\n')
for _, k in ipairs({ 'plan_proposed', 'plan_committed', 'step_started', 'decision_proposed' }) do
  check(kinds:find(' ' .. k .. ' ', 1, true) ~= nil, 'the timeline has ' .. k)
end
local dev = shown_by('Troupe timeline ' .. party .. ' dev', '# timeline of party ' .. party .. ' for dev')
check(#dev >= 2 and #dev < #all, string.format('the member filter keeps %d of %d lines', #dev - 1, #all - 1))
check(table.concat(dev, '\n'):find('plan_proposed', 1, true) == nil, 'the person proposed the plan, not dev')

-- The pickers answer themselves: the open decision, then $TEST_OPTION.
local picked = {}
vim.ui.select = function(items, opts, on_choice)
  table.insert(picked, opts.prompt)
  for i, item in ipairs(items) do
    if type(item) == 'table' or item == os.getenv('TEST_OPTION') then
      return on_choice(item, i)
    end
  end
  on_choice(nil)
end
local said
local notify = vim.notify
vim.notify = function(msg, ...)
  said = msg
  return notify(msg, ...)
end
vim.cmd('Troupe decide ' .. party)
local voted = vim.wait(30000, function()
  return said ~= nil and said:find('is committed: ' .. os.getenv('TEST_OPTION'), 1, true) ~= nil
end, 20)
check(voted, 'the vote committed the decision: ' .. tostring(said))
check(picked[1] == 'Troupe: which decision?', 'a decision was picked: ' .. tostring(picked[1]))
finish()
