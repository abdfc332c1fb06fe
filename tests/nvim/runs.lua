-- Headless Neovim test driver for `:Troupe runs`: shows the tree of run $TEST_RUN (a pattern run
-- that has ended) through the plugin and checks its lines; writes "N passed, N failed" (and
-- failures) to $TEST_RESULT. Run by tests/it/editors.rs with a real daemon.
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

local shown
vim.cmd('Troupe runs ' .. os.getenv('TEST_RUN'))
-- The command shows the tree in a new scratch buffer; read it back.
local appeared = vim.wait(30000, function()
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  if lines[1] and lines[1]:find('^# run ') then
    shown = lines
    return true
  end
  return false
end, 20)
check(appeared, 'the run tree is shown')
if not appeared then
  return finish()
end
check(shown[1]:find('chain a > b', 1, true) ~= nil, 'the header lists the chain: ' .. shown[1])
check(shown[2]:find('^a %[subagent%] success') ~= nil, 'the root first: ' .. (shown[2] or ''))
check(shown[3]:find('^  a %[root%] success') ~= nil, 'its own step, indented: ' .. (shown[3] or ''))
check(shown[4]:find('^  b %[handoff%] success') ~= nil, 'the handoff step: ' .. (shown[4] or ''))
check(#shown == 4, 'one line a run (' .. #shown .. ' lines)')
finish()
