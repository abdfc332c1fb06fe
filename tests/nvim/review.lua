-- Headless Neovim test driver for `:Troupe review` on member $TEST_ROLE#0 of party $TEST_PARTY,
-- whose branch changed $TEST_FILE: picks the file, checks the diff split (both windows in diff
-- mode, the text where the branch forked on the left and at its tip on the right, the changed
-- and added lines highlighted), then comments on line 2 with `:Troupe comment`, asks for changes
-- and approves, and writes "N passed, N failed" (and failures) to $TEST_RESULT. Run by
-- tests/it/editors.rs, which checks the reviews on the party's timeline.
local harness = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/harness.lua')
local check, finish = harness.check, harness.finish
harness.setup()
vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('TEST_ROOT') .. '/notes.txt'))
local party, role, wanted = os.getenv('TEST_PARTY'), os.getenv('TEST_ROLE'), os.getenv('TEST_FILE')

local attached = vim.wait(30000, function()
  return require('troupe').client() ~= nil
end, 20)
check(attached, 'the troupe client is attached')
if not attached then
  return finish()
end

-- The file picker answers itself with $TEST_FILE, noting what it offered.
local offered = {}
vim.ui.select = function(items, opts, on_choice)
  for i, item in ipairs(items) do
    -- Asked whether to start the finished member again: only record the review.
    if item == 'Only record the review' then
      return on_choice(item, i)
    end
    table.insert(offered, opts.format_item(item))
    if item.path == wanted then
      return on_choice(item, i)
    end
  end
  on_choice(nil)
end
local said = {}
local notify = vim.notify
vim.notify = function(msg, ...)
  table.insert(said, msg)
  return notify(msg, ...)
end

local tab = vim.api.nvim_get_current_tabpage()
vim.cmd(string.format('Troupe review %s %s 0', party, role))
local opened = vim.wait(30000, function()
  return vim.api.nvim_get_current_tabpage() ~= tab and #vim.api.nvim_tabpage_list_wins(0) == 2
end, 20)
check(opened, 'the review opens in a new tab of two windows')
if not opened then
  return finish()
end
check(offered[1] ~= nil and offered[1]:find(wanted .. ' modified +2 -1', 1, true) == 1,
  'the changed files are listed: ' .. table.concat(offered, ' | '))

local wins = vim.api.nvim_tabpage_list_wins(0)
local left, right = wins[1], wins[2]
local function lines(win)
  return table.concat(vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(win), 0, -1, false), '|')
end
check(vim.wo[left].diff and vim.wo[right].diff, 'both windows are in diff mode')
check(lines(left) == 'one|two|three', 'the left side is the file where the branch forked: ' .. lines(left))
check(lines(right) == 'one|TWO|three|four', 'the right side is the branch tip: ' .. lines(right))
check(vim.api.nvim_get_current_win() == right, 'the cursor is on the member\'s side')
check(not vim.bo[vim.api.nvim_win_get_buf(right)].modifiable, 'the sides are read-only')
-- The hunks: line 2 changed, line 4 added, line 1 the same.
local hl = {}
for _, l in ipairs({ 1, 2, 4 }) do
  hl[l] = vim.fn.diff_hlID(l, 1)
end
check(hl[1] == 0 and hl[2] ~= 0 and hl[4] ~= 0,
  string.format('the changed and added lines are highlighted (%d %d %d)', hl[1], hl[2], hl[4]))

--- Runs a command and waits for its notice.
local function told(command, notice)
  local before = #said
  vim.cmd(command)
  local ok = vim.wait(30000, function()
    for i = before + 1, #said do
      if said[i]:find(notice, 1, true) then
        return true
      end
    end
    return false
  end, 20)
  check(ok, command .. ' is sent: ' .. table.concat(said, ' | '))
end

vim.api.nvim_win_set_cursor(right, { 2, 0 })
told('Troupe comment shout less here', 'troupe: commented on ' .. role .. '#0')
told('Troupe request-changes lower the voice', 'troupe: asked for changes from ' .. role .. '#0')
-- Outside the review buffers, the last member opened for review.
vim.cmd('tabprevious')
told('Troupe approve-member', 'troupe: approved ' .. role .. '#0')
finish()
