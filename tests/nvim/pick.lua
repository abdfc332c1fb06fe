-- Headless Neovim test driver for `:Troupe pick` on party $TEST_PARTY, whose role $TEST_ROLE
-- ran two attempts and waits for the person's pick: offers both attempts, picks #$TEST_INDEX,
-- and writes "N passed, N failed" (and failures) to $TEST_RESULT. Run by tests/it/editors.rs,
-- which checks the pick on the party's timeline and that only that branch lands.
local harness = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/harness.lua')
local check, finish = harness.check, harness.finish
harness.setup()
vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('TEST_ROOT') .. '/notes.txt'))
local party, role, wanted = os.getenv('TEST_PARTY'), os.getenv('TEST_ROLE'), tonumber(os.getenv('TEST_INDEX'))

local attached = vim.wait(30000, function()
  return require('troupe').client() ~= nil
end, 20)
check(attached, 'the troupe client is attached')
if not attached then
  return finish()
end

-- The attempt picker answers itself with #$TEST_INDEX, noting what it offered.
local offered = {}
vim.ui.select = function(items, opts, on_choice)
  for i, item in ipairs(items) do
    table.insert(offered, opts.format_item(item))
    if type(item) == 'table' and item.index == wanted then
      return on_choice(item, i)
    end
  end
  on_choice(nil)
end
local said = {}
vim.notify = function(msg)
  table.insert(said, msg)
end

vim.cmd('Troupe pick ' .. party)
local notice = string.format('troupe: picked %s#%d to land', role, wanted)
local ok = vim.wait(20000, function()
  return vim.tbl_contains(said, notice)
end, 20)
check(ok, 'the pick is sent: ' .. table.concat(said, ' | '))
check(#offered == 2, 'both attempts are offered: ' .. table.concat(offered, ' | '))
check(offered[1] and offered[1]:find(role .. '#0 completed, 1 ahead, 1 files', 1, true) ~= nil,
  'an attempt is shown with its state: ' .. (offered[1] or 'nothing'))
finish()
