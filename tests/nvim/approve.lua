-- Headless Neovim test driver: opens a file a worker asked to edit, waits for Troupe's
-- diagnostic, runs one of its code actions through the standard vim.lsp.buf.code_action(),
-- waits for the diagnostic to go, and writes "N passed, N failed" (and failures) to
-- $TEST_RESULT. Run by tests/it/editors.rs with a real daemon and worker.
local harness = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/harness.lua')
local check, finish = harness.check, harness.finish
harness.setup()
vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('TEST_FILE')))
local buf = vim.api.nvim_get_current_buf()

local function troupe_diags()
  return vim.tbl_filter(function(d)
    return d.source == 'troupe'
  end, vim.diagnostic.get(buf))
end

local appeared = vim.wait(30000, function()
  return #troupe_diags() > 0
end, 20)
check(appeared, 'a troupe diagnostic appears on the file')
if not appeared then
  return finish()
end
local d = troupe_diags()[1]
check(d.lnum == tonumber(os.getenv('TEST_LINE')) - 1, 'the diagnostic is on the requested line (got ' .. d.lnum .. ')')
check(d.message:find('write_file', 1, true) ~= nil, 'the message names the tool: ' .. d.message)
check(d.message:find('+patched', 1, true) ~= nil, 'the message shows the diff preview')

-- The code actions offered, then the one to run.
vim.api.nvim_win_set_cursor(0, { d.lnum + 1, 0 })
local client = require('troupe').client()
check(client ~= nil, 'the troupe client is attached')
local titles = {}
local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
params.context = { diagnostics = {}, only = { 'quickfix' } }
local resp = client:request_sync('textDocument/codeAction', params, 10000, buf)
for _, a in ipairs((resp and resp.result) or {}) do
  table.insert(titles, a.title)
end
check(vim.tbl_contains(titles, 'Troupe: Approve') and vim.tbl_contains(titles, 'Troupe: Deny')
  and vim.tbl_contains(titles, 'Troupe: Approve pattern…') and vim.tbl_contains(titles, 'Troupe: Abort agent'),
  'all four actions are offered: ' .. table.concat(titles, ', '))

local wanted = os.getenv('TEST_ACTION')
vim.lsp.buf.code_action({
  apply = true,
  filter = function(a)
    return a.title == wanted
  end,
})
local cleared = vim.wait(30000, function()
  return #troupe_diags() == 0
end, 20)
check(cleared, 'the diagnostic goes once the request is decided')
finish()
