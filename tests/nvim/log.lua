-- Headless Neovim test driver for `:Troupe log`: opens the output of run $TEST_RUN (a process
-- that said a line and waits for $TEST_GATE), lets it go on, and checks that the buffer grows
-- with the rest and says it ended; writes "N passed, N failed" (and failures) to $TEST_RESULT.
-- Run by tests/it/editors.rs with a real daemon.
local harness = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/harness.lua')
local check, finish = harness.check, harness.finish
harness.setup()
vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('TEST_ROOT') .. '/notes.txt'))

local attached = vim.wait(30000, function()
  return require('troupe').client() ~= nil
end, 20)
check(attached, 'the troupe client is attached')
if not attached then
  return finish()
end

local run = os.getenv('TEST_RUN')
vim.cmd('Troupe log ' .. run)
local function text()
  local buf = require('troupe').logs[run]
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return ''
  end
  return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
end
check(vim.wait(30000, function()
  return text():find('log: first', 1, true) ~= nil
end, 20), 'what it said so far is shown: ' .. text())
check(text():find('-- ended --', 1, true) == nil, 'it has not ended yet')

-- Let it go on: the rest arrives by itself (`troupe/runLog`).
local gate = io.open(os.getenv('TEST_GATE'), 'w')
gate:write('go')
gate:close()
check(vim.wait(30000, function()
  return text():find('-- ended --', 1, true) ~= nil
end, 20), 'the buffer says it ended: ' .. text())
check(text():find('log: second', 1, true) ~= nil, 'the rest was pushed: ' .. text())
check(vim.api.nvim_buf_get_name(require('troupe').logs[run]):find('troupe://log/', 1, true) ~= nil,
  'the buffer is named for the run')
finish()
